package agent

import (
	"time"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
)

// poolHold keeps each NUMA node's reclaimed pool at its CPU count for cpu.poolShrinkAfter
// after lending fell within fewer CPUs, under the quota mechanism: the quota holds reclaimed
// work to what is lent at once, while narrowing the pool rewrites the cpuset of every
// reclaimed cgroup (milliseconds of kernel time with a hundred workloads, spent when online
// work wants the CPU), and a cut is often grown back seconds later. Widening is never held.
type poolHold struct {
	cpus  map[int]int64     // each node's pool size, in CPUs, as last computed
	since map[int]time.Time // when lending first fell within fewer CPUs, while the pool is held
}

// sizing returns the lending to size each node's pool by: what is lent, or, while the pool is
// held, its CPU count in millicores.
func (h *poolHold) sizing(now time.Time, lent map[int]int64, hold time.Duration) map[int]int64 {
	if h.cpus == nil {
		h.cpus, h.since = map[int]int64{}, map[int]time.Time{}
	}
	out := make(map[int]int64, len(lent))
	for node, milli := range lent {
		want, held := (milli+999)/1000, h.cpus[node]
		if want >= held || hold <= 0 {
			h.cpus[node] = want
			delete(h.since, node)
			out[node] = milli
			continue
		}
		if _, ok := h.since[node]; !ok {
			h.since[node] = now
		}
		if now.Sub(h.since[node]) >= hold {
			h.cpus[node] = want
			delete(h.since, node)
			out[node] = milli
			continue
		}
		out[node] = held * 1000
	}
	return out
}

// computePoolsLocked sizes the pools for plan, holding a reclaimed pool's CPUs as poolHold
// says when the quota is what holds reclaimed work.
func (a *Agent) computePoolsLocked(now time.Time, snap state.Snapshot, lent map[int]int64) plugins.Pools {
	hold := a.cfg.CPU.PoolShrinkAfter
	if a.mechanism() != plugins.MechanismQuota {
		hold = 0 // the cpuset is what holds reclaimed work: narrow it at once
	}
	return cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, snap.Dedicated, a.poolHold.sizing(now, lent, hold))
}
