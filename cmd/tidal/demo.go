package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tidalqos/tidal/cmd/tidal/internal/demo"
)

// runDemo is `tidal demo`, a live colocation demo on this host (package demo).
func runDemo(ctx context.Context, args []string) error {
	opts, err := demo.ParseFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root: its workloads run in cgroups managed by the agent (run it as root)")
	}
	err = demo.Run(ctx, opts, os.Stdout)
	if err == demo.ErrInterrupted {
		fmt.Fprintln(os.Stderr, "tidal demo: interrupted; workloads stopped and cleaned up")
		return exitError{130}
	}
	return err
}
