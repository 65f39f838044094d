package agent

import (
	"fmt"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// memoryResource is the memory dimension configured from the agent's config.
func memoryResource(cfg config.Memory) memory.Resource {
	margin := cfg.ThrottleMarginBytes
	if margin == 0 {
		margin = -1 // configured as none: memory.Resource takes 0 as its default
	}
	return memory.Resource{ThrottleMarginBytes: margin, NoOOMWait: !cfg.OOMWait}
}

// reclaimedMemory is what reclaimed work holds, summed over its cgroups.
type reclaimedMemory struct {
	cgroupfs.MemoryStat
}

func (r *reclaimedMemory) add(s cgroupfs.MemoryStat) {
	r.WorkingSet += s.WorkingSet
	r.ActiveFile += s.ActiveFile
	r.UnderOOM = r.UnderOOM || s.UnderOOM
}

// onlineMemory is the memory online work (everything but reclaimed work) needs: what is not
// available less reclaimed work's own non-file memory, plus, with pageCache, online work's
// active page cache. MemAvailable counts page cache as free, so without that part the node
// lends memory whose use evicts online work's hot files. Reclaimed work's own page cache is
// not counted: it is charged to the reclaimed cgroups, whose limit and throttle point make
// the kernel reclaim it first.
func onlineMemory(m metrics.Memory, r reclaimedMemory, pageCache bool) (online, onlineActiveFile int64) {
	reclaimedNonFile := max(r.WorkingSet-r.ActiveFile, 0)
	online = max(m.TotalBytes-m.AvailableBytes-reclaimedNonFile, 0)
	if pageCache {
		onlineActiveFile = max(m.ActiveFileBytes-r.ActiveFile, 0)
	}
	return min(online+onlineActiveFile, m.TotalBytes), onlineActiveFile
}

// memoryStall tracks reclaimed work waiting at its limit (v1 oom_kill_disable) while what is
// lent does not grow: the wait would never end, so after cfg.StalledEvictAfter the lowest
// priority workload is evicted.
type memoryStall struct {
	since time.Time
	lent  int64
}

// observe records one pass; it returns the reason to evict, or "".
func (s *memoryStall) observe(now time.Time, underOOM bool, lent int64, after time.Duration) string {
	grew := lent > s.lent
	s.lent = lent
	if !underOOM || grew {
		s.since = time.Time{}
		return ""
	}
	if s.since.IsZero() {
		s.since = now
	}
	if waited := now.Sub(s.since); waited >= after {
		return fmt.Sprintf("reclaimed work has waited %s at its %dMiB limit and lending cannot grow", waited.Round(time.Second), lent>>20)
	}
	return ""
}

// memoryFigures are the latest sample's memory figures for status and metrics.
type memoryFigures struct {
	onlinePageCache, reclaimed int64
	waiting                    bool
}

// memoryViewLocked is the memory dimension's state for status and metrics, with lent the
// memory written to the reclaimed tier.
func (a *Agent) memoryViewLocked(lent int64) reporter.Memory {
	v := reporter.Memory{
		LentBytes: lent, ThrottleBytes: a.memoryPolicy.Throttle(lent),
		OnlineBytes: a.memOnline, OnlinePageCacheBytes: a.memFigures.onlinePageCache,
		ReclaimedBytes: a.memFigures.reclaimed, ReclaimedWaiting: a.memFigures.waiting,
	}
	for _, n := range a.topo.NUMANodes {
		v.NUMA = append(v.NUMA, reporter.NUMAMemory{Node: n.ID, LentBytes: lentOnNUMA(a.topo, n.ID, lent)})
	}
	return v
}

// lentOnNUMA is node's share of the lent memory: reclaimed work may use every node's memory
// (its cpuset.mems is not narrowed), so the lent memory is split by each node's MemTotal.
func lentOnNUMA(topo *topology.Topology, node int, lent int64) int64 {
	total := topo.TotalMemory()
	for _, n := range topo.NUMANodes {
		if n.ID == node && total > 0 {
			return int64(float64(lent) * float64(n.MemoryBytes) / float64(total))
		}
	}
	return 0
}
