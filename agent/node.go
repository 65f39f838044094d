package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/source/hooks"
	"github.com/tidalqos/tidal/agent/source/pods"
	"github.com/tidalqos/tidal/agent/source/standalone"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/cri"
	"github.com/tidalqos/tidal/isolation/nri"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// newSources makes the workload sources the config asks for: standalone always (the local
// API), the pod watch in kubernetes mode, the runtime hooks when configured.
func (a *Agent) newSources() error {
	node := nodeState{a}
	a.standalone = standalone.New(standalone.Options{
		Node: node, Root: a.cfg.Cgroup.Root, CPUs: a.topo.AllCPUs().Size(), Cgroups: standaloneCgroups{a.writer, a.layout},
		OOMScoreAdj: func(w plugins.Workload) int { return a.decide(w).OOMScoreAdj },
		ProcDir:     a.procDir, Interval: a.cfg.Loops.SlowInterval, Log: a.log,
	})
	a.sources = append(a.sources, a.standalone)
	if a.cfg.Mode == config.ModeKubernetes {
		rc, err := kube.RESTConfig(a.cfg.Kubernetes.Kubeconfig)
		if err != nil {
			return err
		}
		client, err := kube.NewClient(rc, a.cfg.NodeName, a.cfg.Kubernetes.TierPolicy, a.log)
		if err != nil {
			return err
		}
		a.pods = pods.New(pods.Options{
			Node: node, Client: client, CgroupDriver: a.cfg.Kubernetes.CgroupDriver, CgroupRoot: a.cfg.Kubernetes.CgroupRoot,
			CPUManagerStateFile: a.cfg.Kubernetes.CPUManagerStateFile, Exists: a.layout.Exists, Report: a.nodeReport,
			Damper:   kube.Damper{MinChange: a.cfg.Kubernetes.PublishMinChange, MaxAge: a.cfg.Kubernetes.PublishMaxAge},
			Interval: a.cfg.Loops.SlowInterval, Grace: a.cfg.Eviction.GracePeriod, Log: a.log,
		})
		a.sources = append(a.sources, a.pods)
		a.evictors[pods.Name] = a.pods.Evictor()
	}
	if a.cfg.Hooks.CRIProxy || a.cfg.Hooks.NRI {
		v2 := a.layout.Version == cgroupfs.V2
		o := hooks.Options{
			Node: node, Decide: a.decide, Reconcile: a.reconcile, Exists: a.layout.Exists,
			Pinned:       a.hookPinned(),
			PoolsChanged: a.poolsChanged, Interval: a.cfg.Loops.SlowInterval, Log: a.log,
		}
		if a.pods != nil {
			o.Policy = a.pods.Policy
		}
		if a.cfg.Hooks.CRIProxy {
			o.CRI = &cri.Options{Socket: a.cfg.Hooks.CRISocket, RuntimeSocket: a.cfg.Hooks.RuntimeSocket,
				Timeout: a.cfg.Hooks.Timeout, CgroupV2: v2, Observer: a.metrics, Log: a.log}
		}
		if a.cfg.Hooks.NRI {
			o.NRI = &nri.Options{Socket: a.cfg.Hooks.NRISocket, Timeout: a.cfg.Hooks.Timeout, CgroupV2: v2, Observer: a.metrics, Log: a.log}
		}
		a.sources = append(a.sources, hooks.New(o))
	}
	return nil
}

// hookPinned is where the hooks learn which pods the kubelet's CPU manager pinned: the pod
// source's view, or without Kubernetes the state file read when asked.
func (a *Agent) hookPinned() func(string) (cpuset.CPUSet, bool) {
	if a.pods != nil {
		return a.pods.Pinned
	}
	return func(uid string) (cpuset.CPUSet, bool) {
		all, err := kube.ExclusiveCPUs(a.cfg.Kubernetes.CPUManagerStateFile)
		if err != nil {
			return cpuset.New(), false
		}
		c, ok := all[types.UID(uid)]
		return c, ok
	}
}

func (a *Agent) sourceNames() []string {
	var out []string
	for _, s := range a.sources {
		out = append(out, s.Name())
	}
	return out
}

// standaloneCgroups is what the standalone source does to cgroups itself.
type standaloneCgroups struct {
	writer *isolation.Writer
	layout *cgroupfs.Layout
}

func (c standaloneCgroups) Attach(cgroup string, pid int) error { return c.writer.Attach(cgroup, pid) }
func (c standaloneCgroups) SetOOMScoreAdj(pid, score int) error {
	return c.writer.SetOOMScoreAdj(pid, score)
}
func (c standaloneCgroups) Procs(cgroup string) ([]int, error) { return c.layout.Procs(cgroup, true) }

// nodeState is the node state as the sources see it (source.Node): each change is written
// to the cgroups, recorded as an action and checkpointed.
type nodeState struct{ a *Agent }

var _ source.Node = nodeState{}

func (n nodeState) Snapshot() state.Snapshot             { return n.a.store.Snapshot() }
func (n nodeState) Get(name string) (state.Record, bool) { return n.a.store.Get(name) }
func (n nodeState) Save() error                          { return n.a.store.Save() }

func (n nodeState) Processes(name string, pids []int) {
	n.a.store.Observe(name, time.Now(), state.Usage{PIDs: pids, Gone: len(pids) == 0})
}

// Add registers a workload and writes its cgroup with its settings before returning, so its
// first process joins a confined cgroup; when that write fails, nothing is kept.
func (n nodeState) Add(spec state.Spec) (state.Record, error) {
	a := n.a
	r, err := a.store.Add(spec)
	if err != nil {
		return state.Record{}, err
	}
	if err := a.reconcile(); err != nil {
		a.store.Remove(r.Name)
		if !r.Owner.Foreign() {
			_ = a.removeCgroup(r.Cgroup)
		}
		_ = a.reconcile()
		return state.Record{}, fmt.Errorf("set up cgroup %s: %w", r.Cgroup, err)
	}
	a.action("admit", spec.Source, fmt.Sprintf("%s as %s (%s)%s", r.Name, r.Tier, spec.Origin, describeCPUs(r.Workload)))
	return r, nil
}

// Put adds or updates a workload. A failed cgroup write is retried by the slow loop (a pod's
// cgroup may not exist yet).
func (n nodeState) Put(spec state.Spec) (state.Record, error) {
	a := n.a
	old, had := a.store.Get(spec.Name)
	if spec.Owner.Foreign() && spec.Children == nil && !had {
		// A new pod: its containers get the pod's cpuset from the first write on. Later the
		// slow loop lists them, after its sources refreshed what decides them.
		spec.Children = a.children(spec.Cgroup)
	}
	r, err := a.store.Put(spec)
	if err != nil {
		return state.Record{}, err
	}
	switch {
	case !had || old.UID != r.UID:
		a.action("admit", spec.Source, fmt.Sprintf("%s as %s (%s)%s", r.Name, r.Tier, spec.Origin, describeCPUs(r.Workload)))
	case old.Tier != r.Tier || !old.DedicatedCPUs.Equals(r.DedicatedCPUs):
		a.action("admit", spec.Source, fmt.Sprintf("%s now %s (was %s)%s", r.Name, r.Tier, old.Tier, describeCPUs(r.Workload)))
	}
	if err := a.reconcile(); err != nil {
		a.log.Error("cgroup settings failed", "err", err)
	}
	return r, nil
}

// Remove forgets a workload; what it held goes back to the pools.
func (n nodeState) Remove(name, why string) { n.a.forget(name, "", time.Time{}, why) }

// forget drops a workload (only if it is still the one with uid and started, when those are
// given) and its cgroup if tidal made it.
func (a *Agent) forget(name, uid string, started time.Time, why string) {
	var r state.Record
	var ok bool
	if started.IsZero() {
		r, ok = a.store.Remove(name)
	} else {
		r, ok = a.store.RemoveIf(name, uid, started)
	}
	if !ok {
		return
	}
	if r.Owner.Foreign() {
		// The kubelet removes a pod's cgroup; tidal only stops tracking it.
		a.reconciling.Lock()
		a.writer.ForgetPath(r.Cgroup)
		a.reconciling.Unlock()
	} else if err := a.removeCgroup(r.Cgroup); err != nil {
		a.log.Warn("cannot remove workload cgroup", "cgroup", r.Cgroup, "err", err)
	}
	a.action("release", why, fmt.Sprintf("%s (%s): %s", r.Name, r.Tier, why))
	if err := a.reconcile(); err != nil {
		a.log.Error("cgroup settings failed", "err", err)
	}
}

// removeCgroup removes the cgroup of a workload already gone from the registry. It waits for
// a reconcile pass in flight: that pass may hold a snapshot from before the removal and would
// make the cgroup again after it (an orphan cgroup, one in a few thousand churns of the
// soak); every pass after it reads a snapshot without the workload.
func (a *Agent) removeCgroup(cgroup string) error {
	a.reconciling.Lock()
	defer a.reconciling.Unlock()
	return a.writer.Remove(cgroup)
}

func describeCPUs(w plugins.Workload) string {
	if w.DedicatedCPUs.IsEmpty() {
		return ""
	}
	return " on CPUs " + w.DedicatedCPUs.String()
}

// reconcile brings the cgroup tree to the settings the registry and the plan call for. The
// registry is read as one snapshot; the writes happen under no lock but the writer's own.
// When writes fail, lending drops to its minimum and the published capacity to zero until
// they succeed again.
func (a *Agent) reconcile() error {
	a.reconciling.Lock()
	defer a.reconciling.Unlock()
	snap := a.store.Snapshot()
	var err error
	var generation uint64
	// A pass the fast path preempts wrote only part of the tree; it goes again with the new
	// plan at once, not at the next pass, so that a workload Add admits is confined when Add
	// returns (unless a spike preempts every attempt: its tier holds it meanwhile). The
	// writer skips what is already written, so a retry costs little.
	for attempt := 1; ; attempt++ {
		var plan advisor.Plan
		var node plugins.Node
		plan, node, generation = a.currentPlan(snap)
		err = a.writer.Apply(a.desired(snap, node, plan).Cgroups())
		if !errors.Is(err, isolation.ErrPreempted) {
			break
		}
		if attempt == maxPreemptedAttempts {
			// The fast path keeps needing the writer (a spike under way): it wrote the
			// reclaimed limits, and the rest waits for the next pass.
			a.log.Debug("cgroup pass preempted by the fast path", "attempts", attempt)
			err = nil
			break
		}
	}

	a.mu.Lock()
	if err != nil {
		// Every failing pass, not only the first: the slow loop must not grow lending back
		// while writes keep failing.
		for _, c := range a.advisor.Reset("cgroup writes failing") {
			a.actionLocked("shrink", "cgroup-error", c.Reason)
		}
		a.spikeLimitsChangedLocked()
	}
	a.applyErr = err
	shrunk := a.planGeneration != generation
	a.mu.Unlock()
	if err == nil && len(a.moves) > 0 {
		a.moveLegacyLocked()
	}
	if shrunk {
		// The fast path shrank lending while this pass wrote the older, larger limits.
		a.writeReclaimedLimits()
	}
	a.publish(snap)
	return err
}

// currentPlan is the plan to write now, with the node and pools it makes (the pools are kept)
// and the plan's generation. Runtime hooks hold their own copy of containers' cpusets: they
// are told when the pools' CPUs change.
func (a *Agent) currentPlan(snap state.Snapshot) (advisor.Plan, plugins.Node, uint64) {
	a.mu.Lock()
	now := time.Now()
	plan := a.writtenPlanLocked(now, snap)
	old := a.pools
	a.pools = a.computePoolsLocked(now, snap, plan.ReclaimedMilliCPU)
	a.spikeLimitsChangedLocked()
	node := a.nodeLocked(plan, snap)
	generation := a.planGeneration
	a.mu.Unlock()
	if !samePoolCPUs(old, node.Pools) {
		select {
		case a.poolsChanged <- struct{}{}:
		default:
		}
	}
	return plan, node, generation
}

// maxPreemptedAttempts bounds how often one pass starts again after the fast path preempted it.
const maxPreemptedAttempts = 3

// desired is the cgroup tree the registry and the plan call for: pure computation, no I/O.
func (a *Agent) desired(snap state.Snapshot, node plugins.Node, plan advisor.Plan) *plugins.Tree {
	ws := snap.Plugins()
	children := map[string][]string{}
	for _, r := range snap.Workloads {
		if r.Owner.Foreign() && len(r.Children) > 0 {
			children[r.Cgroup] = r.Children
		}
	}
	tree := plugins.NewTree(a.cfg.Cgroup.Root, ws, children)
	a.policy.Fill(tree, node)
	for _, w := range ws {
		*tree.Workload(w) = a.decideOn(w, node).Settings
	}
	return tree
}

// decide is the one decision function for a workload on the node as it is now: the
// reconcile pass, the CRI proxy and the NRI plugin all come here.
func (a *Agent) decide(w plugins.Workload) plugins.Decision {
	snap := a.store.Snapshot()
	a.mu.Lock()
	node := a.nodeLocked(a.writtenPlanLocked(time.Now(), snap), snap)
	a.mu.Unlock()
	return a.decideOn(w, node)
}

func (a *Agent) decideOn(w plugins.Workload, node plugins.Node) plugins.Decision {
	if len(w.GPUs) > 0 {
		_, w.GPUMinors = a.gpus().Visibility(w.Name)
	}
	return a.policy.Decide(w, node)
}

// gpus is the GPU tracker the allocator lends from.
func (a *Agent) gpus() *pgpu.Tracker { return a.store.Allocator().GPUs() }

// nodeLocked is what the decision function needs to know of the node under plan, with the
// workloads of snap.
func (a *Agent) nodeLocked(plan advisor.Plan, snap state.Snapshot) plugins.Node {
	n := plugins.Node{CPUs: a.topo.AllCPUs(), Pools: a.pools, LentMilliCPU: plan.TotalMilliCPU(), LentMemory: plan.ReclaimedMemory, Idle: a.idle,
		ReclaimedCPU: a.mechanism(), GPUMinors: a.gpus().Minors(), LentIO: a.ioLent, IOClear: a.ioClear, IOWeightWorks: a.ioWeight,
		IOFlat: a.layout.Version == cgroupfs.V1}
	podCaps := map[string]int64{}
	for _, r := range snap.Workloads {
		if r.Tier != qos.Reclaimed {
			continue
		}
		if a.ioLent != nil { // only IO lent is shared out by count
			n.ReclaimedWorkloads++
		}
		if r.Owner.Foreign() {
			podCaps[r.Name] = r.MilliCPU
		}
	}
	n.ReclaimedPodParts = cpu.PodShares(n.LentMilliCPU, podCaps)
	return n
}

// minWrittenMemory is the least memory limit the reclaimed tier gets: 0 would mean "leave
// the limit as it is", and a few MiB keeps the kernel's own allocations possible.
const minWrittenMemory = standalone.MinMemory

// writtenPlanLocked is what the cgroups get: the plan capped by the lease, but never under
// the minimum on any NUMA node, so the reclaimed pool always has a CPU and a limit that are
// written (an empty pool or a zero limit would leave stale, wider settings in place). Nor does
// the lease take memory under what reclaimed work holds (as the plan has it): a lease not yet
// granted after a restart, or expired with the arbiter away, would have it evicted at once as
// holding more than is lent; a queue without a grant loses its work after the grace period
// instead (enforceLease), and the rest stops growing.
func (a *Agent) writtenPlanLocked(now time.Time, snap state.Snapshot) advisor.Plan {
	plan := a.advisor.Plan()
	kept := min(plan.ReclaimedMemory, a.advisor.MemoryKept())
	plan = a.leaseCapLocked(plan, now)
	plan.ReclaimedMemory = max(plan.ReclaimedMemory, kept)
	for _, np := range cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, snap.Dedicated, nil) {
		floor := min(a.cfg.CPU.MinReclaimedMilliCPU, int64(np.Shared.Size())*1000)
		plan.ReclaimedMilliCPU[np.Node] = max(plan.ReclaimedMilliCPU[np.Node], floor)
	}
	plan.ReclaimedMemory = max(plan.ReclaimedMemory, a.cfg.Memory.MinReclaimedBytes, minWrittenMemory)
	return plan
}

// samePoolCPUs reports whether two pool layouts put the same CPUs in every pool.
func samePoolCPUs(x, y plugins.Pools) bool {
	return x.System().Equals(y.System()) && x.Dedicated().Equals(y.Dedicated()) &&
		x.Shared().Equals(y.Shared()) && x.Reclaimed().Equals(y.Reclaimed()) && x.Online().Equals(y.Online())
}

// restore rebuilds the registry after a start or restart from the checkpoint and the cgroups
// on disk: a workload is kept only while its cgroup has processes; a populated cgroup missing
// from the checkpoint is adopted (tier from its path, cores from its cpuset); empty ones go.
// A pod's workload is kept while its cgroup is there, so its cores do not move; its source
// confirms or drops it once it has synced. Online workloads keep their cores: nothing moves.
func (a *Agent) restore() error {
	saved, err := state.LoadCheckpoint(a.cfg.StateDir)
	if err != nil {
		a.log.Warn("ignoring checkpoint; rebuilding from cgroups on disk", "err", err)
	}
	podSources := a.pods != nil || a.cfg.Hooks.CRIProxy || a.cfg.Hooks.NRI
	// A kept pod's source: the pod watch confirms or drops it once synced; without one, the
	// runtime hooks' collector drops it once the runtime removes its cgroup.
	podSource := ""
	if a.pods == nil {
		podSource = hooks.Name
	}
	byPath := map[string]plugins.Workload{}
	var keep []state.Record
	for _, w := range saved {
		byPath[w.Cgroup] = w
		if w.Owner.Foreign() && podSources && a.layout.Exists(w.Cgroup) {
			pids, _ := a.layout.Procs(w.Cgroup, true)
			keep = append(keep, state.Record{Workload: w, Source: podSource, PIDs: pids})
		}
	}
	for _, tier := range qos.AllTiers() {
		found, err := a.scanTier(plugins.TierPath(a.cfg.Cgroup.Root, tier), tier, byPath)
		if err != nil {
			return err
		}
		keep = append(keep, found...)
	}
	moved, err := a.adoptLegacyReclaimed(byPath)
	if err != nil {
		return err
	}
	keep = append(keep, moved...)
	for _, err := range a.store.Adopt(keep) {
		a.log.Warn("cannot restore lent GPUs", "err", err)
	}
	if len(keep) > 0 {
		a.log.Info("restored workloads", "count", len(keep))
	}
	return nil
}

// scanTier returns a record for every workload cgroup with processes in tier's cgroup dir,
// its checkpointed workload where there is one, and removes the empty ones.
func (a *Agent) scanTier(dir string, tier qos.Tier, byPath map[string]plugins.Workload) ([]state.Record, error) {
	names, err := a.layout.Children(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read cgroup %s: %w", dir, err)
	}
	var found []state.Record
	for _, name := range names {
		p := path.Join(dir, name)
		pids, err := a.layout.Procs(p, true)
		if err == nil && len(pids) == 0 {
			if err := a.writer.Remove(p); err != nil {
				a.log.Warn("cannot remove empty workload cgroup", "cgroup", p, "err", err)
			}
			continue
		}
		w, ok := byPath[p]
		if !ok {
			w = plugins.Workload{Name: name, Tier: tier, Cgroup: p, Started: time.Now(), DedicatedCPUs: cpuset.New()}
			if tier == qos.Dedicated {
				text, _ := a.layout.CPUs(p)
				w.DedicatedCPUs, _ = cpuset.Parse(text)
			}
			a.log.Warn("adopting a workload missing from the checkpoint", "cgroup", p, "pids", pids)
		}
		found = append(found, state.Record{Workload: w, Source: standalone.Name, PIDs: pids})
	}
	return found, nil
}

// Teardown removes tidal's cgroup tree (workloads, tiers, root) once no process is left in it.
// The demo and tests call it after stopping the agent; a production agent leaves its tree.
func (a *Agent) Teardown() error {
	var errs []error
	for _, r := range a.store.Snapshot().Workloads {
		a.store.Remove(r.Name)
		if !r.Owner.Foreign() {
			errs = append(errs, a.writer.Remove(r.Cgroup))
		}
	}
	for _, tier := range qos.AllTiers() {
		tierPath := plugins.TierPath(a.cfg.Cgroup.Root, tier)
		names, _ := a.layout.Children(tierPath)
		for _, n := range names {
			errs = append(errs, a.writer.Remove(path.Join(tierPath, n)))
		}
		errs = append(errs, a.writer.Remove(tierPath))
	}
	errs = append(errs, a.writer.Remove(a.cfg.Cgroup.Root))
	return errors.Join(errs...)
}
