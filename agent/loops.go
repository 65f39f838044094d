package agent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path"
	"time"

	"github.com/tidalqos/tidal/agent/evict"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/source/pods"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/eviction"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// Over recheckEvery passes, the writer re-reads every cgroup file once, repairing changes made
// behind tidal's back: a share of the cgroups on each pass (Writer.Recheck).
const recheckEvery = 30

// workloadSampleEvery passes, each workload's processes, CPU and memory are read, a share of
// the workloads on each pass: with hundreds of workloads these reads (memory.stat and
// cpuacct.usage are costly in the kernel) would cost more than the rest of the pass, and the
// figures (status, eviction order, releasing exited workloads) need no fresher view.
const workloadSampleEvery = 10

// sampler turns cumulative counters into rates between slow-loop passes.
type sampler struct {
	at        time.Time
	cpu       map[int]metrics.CPUTime
	reclaimed time.Duration
	lastOK    time.Time
}

// sample is one slow-loop reading of the node.
type sample struct {
	advisor  advisor.Sample
	memory   metrics.Memory
	pressure metrics.Pressure
	// reclaimedMemory is what reclaimed work holds; above the lent memory it means the
	// kernel could not shrink the limit (it refuses to go under usage it cannot reclaim).
	reclaimedMemory int64
	// reclaimedUnderOOM: reclaimed work waits at its limit (v1 oom_kill_disable).
	reclaimedUnderOOM bool
}

func (a *Agent) slowLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Loops.SlowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.slowPass(ctx)
		}
	}
}

// slowPass samples the node (no lock held), moves the plan, evicts if memory is short or a
// lease ended or online work needs a GPU back, and writes the cgroup tree.
func (a *Agent) slowPass(ctx context.Context) {
	start := time.Now()
	defer func() { a.metrics.ObserveLoop("slow", time.Since(start)) }()
	for _, src := range a.sources {
		if r, ok := src.(source.Refreshing); ok {
			r.Refresh()
		}
	}
	snap := a.store.Snapshot()
	a.mu.Lock()
	pools := a.pools
	a.mu.Unlock()

	s, fresh, err := a.sample(start, snap, pools)
	a.mu.Lock()
	// The memory lent while the sample was read: a shrink below comes into force with this
	// pass's writes, and the kernel gets to reclaim before anyone is evicted for it.
	lentMemory := a.writtenPlanLocked(start, snap).ReclaimedMemory
	if err == nil {
		a.advisor.KeepMemory(a.memoryPolicy.LimitAbove(s.reclaimedMemory))
	}
	switch {
	case err != nil && start.Sub(a.sampler.lastOK) > a.cfg.Loops.MetricsStaleAfter:
		a.log.Warn("node metrics unavailable", "err", err)
		for _, c := range a.advisor.Reset("metrics stale") {
			a.actionLocked(c.Kind, "metrics-stale", c.Reason)
		}
	case err != nil:
		a.log.Warn("node metrics unavailable", "err", err)
	case fresh:
		for _, c := range a.advisor.Step(s.advisor) {
			a.actionLocked(c.Kind, "online-usage", c.Reason)
		}
	}
	a.spikeLimitsChangedLocked()
	a.mu.Unlock()
	if err == nil && fresh {
		a.maybeEvictForMemory(ctx, s, lentMemory)
	}
	a.maybeEvictStarved(ctx, start)
	a.observeGPUs(ctx, start)
	a.enforceLease(ctx, start)
	a.refreshChildren(snap)
	a.passes++
	a.writer.Recheck(a.passes, recheckEvery)
	if err := a.reconcile(); err != nil {
		a.log.Error("cgroup settings failed", "err", err)
	}
	a.completedPasses.Add(1)
	a.lastPass.Store(time.Now().UnixNano())
}

// sample reads node CPU and memory, and a share of the workloads' usage. fresh is false on
// the first call, when there is no previous reading to take a rate from.
func (a *Agent) sample(now time.Time, snap state.Snapshot, pools plugins.Pools) (sample, bool, error) {
	var s sample
	cpus, err := metrics.ReadCPUTimes(a.procDir)
	if err != nil {
		return s, false, err
	}
	if s.memory, err = metrics.ReadMemory(a.procDir); err != nil {
		return s, false, err
	}
	s.pressure, _ = metrics.ReadPressure(a.procDir, "memory") // absent on kernels without PSI
	reclaimedCPU, reclaimedMem, err := a.reclaimedUsage(snap)
	if err != nil {
		return s, false, err
	}
	s.reclaimedMemory, s.reclaimedUnderOOM = reclaimedMem.WorkingSet, reclaimedMem.UnderOOM
	online, onlineCache := onlineMemory(s.memory, reclaimedMem, a.cfg.Memory.OnlinePageCache)
	prev := a.sampler
	a.sampler = sampler{at: now, cpu: cpus, reclaimed: reclaimedCPU, lastOK: now}
	elapsed := now.Sub(prev.at)
	a.sampleWorkloads(now, snap)
	a.mu.Lock()
	a.memTotal, a.memOnline = s.memory.TotalBytes, online
	a.memFigures = memoryFigures{onlinePageCache: onlineCache, reclaimed: reclaimedMem.WorkingSet, waiting: reclaimedMem.UnderOOM}
	a.mu.Unlock()
	if prev.cpu == nil || elapsed <= 0 {
		return s, false, nil
	}

	// Online use of each node's shared pool = busy time of its CPUs less reclaimed work's share
	// (split over nodes by where the reclaimed pool lies). Busy time includes the hypervisor's
	// steal on a VM, so CPU the host takes counts against what can be lent.
	reclaimedMilli := state.Milli(reclaimedCPU-prev.reclaimed, elapsed)
	reclaimedCPUs := 0
	for _, np := range pools {
		reclaimedCPUs += np.Reclaimed.Size()
	}
	s.advisor = advisor.Sample{Time: now, NUMA: map[int]advisor.NUMASample{},
		MemoryTotalBytes: s.memory.TotalBytes, MemoryOnlineBytes: online}
	perNode := map[int]int64{}
	for _, np := range pools {
		var busy float64
		for _, c := range np.Shared.List() {
			busy += cpus[c].Busy - prev.cpu[c].Busy
		}
		share := int64(0)
		if reclaimedCPUs > 0 {
			share = reclaimedMilli * int64(np.Reclaimed.Size()) / int64(reclaimedCPUs)
		}
		used := max(int64(busy*1000/elapsed.Seconds())-share, 0)
		s.advisor.NUMA[np.Node] = advisor.NUMASample{PoolMilliCPU: int64(np.Shared.Size()) * 1000, OnlineMilliCPU: used}
		perNode[np.Node] = used
	}
	a.mu.Lock()
	for n, v := range perNode {
		a.online[n] = v
	}
	a.mu.Unlock()
	return s, true, nil
}

// reclaimedCgroups are the cgroups holding reclaimed work: tidal's tier and reclaimed pods.
func (a *Agent) reclaimedCgroups(snap state.Snapshot) []string {
	out := []string{plugins.TierPath(a.cfg.Cgroup.Root, qos.Reclaimed)}
	for _, r := range snap.Workloads {
		if r.Owner.Foreign() && r.Tier == qos.Reclaimed {
			out = append(out, r.Cgroup)
		}
	}
	return out
}

// reclaimedUsage sums the CPU time and memory of reclaimed work. tidal's own tier must be
// readable; a pod's cgroup may be gone already (the pod just ended).
func (a *Agent) reclaimedUsage(snap state.Snapshot) (time.Duration, reclaimedMemory, error) {
	var used time.Duration
	var mem reclaimedMemory
	for i, p := range a.reclaimedCgroups(snap) {
		c, err := a.layout.CPUUsage(p)
		if err == nil {
			var m cgroupfs.MemoryStat
			if m, err = a.layout.MemoryStat(p); err == nil {
				used += c
				mem.add(m)
			}
		}
		if err != nil && i == 0 {
			return 0, reclaimedMemory{}, err
		}
	}
	return used, mem, nil
}

// sampleWorkloads refreshes a share of the workloads' processes, CPU rate and memory.
func (a *Agent) sampleWorkloads(now time.Time, snap state.Snapshot) {
	for _, r := range snap.Workloads {
		// Round robin by name, so the cost is spread evenly over the passes; a workload not
		// read yet is read at once, so status never shows a new one at 0m for long.
		if r.Sampled() && int(fnv32(r.Name)%workloadSampleEvery) != a.passes%workloadSampleEvery {
			continue
		}
		var u state.Usage
		// Workload cgroups are leaves: a plain read, no directory walk. A failed read keeps
		// the last list: an unreadable cgroup is not an exited workload. A pod's processes
		// are in its containers' cgroups.
		pids, err := a.layout.Procs(r.Cgroup, r.Owner.Foreign())
		switch {
		case err == nil:
			u.PIDs, u.Gone = pids, len(pids) == 0
		case errors.Is(err, os.ErrNotExist):
			u.Gone = true
		default:
			a.log.Warn("cannot list a workload's processes", "cgroup", r.Cgroup, "err", err)
		}
		if used, err := a.layout.CPUUsage(r.Cgroup); err == nil {
			u.CPU, u.HaveCPU = used, true
		}
		if mem, err := a.layout.MemoryUsage(r.Cgroup); err == nil {
			u.MemoryBytes, u.HaveMemory = mem, true
		}
		a.store.Observe(r.Name, now, u)
	}
}

// refreshChildren lists the child cgroups of foreign workloads (a pod's containers), which
// cgroup v1 needs narrowed with the pod's cpuset.
func (a *Agent) refreshChildren(snap state.Snapshot) {
	for _, r := range snap.Workloads {
		if !r.Owner.Foreign() {
			continue
		}
		a.store.SetChildren(r.Name, a.children(r.Cgroup))
	}
}

// children lists a cgroup's child cgroups (none when it cannot be read).
func (a *Agent) children(cgroup string) []string {
	names, err := a.layout.Children(cgroup)
	if err != nil {
		return nil
	}
	cs := make([]string, 0, len(names))
	for _, n := range names {
		cs = append(cs, path.Join(cgroup, n))
	}
	return cs
}

// maybeEvictForMemory stops the lowest-priority reclaimed workload when memory is short, or
// when reclaimed work holds more than the lentWhenSampled the kernel was asked to hold it to,
// one at a time with a cool-down. Online workloads are never candidates.
func (a *Agent) maybeEvictForMemory(ctx context.Context, s sample, lentWhenSampled int64) {
	reason, short := eviction.MemoryShort(s.memory.AvailableBytes, s.pressure.SomeAvg10, eviction.Thresholds{
		AvailableBelowBytes: a.cfg.Memory.EvictAvailableBelowBytes,
		PressureAbove:       a.cfg.Memory.EvictPressureAbove,
	})
	snap := a.store.Snapshot()
	a.mu.Lock()
	lent := a.writtenPlanLocked(time.Now(), snap).ReclaimedMemory
	cooling := time.Since(a.lastEvict) < a.cfg.Eviction.CoolDown
	stalled := a.memStall.observe(time.Now(), s.reclaimedUnderOOM, lent, a.cfg.Memory.StalledEvictAfter)
	a.mu.Unlock()
	// Over both the limit in force when sampled and the one decided now, by more than the
	// kernel's counting slack: work waiting at its limit (memory.oomWait) reads a little over
	// it, and a limit just grown or shrunk is not yet in force.
	if held := max(lent, lentWhenSampled); !short && s.reclaimedMemory > held+memoryCountSlack(held) {
		reason, short = fmt.Sprintf("reclaimed work holds %dMiB, more than the %dMiB lent", s.reclaimedMemory>>20, held>>20), true
	}
	if !short && stalled != "" {
		reason, short = stalled, true
	}
	if !short || cooling || evicting(snap) {
		return
	}
	now := time.Now()
	for _, victim := range eviction.Rank(snap.Plugins()) {
		r, _ := snap.Get(victim.Name)
		if len(r.PIDs) == 0 || now.Before(r.RefusedUntil) {
			continue
		}
		a.evict(ctx, r, "memory-short", fmt.Sprintf("%s (priority %d, memory %dMiB): %s", r.Name, r.ReclaimPriority, r.MemoryUsage>>20, reason))
		return
	}
}

// memoryCountSlack is how far the kernel's memory figures may read over a limit that holds:
// cgroup v1 charges in per-CPU batches, so usage at the limit reads a little above it.
func memoryCountSlack(limit int64) int64 { return max(limit/100, 4<<20) }

// evicting says whether an eviction is under way: they go one at a time.
func evicting(snap state.Snapshot) bool {
	for _, r := range snap.Workloads {
		if r.Evicting {
			return true
		}
	}
	return false
}

// evictionRetryAfter is how long a workload whose eviction was refused is passed over.
const evictionRetryAfter = 30 * time.Second

// evict stops a workload through the evictor of the source that runs it, in a goroutine Run
// waits for. Every trigger comes here: memory, lease end, GPU reclaim, CPU starvation.
func (a *Agent) evict(ctx context.Context, r state.Record, label, reason string) {
	if r.Owner.Foreign() && r.Source == "" && a.pods != nil {
		return // restored from the checkpoint, not yet seen by the pod watch
	}
	if !a.store.SetEvicting(r.Name, true, time.Time{}) {
		return // gone, or being evicted already
	}
	a.mu.Lock()
	a.lastEvict = time.Now()
	a.actionLocked("evict", label, reason)
	a.mu.Unlock()
	ev, ok := a.evictors[r.Source]
	if !ok {
		ev = a.signal
	}
	a.background.Go(func() {
		err := ev.Evict(ctx, evict.Victim{Name: r.Name, UID: r.UID, Cgroup: r.Cgroup, Reason: reason})
		switch {
		case ctx.Err() != nil:
			// The agent is stopping; the next start finds the workload and decides again.
		case errors.Is(err, evict.ErrStuck):
			// A process stuck in the kernel keeps the workload listed (evicting) until its
			// cgroup is found empty, instead of leaking the cgroup.
			a.log.Warn("evicted workload still has processes", "workload", r.Name)
		case err != nil:
			a.store.SetEvicting(r.Name, false, time.Now().Add(evictionRetryAfter))
			a.log.Warn("eviction refused; the next victim is tried, this one again later", "workload", r.Name, "err", err, "retryAfter", evictionRetryAfter)
		case r.Source == pods.Name:
			// Accepted: the kubelet stops the pod and the watch reports it gone.
		default:
			a.forget(r.Name, r.UID, r.Started, "evicted")
		}
	})
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
