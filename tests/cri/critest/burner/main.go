// Command burner is the CPU burner image of the CRI integration tests: the project's offline
// workload (internal/workload.RunBurner, what `tidal workload burner` runs) without the rest of
// cmd/tidal, whose NVML binding needs cgo and so cannot be linked static (CGO_ENABLED=0) for
// a libc-less image. It prints one JSON line per report interval and stops on SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
)

func main() {
	threads := flag.Int("threads", 1, "spinning threads")
	report := flag.Duration("report", time.Second, "reporting interval")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := workload.RunBurner(ctx, workload.BurnerConfig{Threads: *threads, Report: *report}, os.Stdout); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "burner:", err)
		os.Exit(1)
	}
}
