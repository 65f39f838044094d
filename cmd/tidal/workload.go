package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/internal/yamlconf"
)

// runWorkload runs one of the demo and benchmark workloads (hidden: `tidal workload KIND`).
// Each writes one JSON line per second to stdout.
func runWorkload(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("workload kind missing: server, loadgen, burner, antagonist or memhog")
	}
	kind, args := args[0], args[1:]
	fs := flag.NewFlagSet("workload "+kind, flag.ContinueOnError)
	report := fs.Duration("report", time.Second, "reporting interval")
	switch kind {
	case "server":
		addr := fs.String("addr", "127.0.0.1:8080", "listen address")
		work := fs.Duration("work", 1500*time.Microsecond, "CPU work per request")
		if err := parseFlags(fs, args, false); err != nil {
			return err
		}
		return workload.RunServer(ctx, workload.ServerConfig{Addr: *addr, WorkPerRequest: *work, Report: *report}, nil, os.Stdout)
	case "loadgen":
		url := fs.String("url", "http://127.0.0.1:8080/work", "URL to load: http://HOST:PORT/PATH, or redis://HOST:PORT/COMMAND/ARG/... for a Redis command")
		phases := fs.String("phases", "low:20s@150,spike:20s@600,low:20s@150", "name:duration@rps[-endrps],...")
		conns := fs.Int("connections", 0, "persistent connections (0: from the peak rate)")
		gzip := fs.Bool("gzip", false, "ask for gzip-compressed responses (Accept-Encoding: gzip)")
		if err := parseFlags(fs, args, false); err != nil {
			return err
		}
		ph, err := workload.ParsePhases(*phases)
		if err != nil {
			return err
		}
		_, err = workload.RunLoadGen(ctx, workload.LoadGenConfig{URL: *url, Gzip: *gzip, Phases: ph, Connections: *conns, Report: *report}, os.Stdout)
		return err
	case "burner":
		threads := fs.Int("threads", 2, "spinning threads")
		if err := parseFlags(fs, args, false); err != nil {
			return err
		}
		return workload.RunBurner(ctx, workload.BurnerConfig{Threads: *threads, Report: *report}, os.Stdout)
	case "antagonist":
		threads := fs.Int("threads", 1, "threads")
		size := fs.String("size", "64Mi", "buffer size")
		if err := parseFlags(fs, args, false); err != nil {
			return err
		}
		n, err := yamlconf.ParseSize(*size)
		if err != nil {
			return fmt.Errorf("--size: %v", err)
		}
		return workload.RunAntagonist(ctx, workload.AntagonistConfig{Threads: *threads, SizeBytes: n, Report: *report}, os.Stdout)
	case "memhog":
		target := fs.String("target", "1Gi", "memory to allocate and hold")
		rate := fs.String("rate", "256Mi", "allocation rate per second")
		if err := parseFlags(fs, args, false); err != nil {
			return err
		}
		t, err := yamlconf.ParseSize(*target)
		if err != nil {
			return fmt.Errorf("--target: %v", err)
		}
		r, err := yamlconf.ParseSize(*rate)
		if err != nil {
			return fmt.Errorf("--rate: %v", err)
		}
		return workload.RunMemoryHog(ctx, workload.MemoryHogConfig{TargetBytes: t, RateBytesPerSec: r, Report: *report}, os.Stdout)
	}
	return fmt.Errorf("unknown workload kind %q: want server, loadgen, burner, antagonist or memhog", kind)
}
