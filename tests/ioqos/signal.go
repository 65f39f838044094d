package ioqos

import (
	"os"
	"os/signal"
	"syscall"
)

// signalNotify delivers SIGTERM and SIGINT to c.
func signalNotify(c chan os.Signal) { signal.Notify(c, syscall.SIGTERM, syscall.SIGINT) }
