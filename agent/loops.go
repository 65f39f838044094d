package agent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/plugins/eviction"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// forgetEvery passes, the writer re-reads every cgroup file once, repairing changes made
// behind tidal's back.
const forgetEvery = 30

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

// slowPass samples the node, garbage-collects exited workloads, moves the plan, evicts if
// memory is short, and writes the cgroup tree.
func (a *Agent) slowPass(ctx context.Context) {
	start := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() { a.metrics.ObserveLoop("slow", time.Since(start)) }()

	s, fresh, err := a.sampleLocked(start)
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
		a.maybeEvictLocked(ctx, s)
	}
	if a.kube != nil {
		a.kubePassLocked()
	}
	a.observeGPUsLocked(start)
	a.enforceLeaseLocked(ctx, start)
	a.collectExitedLocked()
	a.passes++
	if a.passes%forgetEvery == 0 {
		a.writer.Forget()
	}
	if err := a.applyLocked(); err != nil {
		a.log.Error("cgroup settings failed", "err", err)
	}
	a.publishLocked()
}

// sampleLocked reads node CPU and memory, and each workload's usage. fresh is false on the
// first call, when there is no previous reading to take a rate from.
func (a *Agent) sampleLocked(now time.Time) (sample, bool, error) {
	var s sample
	cpus, err := metrics.ReadCPUTimes("/proc")
	if err != nil {
		return s, false, err
	}
	if s.memory, err = metrics.ReadMemory("/proc"); err != nil {
		return s, false, err
	}
	s.pressure, _ = metrics.ReadPressure("/proc", "memory") // absent on kernels without PSI
	reclaimedCPU, reclaimedMem, err := a.reclaimedUsageLocked()
	if err != nil {
		return s, false, err
	}
	s.reclaimedMemory = reclaimedMem
	a.memTotal = s.memory.TotalBytes
	a.memOnline = max(s.memory.TotalBytes-s.memory.AvailableBytes-reclaimedMem, 0)
	prev := a.sampler
	a.sampler = sampler{at: now, cpu: cpus, reclaimed: reclaimedCPU, lastOK: now}
	elapsed := now.Sub(prev.at)
	a.sampleWorkloadsLocked(now)
	if prev.cpu == nil || elapsed <= 0 {
		return s, false, nil
	}

	// Online use of each node's shared pool = busy time of its CPUs less reclaimed work's share
	// (split over nodes by where the reclaimed pool lies).
	reclaimedMilli := milli(reclaimedCPU-prev.reclaimed, elapsed)
	reclaimedCPUs := a.pools.Reclaimed().Size()
	s.advisor = advisor.Sample{Time: now, NUMA: map[int]advisor.NUMASample{},
		MemoryTotalBytes:  s.memory.TotalBytes,
		MemoryOnlineBytes: max(s.memory.TotalBytes-s.memory.AvailableBytes-reclaimedMem, 0)}
	for _, np := range a.pools {
		var busy float64
		for _, c := range np.Shared.List() {
			busy += cpus[c].Busy - prev.cpu[c].Busy
		}
		share := int64(0)
		if reclaimedCPUs > 0 {
			share = reclaimedMilli * int64(np.Reclaimed.Size()) / int64(reclaimedCPUs)
		}
		online := max(int64(busy*1000/elapsed.Seconds())-share, 0)
		s.advisor.NUMA[np.Node] = advisor.NUMASample{PoolMilliCPU: int64(np.Shared.Size()) * 1000, OnlineMilliCPU: online}
		a.online[np.Node] = online
	}
	return s, true, nil
}

// reclaimedUsageLocked sums the CPU time and memory of reclaimed work. tidal's own tier must
// be readable; a pod's cgroup may be gone already (the pod just ended).
func (a *Agent) reclaimedUsageLocked() (time.Duration, int64, error) {
	var cpu time.Duration
	var mem int64
	for i, p := range a.reclaimedCgroupsLocked() {
		c, err := a.layout.CPUUsage(p)
		if err == nil {
			var m int64
			if m, err = a.layout.MemoryUsage(p); err == nil {
				cpu, mem = cpu+c, mem+m
			}
		}
		if err != nil && i == 0 {
			return 0, 0, err
		}
	}
	return cpu, mem, nil
}

// sampleWorkloadsLocked refreshes each workload's processes, CPU rate and memory.
func (a *Agent) sampleWorkloadsLocked(now time.Time) {
	for _, w := range a.workloads {
		// Round robin by name, so the cost is spread evenly over the passes.
		if int(fnv32(w.Name)%workloadSampleEvery) != a.passes%workloadSampleEvery {
			continue
		}
		// Workload cgroups are leaves: a plain read, no directory walk. A failed read keeps
		// the last list: an unreadable cgroup is not an exited workload.
		// A pod's processes are in its containers' cgroups.
		if pids, err := a.layout.Procs(w.Cgroup, w.KubeletOwned); err == nil {
			w.pids = pids
		} else if !errors.Is(err, os.ErrNotExist) {
			a.log.Warn("cannot list a workload's processes", "cgroup", w.Cgroup, "err", err)
		} else {
			w.pids = nil
		}
		if used, err := a.layout.CPUUsage(w.Cgroup); err == nil {
			if !w.cpuAt.IsZero() {
				w.cpuMilli = milli(used-w.cpuPrev, now.Sub(w.cpuAt))
			}
			w.cpuPrev, w.cpuAt = used, now
		}
		if mem, err := a.layout.MemoryUsage(w.Cgroup); err == nil {
			w.MemoryUsage = mem
		}
	}
}

// collectExitedLocked forgets workloads whose processes are all gone.
func (a *Agent) collectExitedLocked() {
	for _, w := range a.workloads {
		if w.KubeletOwned {
			continue // pods come and go with the pod watch
		}
		if len(w.pids) == 0 && time.Since(w.Started) > time.Second {
			why := "exited"
			if w.evicting {
				why = "evicted"
			}
			a.forgetLocked(w, "release", why)
		}
	}
}

// maybeEvictLocked stops the lowest-priority reclaimed workload when memory is short, one at
// a time with a cool-down. Online workloads are never candidates.
func (a *Agent) maybeEvictLocked(ctx context.Context, s sample) {
	reason, short := eviction.MemoryShort(s.memory.AvailableBytes, s.pressure.SomeAvg10, eviction.Thresholds{
		AvailableBelowBytes: a.cfg.Memory.EvictAvailableBelowBytes,
		PressureAbove:       a.cfg.Memory.EvictPressureAbove,
	})
	if lent := a.writtenPlanLocked(time.Now()).ReclaimedMemory; !short && s.reclaimedMemory > lent {
		reason, short = fmt.Sprintf("reclaimed work holds %dMiB, more than the %dMiB lent", s.reclaimedMemory>>20, lent>>20), true
	}
	if !short || time.Since(a.lastEvict) < a.cfg.Eviction.CoolDown {
		return
	}
	for _, w := range a.workloads {
		if w.evicting {
			return // one at a time
		}
	}
	for _, victim := range eviction.Rank(a.pluginWorkloads()) {
		w := a.workloads[victim.Name]
		if len(w.pids) == 0 || time.Now().Before(w.refusedUntil) {
			continue
		}
		a.evictLocked(ctx, w, "memory-short", fmt.Sprintf("%s (priority %d, memory %dMiB): %s", w.Name, w.ReclaimPriority, w.MemoryUsage>>20, reason))
		return
	}
}

// evictLocked stops a workload: SIGTERM to every process, SIGKILL after the grace period,
// then the workload is forgotten. The wait runs in a goroutine Run waits for.
func (a *Agent) evictLocked(ctx context.Context, w *workload, label, reason string) {
	if w.KubeletOwned && w.pod == nil && a.kube.client != nil {
		return // restored from the checkpoint, not yet seen by the pod watch
	}
	w.evicting = true
	a.lastEvict = time.Now()
	a.actionLocked("evict", label, reason)
	if w.KubeletOwned && a.kube.client != nil {
		a.evictPodLocked(ctx, w, reason)
		return
	}
	if _, err := a.writer.Signal(w.Cgroup, syscall.SIGTERM); err != nil {
		a.log.Warn("SIGTERM failed", "workload", w.Name, "err", err)
	}
	a.background.Add(1)
	go func() {
		defer a.background.Done()
		deadline := time.Now().Add(a.cfg.Eviction.GracePeriod)
		for time.Now().Before(deadline) {
			if pids, _ := a.layout.Procs(w.Cgroup, true); len(pids) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				// The agent is stopping: the grace period is the workload's, not ours to
				// cut short. The next start finds it evicting no more and decides again.
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		if n, _ := a.writer.Signal(w.Cgroup, syscall.SIGKILL); n > 0 {
			a.log.Info("grace period over, killed", "workload", w.Name, "processes", n)
		}
		for i := 0; i < 40; i++ {
			if pids, _ := a.layout.Procs(w.Cgroup, true); len(pids) == 0 {
				a.mu.Lock()
				defer a.mu.Unlock()
				if a.workloads[w.Name] == w {
					a.forgetLocked(w, "release", "evicted")
				}
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		// A process stuck in the kernel keeps the workload listed (evicting) until the slow
		// loop finds its cgroup empty, instead of leaking the cgroup.
	}()
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

func milli(d, elapsed time.Duration) int64 {
	if elapsed <= 0 || d < 0 {
		return 0
	}
	return int64(float64(d) / float64(elapsed) * 1000)
}
