// Command colocation is tidal's colocation benchmark. On this machine, as root, it runs an
// online HTTP service (nginx and Apache httpd from Debian's packages, and tidal's own Go
// server: -servers) and offline work (a CPU burner and a cache antagonist) side by side under
// fifteen scenarios, each driven through the same compressed tidal day of load:
//
//	online-alone    the online service alone: the latency baseline
//	offline-alone   the offline work alone: the throughput baseline
//	naive           both, offline in plain cgroups with default shares (no isolation)
//	besteffort      offline under a parent with cpu.shares 2 (what kubelet does for BestEffort)
//	idle            offline under a parent with cpu.idle 1 (the kernel's idle class), no agent
//	static          offline pinned with cpuset to a fixed half of the CPUs
//	tidal           the tidal agent with its defaults: online in the shared tier, offline in
//	                the reclaimed tier, both started with `tidal run`
//	tidal-absolute  tidal with absolute run-queue wait targets only (no baselines)
//	tidal-auto      tidal with cpu.mechanism auto (5 s trials)
//	tidal-peak-limits tidal whose limits follow the 30 s peak window (cpu.limitWindow 30s)
//	tidal-no-burst  tidal without the fast path's burst window (loops.fastBurstWindow 0)
//	tidal-own-only  tidal managing only the run's own workloads (no -day-workloads)
//	tidal-idle      tidal with cpu.mechanism idle
//	tidal-quota     tidal with cpu.mechanism quota (the quota at all times, the default before)
//	tidal-shares    tidal with cpu.mechanism shares
//	tidal-cores     tidal with cpu.mechanism cores and cpu.minReclaimedMilliCPU 10 (whole cores of their own)
//
// and diagnostics, run only when -scenarios names them: two that take tidal's reclaimed pool
// apart without the agent, and what-ifs of a setting:
//
//	static-idle        offline under cpu.idle 1, pinned to the upper half of the CPUs
//	static-idle-quota  the same with a fixed CFS quota of 400m
//	online-alone-lower, split, split-idle, split-oracle: the online service and the offline
//	                   work on separate halves of the CPUs (docs/benchmark.md#sharing-a-core)
//	tidal-long-hold    tidal with interference.holdAfterFirstCut 10s (the default before 2.5s)
//	tidal-pool-hold    tidal with cpu.poolShrinkAfter 10s
//	tidal-pool-hold-3s tidal with cpu.poolShrinkAfter 3s
//	tidal-quota-on-cut-5s tidal with cpu.quotaAfterCut 5s
//	tidal-grow-500     tidal with cpu.growStepMilliCPU 500
//	tidal-limit-2s     tidal with cpu.limitWindow 2s
//	tidal-slo          tidal with an SLO probe on the online service (-probe-latency)
//	tidal-auto-slo     tidal-auto with the same SLO probe, which auto weighs instead of the wait
//	tidal-auto-shares  tidal-auto with shares among its candidates (one 4 s trial each)
//	tidal-no-wait-target tidal without the shared tier's run-queue wait target
//	tidal-slo-no-wait  tidal-slo without it: the probe, not the wait, judges online work
//	tidal-shares-no-wait tidal-shares without it
//	tidal-slow-tick-no-wait tidal-no-wait-target with a 50 ms fast-path tick (10 ms by default)
//
// The scenarios run interleaved (each server through A B C ..., then again) for -rounds rounds, so that
// whatever else the machine does affects them alike, and every figure is the median over the
// rounds with its min and max. It writes results.md, results.json and one PNG time-series
// plot per scenario into -out. With -overhead it measures only the agent's own CPU and memory
// with 200 workloads.
//
//	go run ./tests/colocation -out bench-results          (as root; about two hours)
//	go run ./tests/colocation -out /tmp/bench -quick      (about 6 minutes)
//
// docs/benchmark.md explains the method and how to read the results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the benchmark's flags.
type options struct {
	out    string
	rounds int
	// The compressed day: its length, the warm-up before it, and the online rates.
	day       time.Duration
	warmup    time.Duration
	valleyRPS float64
	peakRPS   float64
	spikeRPS  float64
	// work is the online CPU work per request.
	work time.Duration
	// Offline work.
	burnerThreads     int
	antagonistThreads int
	antagonistSize    string
	// The SLO on the 1-second p99: fixed, or sloFactor times the same round's online-alone p99.
	slo       time.Duration
	sloFactor float64
	// probeLatency is the target of the SLO probe the *-slo scenarios give the online service.
	probeLatency time.Duration
	scenarios    []string
	// servers are the online services, each driven through every scenario each round.
	servers  []string
	tidalBin string
	// tidalBaseline is a second tidal binary for the tidal-baseline-build scenario: two
	// builds of the agent in one interleaved run.
	tidalBaseline string
	// agentConfig is extra agent YAML for a what-if run (the published results use none).
	agentConfig string
	// Agent overhead: only that (overheadOnly), or also after the scenarios (duration > 0).
	overheadOnly      bool
	overheadDuration  time.Duration
	overheadWorkloads int
	// dayWorkloads are light workloads the agent manages during each tidal run.
	dayWorkloads int
	// command is the command line as typed, for the results.
	command string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("colocation", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "", "folder for results.md, results.json and the plots (required)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of interleaved scenarios (at least 3 for the published figures)")
	fs.DurationVar(&o.day, "day", 60*time.Second, "length of the compressed day: valley 20%, ramp 15%, peak 25%, spike 10%, valley 30%")
	fs.DurationVar(&o.warmup, "warmup", 8*time.Second, "offline work (and the agent) run this long before the day starts")
	fs.Float64Var(&o.valleyRPS, "valley-rps", 150, "online requests/s in the valleys")
	fs.Float64Var(&o.peakRPS, "peak-rps", 550, "online requests/s at the peak")
	fs.Float64Var(&o.spikeRPS, "spike-rps", 800, "online requests/s in the sudden spike")
	fs.DurationVar(&o.work, "work", 1500*time.Microsecond, "online CPU work per request")
	fs.IntVar(&o.burnerThreads, "burner-threads", 2, "threads of the offline CPU burner")
	fs.IntVar(&o.antagonistThreads, "antagonist-threads", 1, "threads of the offline cache antagonist")
	fs.StringVar(&o.antagonistSize, "antagonist-size", defaultAntagonistSize(), "buffer the cache antagonist sweeps (default: twice the last-level cache, at least 64Mi)")
	fs.DurationVar(&o.slo, "slo", 0, "SLO on the 1-second online p99 (0: -slo-factor times the round's online-alone p99)")
	fs.Float64Var(&o.sloFactor, "slo-factor", 2, "SLO as a multiple of the same round's online-alone p99")
	fs.DurationVar(&o.probeLatency, "probe-latency", 5*time.Millisecond, "the *-slo scenarios: the target of the online service's SLO probe (tidal run --slo-latency), which asks what the load asks (a GET of its page, or its Redis command)")
	scen := fs.String("scenarios", strings.Join(scenarioNames(runByDefault), ","), "scenarios to run, in this order each round (also the diagnostics "+
		strings.Join(scenarioNames(diagnostic), ", ")+")")
	srv := fs.String("servers", strings.Join(serverNames(), ","), "online services, each through every scenario each round: "+strings.Join(serverNames(), ", "))
	fs.StringVar(&o.tidalBin, "tidal", "", "a prebuilt tidal binary (default: build ./cmd/tidal)")
	fs.StringVar(&o.tidalBaseline, "tidal-baseline", "", "a second prebuilt tidal binary, which the tidal-baseline-build scenario runs: a change to the agent against the build before it, in one interleaved run")
	fs.StringVar(&o.agentConfig, "agent-config", "", "extra agent settings (a YAML file, e.g. cpu.peakWindow) for a what-if run; "+
		"not cgroup, stateDir, socketPath or metricsAddress, which the benchmark sets")
	fs.BoolVar(&o.overheadOnly, "overhead", false, "measure only the agent's overhead with -overhead-workloads workloads")
	fs.DurationVar(&o.overheadDuration, "overhead-duration", 60*time.Second, "length of the overhead measurement (0: skip it after the scenarios)")
	fs.IntVar(&o.overheadWorkloads, "overhead-workloads", 200, "light workloads admitted for the overhead measurement")
	fs.IntVar(&o.dayWorkloads, "day-workloads", 200, "light workloads (idle sleep processes, half shared, half reclaimed) the agent manages during each tidal run besides the run's own (and the *-day-workloads diagnostics place in cgroups of their own, no agent)")
	quick := fs.Bool("quick", false, "a short run to try things out: -day 12s -warmup 3s -overhead-duration 15s unless set")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage (as root): go run ./tests/colocation -out DIR [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["day"] {
			o.day = 12 * time.Second
		}
		if !set["warmup"] {
			o.warmup = 3 * time.Second
		}
		if !set["overhead-duration"] {
			o.overheadDuration = 15 * time.Second
		}
	}
	o.scenarios = strings.Split(*scen, ",")
	o.servers = strings.Split(*srv, ",")
	o.command = "go run ./tests/colocation " + strings.Join(args, " ")
	return o, o.validate(fs.NArg())
}

func (o options) validate(extra int) error {
	switch {
	case extra > 0:
		return errors.New("unexpected arguments")
	case o.out == "":
		return errors.New("-out DIR is required")
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	case o.day < 5*time.Second:
		return fmt.Errorf("-day %s: want at least 5s", o.day)
	case o.warmup < 0:
		return fmt.Errorf("-warmup %s: want >= 0", o.warmup)
	case !(o.valleyRPS > 0 && o.peakRPS > 0 && o.spikeRPS > 0):
		return errors.New("-valley-rps, -peak-rps and -spike-rps must be above 0")
	case o.work <= 0 || o.work > time.Second:
		return fmt.Errorf("-work %s: want a duration in (0, 1s]", o.work)
	case o.burnerThreads < 1 || o.antagonistThreads < 1:
		return errors.New("-burner-threads and -antagonist-threads must be at least 1")
	case o.probeLatency <= 0 || o.probeLatency > 10*time.Second:
		return fmt.Errorf("-probe-latency %s: want a duration in (0, 10s]", o.probeLatency)
	case o.sloFactor <= 0:
		return fmt.Errorf("-slo-factor %g: want > 0", o.sloFactor)
	case o.dayWorkloads < 0:
		return fmt.Errorf("-day-workloads %d: want 0 or more", o.dayWorkloads)
	case o.overheadWorkloads < 1:
		return fmt.Errorf("-overhead-workloads %d: want at least 1", o.overheadWorkloads)
	case o.overheadOnly && o.overheadDuration <= 0:
		return errors.New("-overhead needs -overhead-duration > 0")
	}
	for _, s := range o.servers {
		if _, ok := serverByName(s); !ok {
			return fmt.Errorf("-servers: unknown server %q (want some of %s)", s, strings.Join(serverNames(), ", "))
		}
	}
	for _, s := range o.scenarios {
		sc, ok := scenarioByName(s)
		if !ok {
			return fmt.Errorf("-scenarios: unknown scenario %q (want some of %s)", s, strings.Join(scenarioNames(anyScenario), ", "))
		}
		if sc.baselineBuild && o.tidalBaseline == "" {
			return fmt.Errorf("-scenarios %s runs the -tidal-baseline binary: give one", s)
		}
		for _, name := range o.servers {
			if srv, _ := serverByName(name); sc.sloMetric && srv.metric == "" {
				return fmt.Errorf("-scenarios %s reads the online service's latency histogram, and server %s exports none (go does)", s, name)
			}
		}
	}
	return nil
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "colocation:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "colocation: must run as root: it creates cgroups")
		os.Exit(2)
	}
	// Ctrl-C cancels the context: the run in progress stops, and everything is cleaned up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "colocation:", err)
		os.Exit(1)
	}
}

// run sets the machine up, runs the scenarios and the overhead measurement, writes the
// results, and always removes every cgroup and process it created.
func run(ctx context.Context, opts options) (err error) {
	b, err := newBench(opts, os.Stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()

	res := results{Options: describeOptions(opts), Machine: describeMachine(b), Started: time.Now()}
	if !opts.overheadOnly {
		if res.Runs, err = b.runRounds(ctx); err != nil {
			return err
		}
		for _, srv := range opts.servers {
			res.Scenarios = append(res.Scenarios, summarize(runsOf(res.Runs, srv), srv, opts)...)
		}
	}
	if opts.overheadOnly || opts.overheadDuration > 0 {
		o, err := b.measureOverhead(ctx)
		if err != nil {
			return fmt.Errorf("agent overhead: %w", err)
		}
		res.Overhead = &o
	}
	res.Finished = time.Now()
	return writeResults(opts.out, res)
}
