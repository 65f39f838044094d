// Command pause is the sandbox ("pause") image of the CRI integration tests: it holds the pod
// sandbox open until the runtime stops it. As PID 1 of its container it gets no default signal
// handling, so it must catch SIGTERM and SIGINT itself or StopPodSandbox waits for SIGKILL.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
