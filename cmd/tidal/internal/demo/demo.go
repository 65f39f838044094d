// Package demo is `tidal demo`: a live colocation demo on this host. It runs an online web server (shared
// tier), an offline CPU burner (reclaimed tier) and a load generator (system tier) as child
// processes through `tidal run`, so they go through the agent's API into real cgroups; drives
// the server through a low / spike / low schedule; prints one line per second of what the
// online service, the node and the agent are doing; and ends with a per-phase summary and a
// reading of how the agent reacted to the spike.
//
// The files, one job each:
//
//   - demo.go: the flags and Run, which finds or starts the agent and cleans up after it.
//   - agent.go: the in-process agent, when none runs on the host, and its cgroup tree.
//   - schedule.go: the load schedule (low, spike, low).
//   - children.go: the workloads as `tidal run` child processes, and stopping them.
//   - feed.go: reading a workload's report lines.
//   - session.go: starting the workloads and running the schedule.
//   - monitor.go, cpu.go, actions.go: the line printed every second.
//   - summary.go, reading.go: the per-phase table and the closing paragraph.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/agent/config"
)

// The load schedule as shares of --duration: low, spike, then low again (the rest).
const (
	lowShare   = 0.35
	spikeShare = 0.30
)

const (
	demoCgroupRoot = "tidal-demo"
	// demoPeakWindow is the in-process agent's published prediction window: short, so that
	// what it publishes visibly grows back within the demo too (its limits follow the
	// default cpu.limitWindow).
	demoPeakWindow = 10 * time.Second
	agentTimeout   = 5 * time.Second  // for the in-process agent to answer on its socket
	admitTimeout   = 10 * time.Second // for a workload to show up in the agent's status
	healthyTimeout = 10 * time.Second // for the web server to answer /healthz
	stopGrace      = 3 * time.Second  // between SIGTERM and SIGKILL
	// scheduleSlack is how long past the schedule the load generator may take to finish.
	scheduleSlack = 20 * time.Second
	actionWidth   = 55 // "last action" column: the sample line stays within 99 columns
	textWidth     = 96
)

// ErrInterrupted ends the demo early on SIGINT/SIGTERM (its context done); the command turns it
// into exit status 130.
var ErrInterrupted = errors.New("interrupted")

// Options are the demo's settings, from ParseFlags.
type Options struct {
	duration      time.Duration
	lowRPS        float64
	spikeRPS      float64
	work          time.Duration
	burnerThreads int
	socket        string
	cgroupRoot    string
}

// ParseFlags reads the flags of `tidal demo` and checks them.
func ParseFlags(args []string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 75*time.Second, "length of the load schedule: low 35%, spike 30%, low 35%")
	fs.Float64Var(&o.lowRPS, "low-rps", 150, "online requests/s in the low phases")
	fs.Float64Var(&o.spikeRPS, "spike-rps", 600, "online requests/s in the spike")
	fs.DurationVar(&o.work, "work", 1500*time.Microsecond, "CPU work per online request")
	fs.IntVar(&o.burnerThreads, "burner-threads", 2, "threads of the offline CPU burner")
	fs.StringVar(&o.socket, "socket", config.Default().SocketPath,
		"use the agent answering on this socket; without one the demo runs its own, in-process")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", demoCgroupRoot, "cgroup tree of the in-process agent (removed at the end)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: tidal demo [flags]   (as root)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.duration < 3*time.Second:
		return o, fmt.Errorf("--duration %s: want at least 3s", o.duration)
	case !(o.lowRPS > 0) || !(o.spikeRPS > 0):
		return o, fmt.Errorf("--low-rps %g, --spike-rps %g: want rates above 0", o.lowRPS, o.spikeRPS)
	case o.work <= 0 || o.work > 10*time.Second:
		return o, fmt.Errorf("--work %s: want a duration in (0, 10s]", o.work)
	case o.burnerThreads < 1:
		return o, fmt.Errorf("--burner-threads %d: want at least 1", o.burnerThreads)
	}
	return o, nil
}

// Run finds or starts the agent, runs the session, printing to out, and always cleans up after
// both. It needs root: its workloads run in cgroups managed by the agent.
func Run(ctx context.Context, opts Options, out io.Writer) (err error) {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the tidal binary: %w", err)
	}
	s := &session{opts: opts, self: self, out: out, started: time.Now()}
	if _, serr := agent.NewClient(opts.socket).Status(); serr == nil {
		s.socket = opts.socket
		fmt.Fprintf(out, "agent:    using the agent already running on %s\n", opts.socket)
	} else {
		if busy := cgroupsInUse(config.Default().Cgroup.MountPoint, opts.cgroupRoot); len(busy) > 0 {
			return fmt.Errorf("another tidal demo seems to be running: processes in %s and %d more cgroups", busy[0], len(busy)-1)
		}
		var local *localAgent
		if local, err = startLocalAgent(opts.cgroupRoot); err != nil {
			return fmt.Errorf("starting the in-process agent: %w", err)
		}
		defer func() {
			if err != nil && err != ErrInterrupted {
				local.printLogTail(os.Stderr, 15)
			}
			if serr := local.stop(); serr != nil {
				err = errors.Join(nonInterrupt(err), fmt.Errorf("cleaning up the in-process agent: %w", serr))
			}
		}()
		s.socket = local.cfg.SocketPath
		s.limitWindow = min(local.cfg.CPU.LimitWindow, local.cfg.CPU.PeakWindow)
		fmt.Fprintf(out, "agent:    in-process (no agent on %s), cgroup root %q, limit window %s, peak window %s\n",
			opts.socket, local.cfg.Cgroup.Root, s.limitWindow, local.cfg.CPU.PeakWindow)
		fmt.Fprintf(out, "          log %s (removed at the end)\n", local.logPath)
	}
	s.client = agent.NewClient(s.socket)
	return s.run(ctx)
}

// nonInterrupt keeps a cleanup failure from being reported as a plain interruption.
func nonInterrupt(err error) error {
	if err == ErrInterrupted {
		return errors.New("interrupted")
	}
	return err
}
