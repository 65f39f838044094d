package agent

import (
	"slices"
	"time"

	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
)

// Node condition reasons when the agent cannot vouch for lending.
const (
	notReadyMetricsStale = "MetricsStale"
	notReadyCgroupWrites = "CgroupWritesFailing"
)

// publish updates the metrics from the current state. The agent's lock, which the fast path
// needs, is held only to copy what the figures come from; the pass over every workload's
// decision comes after (with 200 workloads it held the lock for milliseconds every pass).
func (a *Agent) publish(snap state.Snapshot) {
	gpus := a.gpuStatus()
	now := time.Now()
	a.mu.Lock()
	plan := a.publishLendingLocked(now, snap)
	memory, io := a.memoryViewLocked(plan.ReclaimedMemory), a.ioView
	node := a.nodeLocked(plan, snap)
	primed := a.advisor.Primed()
	a.mu.Unlock()
	a.metrics.SetMemory(memory)
	a.metrics.SetIO(io)
	a.metrics.SetGPUs(gpus)
	a.metrics.SetMetricsFresh(primed)
	byTier := map[string]int{}
	for _, t := range qos.AllTiers() {
		byTier[string(t)] = 0
	}
	for _, r := range snap.Workloads {
		byTier[string(r.Tier)]++
	}
	a.metrics.SetWorkloads(byTier)
	burst := map[string]int{}
	for _, t := range qos.AllTiers() {
		burst[string(t)] = 0
	}
	for _, r := range snap.Workloads {
		if s := a.policy.Decide(r.Workload, node).Settings; s.CPUBurst > 0 || s.CPUBurstPercent > 0 {
			burst[string(r.Tier)]++
		}
	}
	a.metrics.SetCPUBurst(burst)
}

// publishLendingLocked updates the metrics of what is lent and why: all the fast path changes,
// so it need not go through every workload as publish does. It returns the written plan.
func (a *Agent) publishLendingLocked(now time.Time, snap state.Snapshot) advisor.Plan {
	plan := a.writtenPlanLocked(now, snap)
	for _, np := range a.pools {
		a.metrics.SetPool(np.Node, map[string]int{
			string(qos.System): np.System.Size(), string(qos.Dedicated): np.Dedicated.Size(),
			string(qos.Shared): np.Shared.Size(), string(qos.Reclaimed): np.Reclaimed.Size(),
		}, plan.ReclaimedMilliCPU[np.Node])
		a.metrics.SetControl(np.Node, a.controlStatusLocked(np.Node, plan.ReclaimedMilliCPU[np.Node]))
	}
	a.metrics.SetLendable(a.lendableLocked(now))
	return plan
}

// lendableLocked is what the node can vouch for lending: nothing while metrics are stale or
// cgroup writes fail, and through a baseline measurement what it lent before.
func (a *Agent) lendableLocked(now time.Time) reporter.Lendable {
	if !a.advisor.Primed() || a.applyErr != nil {
		return reporter.Lendable{}
	}
	plan := a.leaseCapLocked(a.advisor.Vouched(), now)
	return reporter.Lendable{MilliCPU: plan.TotalMilliCPU(), MemoryBytes: plan.ReclaimedMemory, GPUs: a.store.Allocator().GPUs().Lendable()}
}

// action records a decision for status, metrics and the log.
func (a *Agent) action(kind, label, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.actionLocked(kind, label, reason)
}

func (a *Agent) actionLocked(kind, label, reason string) {
	a.logAction(a.recordActionLocked(kind, label, reason))
}

// recordActionLocked keeps a decision for status and metrics without logging it: the fast
// path logs its cuts once it has written them and let go of mu, since a write to a log whose
// reader stalls (a full pipe) would hold both.
func (a *Agent) recordActionLocked(kind, label, reason string) reporter.Action {
	act := reporter.Action{Time: time.Now(), Kind: kind, Trigger: label, Reason: reason}
	a.actions = append(a.actions, act)
	if over := len(a.actions) - a.cfg.Status.ActionHistory; over > 0 {
		a.actions = append(a.actions[:0], a.actions[over:]...)
	}
	a.metrics.Action(kind, label)
	return act
}

func (a *Agent) logAction(act reporter.Action) {
	a.log.Info("action", "kind", act.Kind, "trigger", act.Trigger, "reason", act.Reason)
}

// nodeReport is what the Node object should say now (the pod source adds what it knows of
// the kubelet).
func (a *Agent) nodeReport() kube.NodeReport {
	snap := a.store.Snapshot()
	gpus := a.gpuStatus()
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	r := kube.NodeReport{Ready: true, Topology: a.topologyViewLocked(now, snap, gpus)}
	switch {
	case a.applyErr != nil:
		r.Ready, r.Reason, r.Message = false, notReadyCgroupWrites, "cgroup writes failing: "+kube.Clip(a.applyErr.Error())
	case !a.advisor.Primed():
		r.Ready, r.Reason, r.Message = false, notReadyMetricsStale, "node metrics are not fresh; lending nothing until they are"
	}
	if r.Ready {
		l := a.lendableLocked(now)
		r.MilliCPU, r.MemoryBytes, r.GPUs = l.MilliCPU, l.MemoryBytes, int64(l.GPUs)
		if a.lease != nil {
			for _, g := range a.lease.active(now) {
				if g.Queue != "" && !slices.Contains(r.Queues, g.Queue) {
					r.Queues = append(r.Queues, g.Queue)
				}
			}
			slices.Sort(r.Queues)
		}
	}
	return r
}

// numaView is one NUMA node in the tidalqos.io/topology annotation.
type numaView struct {
	Node              int    `json:"node"`
	CPUs              string `json:"cpus"`
	System            string `json:"system"`
	Dedicated         string `json:"dedicated"`
	Shared            string `json:"shared"`
	Reclaimed         string `json:"reclaimed"`
	ReclaimedMilliCPU int64  `json:"reclaimedMilliCPU"`
	// Control is how ReclaimedMilliCPU was sized (as `tidal status` shows it), with the
	// worst few indicators only, to keep the annotation small.
	Control reporter.Control `json:"control"`
	// ReclaimedMemoryBytes is the lent memory's share on this node (memory.go).
	ReclaimedMemoryBytes int64 `json:"reclaimedMemoryBytes"`
}

type topologyView struct {
	NUMA []numaView `json:"numa"`
	GPUs []gpuView  `json:"gpus,omitempty"`
	// IO is the disk IO lent to reclaimed work, per disk, where IO isolation lends it.
	IO []ioView `json:"io,omitempty"`
}

// ioView is one disk in the annotation: what it lends (bytes and IOs per second) and why.
type ioView struct {
	Device    string `json:"device"`
	Name      string `json:"name"`
	ReadBps   uint64 `json:"readBps"`
	WriteBps  uint64 `json:"writeBps"`
	ReadIOPS  uint64 `json:"readIOPS"`
	WriteIOPS uint64 `json:"writeIOPS"`
	Rule      string `json:"rule"`
}

type gpuView struct {
	UUID     string `json:"uuid"`
	NUMA     int    `json:"numa"`
	Lendable bool   `json:"lendable"`
}

func (a *Agent) topologyViewLocked(now time.Time, snap state.Snapshot, gpus []reporter.GPU) topologyView {
	var v topologyView
	plan := a.writtenPlanLocked(now, snap)
	for _, np := range a.pools {
		v.NUMA = append(v.NUMA, numaView{
			Node: np.Node, CPUs: a.topo.CPUsOfNUMA(np.Node).String(), System: np.System.String(), Dedicated: np.Dedicated.String(),
			Shared: np.Shared.String(), Reclaimed: np.Reclaimed.String(), ReclaimedMilliCPU: plan.ReclaimedMilliCPU[np.Node],
			Control:              a.annotatedControlLocked(np.Node, plan.ReclaimedMilliCPU[np.Node]),
			ReclaimedMemoryBytes: lentOnNUMA(a.topo, np.Node, plan.ReclaimedMemory),
		})
	}
	for _, g := range gpus {
		v.GPUs = append(v.GPUs, gpuView{UUID: g.UUID, NUMA: g.NUMANode, Lendable: g.Lendable})
	}
	if a.ioAdvisor != nil {
		for _, d := range a.ioView.Disks {
			v.IO = append(v.IO, ioView{Device: d.Device, Name: d.Name, ReadBps: d.Lent.ReadBps, WriteBps: d.Lent.WriteBps,
				ReadIOPS: d.Lent.ReadIOPS, WriteIOPS: d.Lent.WriteIOPS, Rule: d.Rule})
		}
	}
	return v
}

// annotatedIndicators is how many indicators (the worst) a NUMA node's control carries in the
// Node annotation.
const annotatedIndicators = 5

func (a *Agent) annotatedControlLocked(node int, lent int64) reporter.Control {
	c := a.controlStatusLocked(node, lent)
	c.Indicators = c.Indicators[:min(len(c.Indicators), annotatedIndicators)]
	return c
}
