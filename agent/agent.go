// Package agent wires tidal's node daemon: it owns the workload registry, runs the slow loop
// (sample, predict, size the pools, evict) and the fast path (shrink on an online spike), and
// serves the local API that `tidal run` and `tidal status` use. Data flows one way:
// source -> qos -> sysadvisor -> plugins -> isolation -> reporter.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/evict"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/source/pods"
	"github.com/tidalqos/tidal/agent/source/standalone"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/eviction"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/plugins/policy"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
	"github.com/tidalqos/tidal/sysadvisor/interference"
	"github.com/tidalqos/tidal/sysadvisor/ioadvisor"
	"github.com/tidalqos/tidal/sysadvisor/mechanism"
	"github.com/tidalqos/tidal/sysadvisor/spikewatch"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// Agent is the node daemon. Create it with New and run it with Run.
//
// Its state lives in three places, each with its own lock and none held across I/O: the
// workload registry (state.Store), the controller below (mu: the advisor's plan, the pools,
// the latest figures), and the writer's cache of cgroup values. reconciling serializes full
// passes over the cgroup tree; the fast path never takes it.
type Agent struct {
	cfg     config.Config
	log     *slog.Logger
	topo    *topology.Topology
	smt     bool // the node's cores have more than one thread (cpu.reclaimedCPUs auto)
	layout  *cgroupfs.Layout
	writer  *isolation.Writer
	policy  policy.Policy
	metrics *reporter.Metrics
	idle    bool
	procDir string
	sysDir  string
	// claim is what the agent holds on the node while it runs (claim.go): its state folder,
	// socket, metrics port and cgroup tree. Its listeners are what Run serves.
	claim     claim
	closeOnce sync.Once
	store     *state.Store
	gpuSource sysgpu.Source
	lease     *leasing // nil without an arbiter

	// The workload sources, and the two a caller reaches directly (nil when off).
	sources    []source.Source
	standalone *standalone.Source
	pods       *pods.Source
	// evictors stop workloads by the source that reported them; signal is the default.
	evictors map[string]evict.Evictor
	signal   evict.Evictor

	reconciling sync.Mutex
	// moves are reclaimed workloads adopted from the tier's old place whose processes are
	// still to move (legacy.go); under reconciling.
	moves []cgroupMove
	// limitsWrite serializes the fast path's narrow writes (writeReclaimedLimits); it is
	// taken before mu, never under it.
	limitsWrite sync.Mutex

	mu      sync.Mutex
	advisor *advisor.Advisor
	pools   plugins.Pools
	// poolHold delays narrowing the reclaimed pools (cpu.poolShrinkAfter).
	poolHold poolHold
	online   map[int]int64 // latest online usage of each node's shared pool
	// indicators are the latest interference figures of online work, per NUMA node.
	indicators map[int][]reporter.Indicator
	// mech is the cpu.mechanism in force (with auto, the candidate the chooser runs);
	// mechanism() resolves it to how reclaimed work is held now. mechChoice says why.
	mech       string
	mechChoice string
	memTotal   int64 // node memory, from the latest sample
	memOnline  int64 // memory used by all but reclaimed work, from the latest sample
	actions    []reporter.Action
	applyErr   error
	lastEvict  time.Time

	// Memory QoS: the memory dimension as configured (status shows its throttle point), the
	// latest sample's figures, and reclaimed work waiting at its limit.
	memoryPolicy memory.Resource
	memFigures   memoryFigures
	memStall     memoryStall

	// Disk IO isolation: the disks and the advisor (set up once, then the IO loop's), whether
	// a low IO weight means anything on them, and (under mu) what is lent and its view.
	ioDisks   []ioDisk
	ioAdvisor *ioadvisor.Advisor
	ioWeight  bool
	// ioClear: IO is not managed (off, or no disk) but the IO controller is there, so any
	// throttle an earlier run or config left on tidal's cgroups is cleared.
	ioClear bool
	ioLent  []plugins.IOLimit
	ioView  reporter.IO

	// planGeneration grows whenever the fast path shrinks the plan, so a full pass that
	// started before knows to write the reclaimed limits again.
	planGeneration uint64
	// ungranted remembers since when each queue of running reclaimed work has had no grant.
	ungranted map[string]time.Time

	// Slow-loop only (one goroutine): the previous reading, and the pass count.
	sampler sampler
	passes  int
	// completedPasses is passes as status reads it; lastPass is when the latest ended (Unix
	// nanoseconds; Run's start before the first), which /healthz reads.
	completedPasses atomic.Uint64
	lastPass        atomic.Int64
	// watch is the fast path's spike watch (its limits set under mu); watched, the counter
	// files it reads (the fast loop's only).
	watch   *spikewatch.Watch
	watched spikewatch.Counters
	// fastPath is what status shows of the watch: its limits now, how often online use
	// crossed them and how often that cut lending, and the latest crossing (under mu).
	fastPath reporter.FastPath

	// CPU starvation eviction (issue 12). starvation, its meter and its last reading's time
	// are the slow loop's; satisfaction (the latest figure of each reclaimed workload, for
	// status) is under mu.
	starvation      eviction.Starvation
	starvationMeter *interference.Meter
	starvationAt    time.Time
	satisfaction    map[string]float64

	// chooser tries the mechanisms with cpu.mechanism auto (nil otherwise); the interference
	// loop owns it.
	chooser *mechanism.Chooser

	// poolsChanged wakes the NRI plugin's refresh when a pool's CPUs change.
	poolsChanged chan struct{}

	// background owns the goroutines an eviction starts; Run waits for them.
	background sync.WaitGroup
}

// New prepares an agent: finds the cgroup layout and topology, rebuilds state from the
// checkpoint and the cgroups on disk, and brings the cgroup tree to its settings with the
// reclaimed pool at its minimum (no fresh metrics yet).
func New(cfg config.Config, log *slog.Logger) (*Agent, error) {
	layout, err := cgroupfs.Detect(cfg.Cgroup.MountPoint, cfg.Cgroup.Version)
	if err != nil {
		return nil, err
	}
	// One agent per state folder, socket, metrics port and cgroup tree: a second one must
	// stop before it touches any cgroup.
	c, err := claimNode(cfg, layout)
	if err != nil {
		return nil, err
	}
	a, err := newAgentOn(cfg, log, host{sys: "/sys", proc: "/proc", cgroups: layout})
	if err != nil {
		c.release()
		return nil, err
	}
	a.claim = c
	return a, nil
}

// Close gives back what New claimed and opened, for an agent that will not Run (Run closes it
// when it returns). Closing again does nothing.
func (a *Agent) Close() {
	a.closeOnce.Do(func() {
		a.claim.release()
		_ = a.gpuSource.Close()
		a.starvationMeter.Close()
		if a.pods != nil {
			a.pods.Close()
		}
	})
}

// host is where the agent reads the machine: /sys, /proc and the cgroup mounts (a unit
// test's folders, so the core's logic is tested without root).
type host struct {
	sys, proc string
	cgroups   *cgroupfs.Layout
}

func newAgentOn(cfg config.Config, log *slog.Logger, h host) (*Agent, error) {
	layout, procDir := h.cgroups, h.proc
	topo, err := topology.Discover(h.sys, h.proc)
	if err != nil {
		return nil, err
	}
	if !cfg.CPU.ReservedSystemCPUs.IsSubsetOf(topo.AllCPUs()) {
		return nil, config.KeyErrorf("cpu.reservedSystemCPUs", "%s: not all of them are online CPUs (%s)", cfg.CPU.ReservedSystemCPUs, topo.AllCPUs())
	}
	if topo.AllCPUs().Difference(cfg.CPU.ReservedSystemCPUs).IsEmpty() {
		return nil, config.KeyErrorf("cpu.reservedSystemCPUs", "%s: reserves every CPU, none is left for workloads", cfg.CPU.ReservedSystemCPUs)
	}
	writer, err := isolation.NewWriter(layout, log)
	if err != nil {
		return nil, err
	}
	gpuCfg := pgpu.DefaultConfig()
	// One grace period for every eviction: the GPU tracker's deadline is the same.
	gpuCfg.ReclaimGrace = max(cfg.Eviction.GracePeriod, time.Millisecond)
	tracker, err := pgpu.NewTracker(gpuCfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       cfg,
		log:       log,
		topo:      topo,
		smt:       topo.SMT(),
		layout:    layout,
		writer:    writer,
		policy:    policy.Default().With(cpuResource(cfg)),
		idle:      writer.SupportsIdle(),
		procDir:   procDir,
		sysDir:    h.sys,
		store:     state.NewStore(state.NewAllocator(topo, cfg.CPU.ReservedSystemCPUs, tracker), cfg.StateDir),
		gpuSource: sysgpu.Open(log),
		advisor:   advisor.New(advisorConfig(cfg)),
		online:    map[int]int64{},
		ungranted: map[string]time.Time{},
		signal:    evict.Signal{Cgroups: signalCgroups{writer, layout}, Grace: cfg.Eviction.GracePeriod},
		evictors:  map[string]evict.Evictor{},

		poolsChanged: make(chan struct{}, 1),

		starvation:      eviction.Starvation{Floor: cfg.Eviction.StarvationFloor, Window: cfg.Eviction.StarvationWindow},
		starvationMeter: interference.NewMeter(procDir, layout),
		poolHold:        poolHold{},
	}
	if err := a.prepare(); err != nil {
		a.Close() // NVML and the meter's files; New gives back the claim
		return nil, err
	}
	return a, nil
}

// prepare sets what depends on the config beyond the parts newAgentOn made (the mechanism,
// memory, IO, leasing, the sources), restores the state and writes the cgroup tree.
func (a *Agent) prepare() error {
	cfg, log, writer := a.cfg, a.log, a.writer
	a.setMechanismLocked(cfg.CPU.Mechanism)
	a.mechChoice = "set by cpu.mechanism"
	if cfg.CPU.Mechanism == config.MechanismAuto {
		m := cfg.CPU.AutoMechanism
		a.chooser = mechanism.New(mechanism.Config{Candidates: m.CandidateList(), Trial: m.Trial, Rounds: m.Rounds, Every: m.Every, Tie: mechanismTie, WaitTolerance: m.WaitTolerance, SLOTolerance: m.SLOTolerance})
		a.setMechanismLocked(a.chooser.Current())
		a.mechChoice = "auto: " + a.chooser.Reason()
	}
	a.memoryPolicy = memoryResource(cfg.Memory)
	a.policy = a.policy.With(a.memoryPolicy)
	if err := a.setupIO(); err != nil {
		return err
	}
	lease, err := newLeasing(cfg)
	if err != nil {
		return err
	}
	a.lease = lease
	a.metrics = reporter.NewMetrics(func() reporter.WriteCounts {
		s := writer.Stats()
		return reporter.WriteCounts{Writes: s.Writes, Errors: s.Errors, Repairs: s.Repairs}
	})
	// The sources' hooks count their calls in the metrics: make those first.
	if err := a.newSources(); err != nil {
		return err
	}
	if err := a.restore(); err != nil {
		return err
	}
	snap := a.store.Snapshot()
	a.advisor.Init(cpu.ComputePools(a.topo, cfg.CPU.ReservedSystemCPUs, snap.Dedicated, nil).PoolMilliCPU())
	if _, held, err := a.reclaimedUsage(snap); err == nil {
		// A restart lends reclaimed work what it holds: the minimum would evict it.
		a.advisor.KeepMemory(a.memoryPolicy.LimitAbove(held.WorkingSet))
	}
	if err := a.reconcile(); err != nil {
		// Start anyway: the slow loop retries, and lending stays at zero until writes work.
		log.Error("initial cgroup settings failed; lending nothing until they succeed", "err", err)
	}
	if err := a.store.Save(); err != nil {
		log.Error("cannot write checkpoint", "dir", cfg.StateDir, "err", err)
	}
	return nil
}

// signalCgroups is what the signal evictor needs of the writer and the layout.
type signalCgroups struct {
	writer *isolation.Writer
	layout *cgroupfs.Layout
}

func (c signalCgroups) Signal(cgroup string, sig syscall.Signal) (int, error) {
	return c.writer.Signal(cgroup, sig)
}
func (c signalCgroups) Procs(cgroup string) ([]int, error) { return c.layout.Procs(cgroup, true) }

// cpuResource is the policy's CPU dimension as configured (CPU burst per tier).
func cpuResource(cfg config.Config) cpu.Resource {
	b := cfg.CPU.BurstPercent
	return cpu.Resource{Burst: cpu.Burst{System: int32(b.System), Dedicated: int32(b.Dedicated), Shared: int32(b.Shared)}}
}

func advisorConfig(cfg config.Config) advisor.Config {
	return advisor.Config{
		MinReclaimedMilliCPU: cfg.CPU.MinReclaimedMilliCPU,
		SafetyMarginMilliCPU: cfg.CPU.SafetyMarginMilliCPU,
		SafetyMarginRatio:    cfg.CPU.SafetyMarginRatio,
		GrowStepMilliCPU:     cfg.CPU.GrowStepMilliCPU,
		PeakWindow:           cfg.CPU.PeakWindow,
		LimitWindow:          cfg.CPU.LimitWindow,
		SpikeThreshold:       cfg.CPU.SpikeThreshold,
		ReservedSystemBytes:  cfg.Memory.ReservedSystemBytes,
		MinReclaimedBytes:    cfg.Memory.MinReclaimedBytes,
		SafetyMarginBytes:    cfg.Memory.SafetyMarginBytes,
		GrowStepBytes:        cfg.Memory.GrowStepBytes,
		Control: advisor.Control{
			Slack: cfg.Interference.Slack, Cut: cfg.Interference.Cut, Hold: cfg.Interference.HoldAfterCut,
			FirstHold: cfg.Interference.HoldAfterFirstCut,
		},
	}
}

// Run serves the API and metrics and runs the control loops until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	if a.claim.api == nil {
		return errors.New("agent: Run without the node claimed (made by New, or closed)")
	}
	defer a.Close()
	a.lastPass.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// A server that dies stops the agent with its error, so a supervisor restarts it.
	var serveErr error
	var serveErrOnce sync.Once
	serve := func(name string, srv *http.Server, ln net.Listener) {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErrOnce.Do(func() { serveErr = fmt.Errorf("%s server: %w", name, err) })
				cancel()
			}
		}()
		go func() {
			defer wg.Done()
			<-ctx.Done()
			shut, done := context.WithTimeout(context.Background(), 2*time.Second)
			defer done()
			_ = srv.Shutdown(shut)
		}()
	}
	serve("api", a.apiServer(), a.claim.api)
	if a.claim.metrics != nil {
		serve("metrics", a.metricsServer(), a.claim.metrics)
	}
	if err := a.startSpikeWatch(); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	wg.Go(func() { a.slowLoop(ctx) })
	wg.Go(func() { a.fastLoop(ctx) })
	wg.Go(func() { a.interferenceLoop(ctx) })
	wg.Go(func() { a.ioLoop(ctx) })
	wg.Go(func() {
		a.store.RunCheckpoints(ctx, func(err error) { a.log.Error("cannot write checkpoint", "dir", a.cfg.StateDir, "err", err) })
	})
	if a.lease != nil {
		wg.Go(func() { a.reportLoop(ctx) })
	}
	for _, src := range a.sources {
		wg.Go(func() {
			if err := src.Run(ctx); err != nil {
				serveErrOnce.Do(func() { serveErr = fmt.Errorf("%s source: %w", src.Name(), err) })
				cancel()
			}
		})
	}
	if a.cfg.Loops.PSITrigger {
		wg.Go(func() { a.watchPressure(ctx) })
	}
	a.log.Info("agent running", "node", a.cfg.NodeName, "cgroup", a.layout.Version.String(), "root", a.cfg.Cgroup.Root,
		"cpus", a.topo.AllCPUs().String(), "cpuIdle", a.idle, "reclaimedCPUs", a.reclaimedCPUs(), "socket", a.cfg.SocketPath, "metrics", a.cfg.MetricsAddress, "sources", a.sourceNames())
	<-ctx.Done()
	wg.Wait()
	a.background.Wait()
	a.handBack()
	return serveErr
}

// handBack leaves the node safe for the time no agent watches it, once every loop has
// stopped: the CPU lent cut to its minimum and, under the cores mechanism, every core handed
// back to online work, since no fast path is left to take them back on a spike. Reclaimed work
// keeps running on what is left; memory lending stays as it is (shrinking it would hold
// reclaimed work at its limit with no agent to evict it). A restarted agent starts from the
// minimum anyway.
func (a *Agent) handBack() {
	a.mu.Lock()
	cuts := a.advisor.Pressure(time.Now(), "the agent is stopping")
	for _, c := range cuts {
		a.actionLocked("throttle", "agent-stop", c.Reason)
	}
	a.planGeneration++
	a.mu.Unlock()
	a.writeReclaimedLimits()
	a.log.Info("agent stopped: reclaimed CPU at its minimum until an agent runs again", "cuts", len(cuts))
}

// stalledAfter is how long the slow loop may go without ending a pass before /healthz fails:
// well past any pass that waits on the API server (its requests time out sooner).
func (a *Agent) stalledAfter() time.Duration { return max(2*time.Minute, 20*a.cfg.Loops.SlowInterval) }

func (a *Agent) metricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.metrics.Handler())
	// /healthz fails once the slow loop has stalled, so a supervisor (the DaemonSet's liveness
	// probe) restarts an agent wedged on something it waits for, which would otherwise keep
	// lending what it last wrote. It reads no lock: the wedge may be holding one.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if since := time.Since(time.Unix(0, a.lastPass.Load())); since > a.stalledAfter() {
			http.Error(w, fmt.Sprintf("the slow loop has ended no pass for %s", since.Round(time.Second)), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		err := a.applyErr
		a.mu.Unlock()
		if err != nil {
			http.Error(w, "cgroup writes failing: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}
