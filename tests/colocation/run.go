package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/interference"
)

// The run-queue wait sampler: as the agent's defaults (interference.interval and
// minRunMilliCPU 20 of 500 ms).
const (
	waitInterval = 500 * time.Millisecond
	waitMinRun   = 10 * time.Millisecond
)

// waitSample is one reading of the online service's run-queue wait per unit of CPU run.
type waitSample struct {
	At    time.Time
	Ratio float64
}

// scenarioRun is one run of one scenario. It owns every process it starts, its samplers and
// its cgroup (a fresh one under the bench root, never reused); cleanup stops and removes them
// all, whatever happened.
type scenarioRun struct {
	b      *bench
	sc     scenario
	server onlineServer
	name   string // "r1-go-naive": names its cgroup, logs and agent folder
	rel    string // its cgroup
	agent  *agentProc
	procs  []*proc
	bg     *background
	cpu    []nodeCPU    // node CPU readings, once a second
	waits  []waitSample // the online service's run-queue wait, twice a second
	watch  *agentWatch  // the agent's lending and actions (tidal only)
	// contention is the agent's reaction to online work using more than it kept (tidal only).
	contention *contentionProbe
	// sleepers are the light workloads beside the run's own: the agent's to manage, or in a
	// no-agent scenario with dayWorkloads the benchmark's own cgroups'.
	sleepers []*exec.Cmd
}

// serverWorkload names the online service: its process and, under the agent, its workload.
const serverWorkload = "server"

// Timeouts and grace periods of a run.
const (
	healthyTimeout = 15 * time.Second // for the online service to answer (it calibrates first)
	stopGrace      = 3 * time.Second  // between SIGTERM and SIGKILL
	drainSlack     = 30 * time.Second // for the load generator to finish after its day
	agentPoll      = 500 * time.Millisecond
)

// runScenario runs scenario sc once and returns what it measured, or the error that stopped it.
func (b *bench) runScenario(ctx context.Context, server onlineServer, sc scenario, round int) runResult {
	name := fmt.Sprintf("r%d-%s-%s", round, server.Name, sc.Name)
	r := &scenarioRun{b: b, sc: sc, server: server, name: name, rel: path.Join(b.root, name)}
	res, err := r.run(ctx)
	err = errors.Join(err, r.cleanup())
	res.Server, res.Scenario, res.Round = server.Name, sc.Name, round
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

// run goes through the run's steps: start everything, warm up, drive the day, then stop the
// workloads in order so that each prints its final report, and read what they reported.
func (r *scenarioRun) run(ctx context.Context) (runResult, error) {
	w, err := r.start(ctx)
	if err != nil {
		return runResult{}, err
	}
	if !sleepCtx(ctx, r.b.opts.warmup) {
		return runResult{}, ctx.Err()
	}
	d, err := r.driveDay(ctx, w.addr)
	if err != nil {
		return runResult{}, err
	}
	w.stop()
	r.bg.stop()
	res := runResult{DayStart: d.start}
	return res, r.collect(&res, d, w)
}

// runWorkloads are the online service and the offline work of a run, those it has.
type runWorkloads struct {
	server, burner, antagonist *proc
	addr                       string // the online service's
}

// stop ends the offline work, then the online service.
func (w runWorkloads) stop() {
	for _, p := range []*proc{w.burner, w.antagonist, w.server} {
		if p != nil {
			p.stop(stopGrace)
		}
	}
}

// start creates the run's cgroups and starts the agent (tidal only), the samplers, the online
// service and the offline work.
func (r *scenarioRun) start(ctx context.Context) (w runWorkloads, err error) {
	if err := r.makeCgroups(); err != nil {
		return w, err
	}
	if r.sc.Tidal || r.sc.agentBeside {
		a, err := r.b.startAgent(ctx, r.agentBinary(), r.name+"-agent", path.Join(r.rel, "tidal"), path.Join(r.rel, "agent"), r.sc.agentConfig)
		if err != nil {
			return w, err
		}
		r.agent = a
		r.procs = append(r.procs, a.proc)
		// The agent manages as many workloads as a busy node's, so a fast path that waits
		// on the slow loop's work shows in the figures.
		for i := 0; i < r.b.opts.dayWorkloads && !r.sc.onlyOwnWorkloads; i++ {
			c, err := r.b.admitSleeper(a.client, i)
			if c != nil {
				r.sleepers = append(r.sleepers, c)
			}
			if err != nil {
				return w, err
			}
		}
	}
	if r.sc.dayWorkloads {
		if err := r.startDayWorkloads(); err != nil {
			return w, err
		}
	}
	if r.agent != nil {
		if err := r.agent.waitPrimed(ctx); err != nil {
			return w, err
		}
	}
	if err := r.stopAgentAt(stopAfterAdmitting); err != nil {
		return w, err
	}
	r.startSamplers(ctx)
	if r.sc.Online {
		if w.server, w.addr, err = r.startServer(ctx); err != nil {
			return w, err
		}
	}
	if r.sc.Offline {
		w.burner, w.antagonist, err = r.startOffline()
	}
	return w, err
}

// agentBinary is the tidal binary the scenario's agent runs.
func (r *scenarioRun) agentBinary() string {
	if r.sc.baselineBuild {
		return r.b.opts.tidalBaseline
	}
	return r.b.tidal
}

// stopAgentAt stops the agent (SIGSTOP) if the scenario stops it at this point.
func (r *scenarioRun) stopAgentAt(when agentStop) error {
	if r.sc.stopAgent != when || r.agent == nil {
		return nil
	}
	if err := syscall.Kill(r.agent.pid(), syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop the agent: %w", err)
	}
	return nil
}

// day is what driving the day left to read: the load generator (nil without online work),
// when the day started, and the agent's CPU use over it and its peak memory.
type day struct {
	loadgen   *proc
	start     time.Time
	agentCPU  float64 // % of one core
	agentPeak int64   // bytes
}

// driveDay runs the day: the load generator's schedule, or just the day's length without
// online work.
func (r *scenarioRun) driveDay(ctx context.Context, addr string) (d day, err error) {
	var before cpuUsage
	if r.agent != nil {
		before, _ = readCPUUsage(r.agent.pid())
	}
	if err := r.stopAgentAt(stopAtDay); err != nil {
		return d, err
	}
	d.start = time.Now() // refined from the load generator's reports in collect
	if r.sc.Online {
		if d.loadgen, err = r.startLoadgen(addr); err != nil {
			return d, err
		}
		oracle := r.startOracle(ctx)
		err := d.loadgen.wait(r.b.opts.day+drainSlack, ctx.Done())
		if err = errors.Join(err, oracle()); err != nil {
			return d, err
		}
	} else if !sleepCtx(ctx, r.b.opts.day) {
		return d, ctx.Err()
	}
	if r.agent != nil {
		after, _ := readCPUUsage(r.agent.pid())
		d.agentCPU = after.percentSince(before)
		d.agentPeak, _ = memoryStatus(r.agent.pid(), "VmHWM")
	}
	return d, nil
}

// makeCgroups creates the run's cgroups: the load generator's at high priority, and, unless the
// agent places them, the online service's and the offline work's with the scenario's knobs.
func (r *scenarioRun) makeCgroups() error {
	all := r.b.everywhere()
	loadgen := all
	loadgen.CPUShares = loadgenShares
	cgs := []plugins.Cgroup{{Path: r.rel, Settings: all}, {Path: r.sub("loadgen"), Settings: loadgen}}
	if r.sc.Tidal || r.sc.agentBeside {
		agent := all
		if r.sc.agentShares > 0 {
			agent.CPUShares = r.sc.agentShares
		}
		cgs = append(cgs, plugins.Cgroup{Path: r.sub("agent"), Settings: agent})
	}
	if r.sc.Tidal {
		return r.b.writer.Apply(cgs)
	}
	if r.sc.Online {
		online := all
		online.CPUShares = defaultShares
		if r.sc.online != nil {
			online = r.sc.online(r.b.cpus)
			online.Mems = r.b.mems
		}
		cgs = append(cgs, plugins.Cgroup{Path: r.sub("online"), Settings: online})
	}
	if r.sc.Offline {
		off := r.sc.offline(r.b.cpus)
		off.Mems = r.b.mems
		child := r.offlineChild()
		cgs = append(cgs, plugins.Cgroup{Path: r.sub("offline"), Settings: off},
			plugins.Cgroup{Path: r.sub("offline/burner"), Settings: child},
			plugins.Cgroup{Path: r.sub("offline/antagonist"), Settings: child})
	}
	return r.b.writer.Apply(cgs)
}

func (r *scenarioRun) sub(name string) string { return path.Join(r.rel, name) }

// offlineChild are the settings of a cgroup under the offline parent: its CPUs, every memory
// node; the parent's knobs hold it.
func (r *scenarioRun) offlineChild() plugins.Settings {
	return plugins.Settings{CPUs: r.sc.offline(r.b.cpus).CPUs, Mems: r.b.mems}
}

// startDayWorkloads starts the -day-workloads light workloads of a no-agent scenario in the
// benchmark's own cgroups, placed as the scenario places its work: every other one beside the
// online service, the rest under the offline work's parent (its knobs), a cgroup each, as a
// node's pods have theirs whatever places them.
func (r *scenarioRun) startDayWorkloads() error {
	cgroups := make([]plugins.Cgroup, r.b.opts.dayWorkloads)
	for i := range cgroups {
		cgroups[i] = plugins.Cgroup{Path: r.sub(sleeperName(i)), Settings: r.b.everywhere()}
	}
	if r.sc.Offline {
		offline := r.offlineChild()
		for i := 1; i < len(cgroups); i += 2 {
			cgroups[i] = plugins.Cgroup{Path: r.sub(path.Join("offline", sleeperName(i))), Settings: offline}
		}
	}
	if err := r.b.writer.Apply(cgroups); err != nil {
		return err
	}
	for _, cg := range cgroups {
		c, err := startSleeper()
		if err != nil {
			return err
		}
		r.sleepers = append(r.sleepers, c)
		if err := r.b.writer.Attach(cg.Path, c.Process.Pid); err != nil {
			return err
		}
	}
	return nil
}

// startSamplers reads node CPU every second, with online work its run-queue wait and the
// contention probe's files, and with an agent its status twice a second.
func (r *scenarioRun) startSamplers(ctx context.Context) {
	r.bg = newBackground(ctx)
	r.bg.every(time.Second, func(time.Time) {
		if s, err := readNodeCPU(); err == nil {
			r.cpu = append(r.cpu, s)
		}
	})
	if r.sc.Online {
		// The interference indicator the agent uses, measured the same way in every scenario,
		// agent or not: the online service's threads' run-queue wait per unit of CPU run.
		online := interference.Group{Name: "online", Cgroup: r.sub("online"), Recursive: true}
		if r.sc.Tidal {
			// The service's own workload cgroup, not its tier's, which also holds the
			// -day-workloads sleepers: reading their threads every time cost the harness
			// work the baselines do not pay.
			online.Cgroup = path.Join(r.rel, "tidal", "shared", serverWorkload)
		}
		meter := interference.NewMeter("/proc", r.b.layout)
		r.bg.every(waitInterval, func(now time.Time) {
			if got := meter.Read([]interference.Group{online}, waitMinRun)[0]; got.Err == nil && got.Run >= waitMinRun {
				r.waits = append(r.waits, waitSample{At: now, Ratio: got.WaitRatio()})
			}
		})
		r.bg.onStop(meter.Close)
	}
	if r.agent != nil && !r.sc.unpolled && r.sc.stopAgent == stopNever {
		r.watch = newAgentWatch()
		client := r.agent.client
		r.bg.every(agentPoll, func(now time.Time) { r.watch.poll(client, now) })
	}
	if r.sc.Online {
		r.startContentionProbe()
	}
}

// startContentionProbe samples online CPU time and the offline quota every contentionEvery in
// every scenario with online work, so the instrument costs the same in all of them; only with
// an agent do the samples feed the probe.
func (r *scenarioRun) startContentionProbe() {
	online, offline := r.sub("online"), r.sub("offline")
	if r.sc.Tidal {
		tiers := path.Join(r.rel, "tidal")
		online, offline = plugins.TierPath(tiers, qos.Shared), plugins.TierPath(tiers, qos.Reclaimed)
		r.contention = newContentionProbe(int64(r.b.cpus.Size()) * 1000)
	}
	sampler, probe := newContentionSampler(r.b.layout, online, offline), r.contention
	r.bg.every(contentionEvery, func(time.Time) {
		used, lent, quota, ok := sampler.read()
		// Stamped when read, not when the ticker fired: a sample the Go scheduler ran late
		// would otherwise count more CPU time over a span it did not cover (as the agent's
		// own watch stamps its readings).
		now := time.Now()
		if !ok || probe == nil {
			return
		}
		if !quota {
			// No quota (quota-on-cut while online work is calm, or the idle mechanism):
			// what is lent is the agent's own figure, up to a poll old.
			if r.watch == nil {
				return
			}
			if lent = r.watch.latestLent.Load(); lent < 0 {
				return
			}
		}
		probe.observe(now, used, lent)
	})
	r.bg.onStop(sampler.close)
}

// startWorkload starts `tidal workload ARGS` (see startCommand).
func (r *scenarioRun) startWorkload(name, tier, cgroup string, args ...string) (*proc, error) {
	return r.startCommand(name, tier, cgroup, nil, append([]string{r.b.tidal, "workload"}, args...))
}

// startCommand starts argv: through the agent in tier (with runFlags for `tidal run`) in a
// tidal scenario, else in the benchmark's own cgroup.
func (r *scenarioRun) startCommand(name, tier, cgroup string, runFlags, argv []string) (*proc, error) {
	var attach func(int) error
	if r.sc.Tidal && tier != "" {
		argv = r.agent.tidalRun(tier, name, runFlags, argv)
	} else {
		attach = func(pid int) error { return r.b.writer.Attach(cgroup, pid) }
	}
	p, err := startProc(r.name+"-"+name, r.b.tmp, argv, attach)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// startServer starts the online service on a free loopback port and waits until it answers.
func (r *scenarioRun) startServer(ctx context.Context) (*proc, string, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(r.b.tmp, r.name+"-server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	argv, err := r.server.command(r.b, dir, addr)
	if err != nil {
		return nil, "", err
	}
	var runFlags []string
	switch {
	case r.sc.sloProbe:
		runFlags = []string{"--slo-probe", r.server.loadURL(addr), "--slo-latency", r.b.opts.probeLatency.String()}
	case r.sc.sloMetric:
		runFlags = []string{"--slo-metric", r.server.metricURL(addr), "--slo-latency", r.b.opts.probeLatency.String()}
	}
	p, err := r.startCommand(serverWorkload, "shared", r.sub("online"), runFlags, argv)
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(healthyTimeout)
	for {
		err := r.server.answers(ctx, addr)
		if err == nil {
			break
		}
		if !p.running() || time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			return nil, "", fmt.Errorf("online service did not answer on %s: %v; last lines of its log:\n%s", addr, err, p.logTail(10))
		}
	}
	if r.server.seed != nil {
		if err := r.server.seed(ctx, addr); err != nil {
			return nil, "", fmt.Errorf("online service on %s: filling it with data: %w", addr, err)
		}
	}
	return p, addr, nil
}

// startOffline starts the CPU burner and the cache antagonist.
func (r *scenarioRun) startOffline() (burner, antagonist *proc, err error) {
	o := r.b.opts
	if burner, err = r.startWorkload("burner", "reclaimed", r.sub("offline/burner"),
		"burner", "--threads", strconv.Itoa(o.burnerThreads)); err != nil {
		return nil, nil, err
	}
	antagonist, err = r.startWorkload("antagonist", "reclaimed", r.sub("offline/antagonist"),
		"antagonist", "--threads", strconv.Itoa(o.antagonistThreads), "--size", o.antagonistSize)
	return burner, antagonist, err
}

// startLoadgen starts the load generator on the day's schedule, in its own high-priority
// cgroup in every scenario (never through the agent: it is the measuring instrument).
func (r *scenarioRun) startLoadgen(addr string) (*proc, error) {
	return r.startWorkload("loadgen", "", r.sub("loadgen"),
		"loadgen", "--url", r.server.loadURL(addr), "--gzip="+strconv.FormatBool(r.server.gzip), "--phases", phaseSpec(r.server.phases(r.b.opts)))
}

// cleanup stops whatever still runs (the agent last), the samplers, and removes the run's
// cgroups, killing anything left in them.
func (r *scenarioRun) cleanup() error {
	if r.sc.stopAgent != stopNever && r.agent != nil && r.agent.running() {
		_ = syscall.Kill(r.agent.pid(), syscall.SIGCONT) // so it ends as it is asked to
	}
	for i := len(r.procs) - 1; i >= 0; i-- {
		if p := r.procs[i]; p.running() {
			p.stop(stopGrace)
		}
	}
	if r.bg != nil {
		r.bg.stop()
	}
	for _, c := range r.sleepers {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	err := removeTree(r.b.layout, r.rel)
	for _, p := range r.procs { // their commands are gone with the cgroups: the readers end
		<-p.exited
		select {
		case <-p.readDone:
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

// freeLoopbackAddr returns a loopback address with a port free right now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startOracle runs a scenario's oracle beside the day: at the start of each phase it writes
// the phase's settings. stop ends it and returns its first write error.
func (r *scenarioRun) startOracle(ctx context.Context) (stop func() error) {
	if r.sc.oracle == nil {
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		var at time.Duration
		for _, p := range r.server.phases(r.b.opts) {
			if !sleepCtx(ctx, max(at-time.Since(start), 0)) {
				errc <- nil
				return
			}
			for _, step := range r.sc.oracle(r.b.cpus, p.Name) {
				for i := range step {
					step[i].Path = r.sub(step[i].Path)
				}
				if err := r.b.writer.Apply(step); err != nil {
					errc <- fmt.Errorf("oracle at %s: %w", p.Name, err)
					return
				}
			}
			at += p.Duration
		}
		errc <- nil
	}()
	return func() error {
		cancel()
		return <-errc
	}
}
