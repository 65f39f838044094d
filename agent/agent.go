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
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/cri"
	"github.com/tidalqos/tidal/isolation/nri"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/policy"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// workload is the agent's record of one managed workload.
type workload struct {
	plugins.Workload
	// pod is the pod behind a kubelet-owned workload (nil until the watch delivers it).
	pod      *corev1.Pod
	evicting bool
	// refusedUntil: the API server refused to evict this pod (a PodDisruptionBudget); the
	// next victim is tried meanwhile.
	refusedUntil time.Time
	pids         []int
	cpuMilli     int64
	cpuPrev      time.Duration
	cpuAt        time.Time
}

// Agent is the node daemon. Create it with New and run it with Run.
type Agent struct {
	cfg     config.Config
	log     *slog.Logger
	topo    *topology.Topology
	layout  *cgroupfs.Layout
	writer  *isolation.Writer
	policy  policy.Policy
	metrics *reporter.Metrics
	idle    bool
	procDir string
	// stateLock is held while the agent runs (see lockStateDir).
	stateLock *os.File
	gpus      *gpus
	lease     *leasing    // nil without an arbiter
	kube      *kubeSource // nil in standalone mode

	mu        sync.Mutex
	advisor   *advisor.Advisor
	workloads map[string]*workload
	pools     plugins.Pools
	online    map[int]int64 // latest online usage of each node's shared pool
	memTotal  int64         // node memory, from the latest sample
	memOnline int64         // memory used by all but reclaimed work, from the latest sample
	actions   []reporter.Action
	sampler   sampler
	fast      fastWindow
	applyErr  error
	lastEvict time.Time
	passes    int

	// poolsChanged wakes the NRI plugin's refresh when a pool's CPUs change.
	poolsChanged chan struct{}

	// background owns the goroutines an eviction starts; Run waits for them.
	background sync.WaitGroup
}

// New prepares an agent: finds the cgroup layout and topology, rebuilds state from the
// checkpoint and the cgroups on disk, and brings the cgroup tree to its settings with the
// reclaimed pool at its minimum (no fresh metrics yet).
func New(cfg config.Config, log *slog.Logger) (*Agent, error) {
	// One agent per state folder and cgroup tree: a second one must stop before it touches
	// either.
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a, err := newAgent(cfg, log)
	if err != nil {
		lock.Close()
		return nil, err
	}
	a.stateLock = lock
	return a, nil
}

// lockStateDir takes an exclusive lock on the state folder, held while the process lives.
func lockStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another tidal agent is running with state folder %s (%v)", dir, err)
	}
	return f, nil
}

func newAgent(cfg config.Config, log *slog.Logger) (*Agent, error) {
	layout, err := cgroupfs.Detect(cfg.Cgroup.MountPoint, cfg.Cgroup.Version)
	if err != nil {
		return nil, err
	}
	topo, err := topology.Discover("/sys", "/proc")
	if err != nil {
		return nil, err
	}
	if !cfg.CPU.ReservedSystemCPUs.IsSubsetOf(topo.AllCPUs()) {
		return nil, fmt.Errorf("cpu.reservedSystemCPUs %s: not all of them are online CPUs (%s)", cfg.CPU.ReservedSystemCPUs, topo.AllCPUs())
	}
	if topo.AllCPUs().Difference(cfg.CPU.ReservedSystemCPUs).IsEmpty() {
		return nil, fmt.Errorf("cpu.reservedSystemCPUs %s: reserves every CPU, none is left for workloads", cfg.CPU.ReservedSystemCPUs)
	}
	writer, err := isolation.NewWriter(layout, log)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       cfg,
		log:       log,
		topo:      topo,
		layout:    layout,
		writer:    writer,
		policy:    policy.Default(),
		idle:      writer.SupportsIdle(),
		procDir:   "/proc",
		advisor:   advisor.New(advisorConfig(cfg)),
		workloads: map[string]*workload{},
		online:    map[int]int64{},

		poolsChanged: make(chan struct{}, 1),
	}
	if a.lease, err = newLeasing(cfg); err != nil {
		return nil, err
	}
	if a.kube, err = newKubeSource(cfg, a); err != nil {
		return nil, err
	}
	if a.gpus, err = newGPUs(sysgpu.Open(log)); err != nil {
		return nil, err
	}
	a.metrics = reporter.NewMetrics(func() reporter.WriteCounts {
		s := writer.Stats()
		return reporter.WriteCounts{Writes: s.Writes, Errors: s.Errors, Repairs: s.Repairs}
	})
	a.fast = newFastWindow(cfg.Loops.FastWindow)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.restore(); err != nil {
		return nil, err
	}
	a.advisor.Init(cpu.ComputePools(a.topo, cfg.CPU.ReservedSystemCPUs, a.dedicatedCPUsLocked(), nil).PoolMilliCPU())
	if err := a.applyLocked(); err != nil {
		// Start anyway: the slow loop retries, and lending stays at zero until writes work.
		log.Error("initial cgroup settings failed; lending nothing until they succeed", "err", err)
	}
	a.publishLocked()
	return a, nil
}

func advisorConfig(cfg config.Config) advisor.Config {
	return advisor.Config{
		MinReclaimedMilliCPU: cfg.CPU.MinReclaimedMilliCPU,
		SafetyMarginMilliCPU: cfg.CPU.SafetyMarginMilliCPU,
		SafetyMarginRatio:    cfg.CPU.SafetyMarginRatio,
		GrowStepMilliCPU:     cfg.CPU.GrowStepMilliCPU,
		PeakWindow:           cfg.CPU.PeakWindow,
		SpikeThreshold:       cfg.CPU.SpikeThreshold,
		ReservedSystemBytes:  cfg.Memory.ReservedSystemBytes,
		MinReclaimedBytes:    cfg.Memory.MinReclaimedBytes,
		SafetyMarginBytes:    cfg.Memory.SafetyMarginBytes,
		GrowStepBytes:        cfg.Memory.GrowStepBytes,
	}
}

// Run serves the API and metrics and runs the control loops until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	ln, err := listenUnix(a.cfg.SocketPath)
	if err != nil {
		return err
	}
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
	serve("api", a.apiServer(), ln)
	if addr := a.cfg.MetricsAddress; addr != "" {
		mln, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("metrics address %s: %w", addr, err)
		}
		serve("metrics", a.metricsServer(), mln)
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.slowLoop(ctx) }()
	go func() { defer wg.Done(); a.fastLoop(ctx) }()
	if a.lease != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.reportLoop(ctx) }()
	}
	if a.cfg.Hooks.CRIProxy {
		proxy, err := cri.New(cri.Options{Socket: a.cfg.Hooks.CRISocket, RuntimeSocket: a.cfg.Hooks.RuntimeSocket,
			Timeout: a.cfg.Hooks.Timeout, CgroupV2: a.layout.Version == cgroupfs.V2,
			Decider: hookDecider{a}, Observer: a.metrics, Log: a.log})
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := proxy.Serve(ctx); err != nil {
				serveErrOnce.Do(func() { serveErr = fmt.Errorf("cri proxy: %w", err) })
				cancel()
			}
		}()
	}
	if a.cfg.Hooks.NRI {
		plugin, err := nri.New(nri.Options{Socket: a.cfg.Hooks.NRISocket, Timeout: a.cfg.Hooks.Timeout,
			CgroupV2: a.layout.Version == cgroupfs.V2, Decider: hookDecider{a}, Observer: a.metrics, Log: a.log})
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = plugin.Run(ctx) }()
		go func() { defer wg.Done(); a.refreshNRI(ctx, plugin) }()
	}
	if a.kube != nil && a.kube.client != nil {
		wg.Add(1)
		go a.runKubernetes(ctx, wg.Done)
	}
	if a.cfg.Loops.PSITrigger {
		wg.Add(1)
		go func() { defer wg.Done(); a.watchPressure(ctx) }()
	}
	a.log.Info("agent running", "node", a.cfg.NodeName, "cgroup", a.layout.Version.String(), "root", a.cfg.Cgroup.Root,
		"cpus", a.topo.AllCPUs().String(), "cpuIdle", a.idle, "socket", a.cfg.SocketPath, "metrics", a.cfg.MetricsAddress, "criProxy", a.cfg.Hooks.CRIProxy, "nri", a.cfg.Hooks.NRI)
	<-ctx.Done()
	wg.Wait()
	a.background.Wait()
	_ = a.gpus.src.Close()
	_ = os.Remove(a.cfg.SocketPath)
	_ = a.stateLock.Close()
	return serveErr
}

// listenUnix opens the API socket with root-only permissions: its folder 0700, the socket 0600.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another agent is already serving %s", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func (a *Agent) metricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.metrics.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
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

// pluginWorkloads lists the workloads sorted by cgroup path, as plugins see them.
func (a *Agent) pluginWorkloads() []plugins.Workload {
	out := make([]plugins.Workload, 0, len(a.workloads))
	for _, w := range a.workloads {
		out = append(out, w.Workload)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cgroup < out[j].Cgroup })
	return out
}

// dedicatedCPUsLocked are all cores owned by dedicated workloads, and those the kubelet's
// CPU manager gave exclusively.
func (a *Agent) dedicatedCPUsLocked() cpuset.CPUSet {
	all := a.kubeletExclusiveLocked()
	for _, w := range a.workloads {
		all = all.Union(w.DedicatedCPUs)
	}
	return all
}

// applyLocked recomputes the pools from the plan and writes the cgroup tree. When writes fail,
// lending drops to its minimum and the published capacity to zero until they succeed again.
func (a *Agent) applyLocked() error {
	plan := a.writtenPlanLocked(time.Now())
	old := a.pools
	a.pools = cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, a.dedicatedCPUsLocked(), plan.ReclaimedMilliCPU)
	if !samePoolCPUs(old, a.pools) {
		// Runtime hooks hold their own copy of containers' cpusets: tell them.
		select {
		case a.poolsChanged <- struct{}{}:
		default:
		}
	}
	ws := a.pluginWorkloads()
	tree := plugins.NewTree(a.cfg.Cgroup.Root, ws)
	node := a.nodeLocked(plan)
	a.policy.Fill(tree, node)
	for _, w := range ws {
		if len(w.GPUs) > 0 {
			_, w.GPUMinors = a.gpus.tracker.Visibility(w.Name)
		}
		*tree.Workload(w) = a.policy.Decide(w, node).Settings
	}
	err := a.writer.Apply(tree.Cgroups())
	if err != nil {
		// Every failing pass, not only the first: the slow loop must not grow lending back
		// while writes keep failing.
		for _, c := range a.advisor.Reset("cgroup writes failing") {
			a.actionLocked("shrink", "cgroup-error", c.Reason)
		}
	}
	a.applyErr = err
	return err
}

// nodeLocked is what the decision function needs to know of the node under plan.
func (a *Agent) nodeLocked(plan advisor.Plan) plugins.Node {
	return plugins.Node{CPUs: a.topo.AllCPUs(), Pools: a.pools, LentMilliCPU: plan.TotalMilliCPU(),
		LentMemory: plan.ReclaimedMemory, Idle: a.idle, GPUMinors: a.gpus.tracker.Minors()}
}

// minWrittenMemory is the least memory limit the reclaimed tier gets: 0 would mean "leave
// the limit as it is", and a few MiB keeps the kernel's own allocations possible.
const minWrittenMemory = 4 << 20

// writtenPlanLocked is what the cgroups get: the plan capped by the lease, but never under
// the minimum on any NUMA node, so the reclaimed pool always has a CPU and a limit that are
// written (an empty pool or a zero limit would leave stale, wider settings in place).
func (a *Agent) writtenPlanLocked(now time.Time) advisor.Plan {
	plan := a.leaseCapLocked(a.advisor.Plan(), now)
	for _, np := range cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, a.dedicatedCPUsLocked(), nil) {
		floor := min(a.cfg.CPU.MinReclaimedMilliCPU, int64(np.Shared.Size())*1000)
		plan.ReclaimedMilliCPU[np.Node] = max(plan.ReclaimedMilliCPU[np.Node], floor)
	}
	plan.ReclaimedMemory = max(plan.ReclaimedMemory, a.cfg.Memory.MinReclaimedBytes, minWrittenMemory)
	return plan
}

// publishLocked updates the metrics from the current state.
func (a *Agent) publishLocked() {
	plan := a.writtenPlanLocked(time.Now())
	for _, np := range a.pools {
		a.metrics.SetPool(np.Node, map[string]int{
			string(qos.System): np.System.Size(), string(qos.Dedicated): np.Dedicated.Size(),
			string(qos.Shared): np.Shared.Size(), string(qos.Reclaimed): np.Reclaimed.Size(),
		}, plan.ReclaimedMilliCPU[np.Node])
	}
	a.metrics.SetLendable(a.lendableLocked())
	a.metrics.SetGPUs(a.gpuStatusLocked())
	byTier := map[string]int{}
	for _, t := range qos.AllTiers() {
		byTier[string(t)] = 0
	}
	for _, w := range a.workloads {
		byTier[string(w.Tier)]++
	}
	a.metrics.SetWorkloads(byTier)
	a.metrics.SetMetricsFresh(a.advisor.Primed())
}

// lendableLocked is what the node can vouch for lending: nothing while metrics are stale or
// cgroup writes fail.
func (a *Agent) lendableLocked() reporter.Lendable {
	if !a.advisor.Primed() || a.applyErr != nil {
		return reporter.Lendable{}
	}
	plan := a.leaseCapLocked(a.advisor.Plan(), time.Now())
	return reporter.Lendable{MilliCPU: plan.TotalMilliCPU(), MemoryBytes: plan.ReclaimedMemory, GPUs: a.gpus.tracker.Lendable()}
}

// actionLocked records a decision for status, metrics and the log.
func (a *Agent) actionLocked(kind, label, reason string) {
	act := reporter.Action{Time: time.Now(), Kind: kind, Reason: reason}
	a.actions = append(a.actions, act)
	if over := len(a.actions) - a.cfg.Status.ActionHistory; over > 0 {
		a.actions = append(a.actions[:0], a.actions[over:]...)
	}
	a.metrics.Action(kind, label)
	a.log.Info("action", "kind", kind, "reason", reason)
}

// samePoolCPUs reports whether two pool layouts put the same CPUs in every pool.
func samePoolCPUs(x, y plugins.Pools) bool {
	return x.System().Equals(y.System()) && x.Dedicated().Equals(y.Dedicated()) &&
		x.Shared().Equals(y.Shared()) && x.Reclaimed().Equals(y.Reclaimed())
}

// refreshNRI pushes new decisions to the runtime through the NRI plugin whenever the pools'
// CPUs change, at most once a second.
func (a *Agent) refreshNRI(ctx context.Context, plugin *nri.Plugin) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.poolsChanged:
		}
		if err := plugin.Refresh(ctx); err != nil {
			a.log.Debug("NRI refresh failed; the reconcile loop holds the cgroups", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
