package agent

import (
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
)

// poolHold keeps each NUMA node's reclaimed pool at its CPU count for cpu.poolShrinkAfter
// after lending fell within fewer CPUs, under the quota mechanism: the quota holds reclaimed
// work to what is lent at once, while narrowing the pool rewrites the cpuset of every
// reclaimed cgroup (milliseconds of kernel time with a hundred workloads, spent when online
// work wants the CPU), and a cut is often grown back seconds later. Widening is never held.
// It remembers only since when each held pool could have been narrower.
type poolHold map[int]time.Time

// sizing returns the lending to size each node's pool by: what is lent, or, while the pool is
// held, its CPU count now (poolCPUs) in millicores.
func (h poolHold) sizing(now time.Time, lent, poolCPUs map[int]int64, hold time.Duration) map[int]int64 {
	out := make(map[int]int64, len(lent))
	for node, milli := range lent {
		out[node] = milli
		if (milli+999)/1000 >= poolCPUs[node] || hold <= 0 {
			delete(h, node)
			continue
		}
		since, ok := h[node]
		if !ok {
			since, h[node] = now, now
		}
		if now.Sub(since) >= hold {
			delete(h, node)
			continue
		}
		out[node] = poolCPUs[node] * 1000
	}
	return out
}

// reclaimedCPUs is where reclaimed work runs, cpu.reclaimedCPUs with auto resolved by the
// node's topology: every online CPU where each core has one thread (measured: more lent, at
// a tail within the noise of the pool's, docs/benchmark.md#placement), the pool where cores
// have SMT siblings (unmeasured, and a sibling's harm is one no CPU priority takes back).
func (a *Agent) reclaimedCPUs() string {
	switch {
	case a.cfg.CPU.ReclaimedCPUs != config.ReclaimedAuto:
		return a.cfg.CPU.ReclaimedCPUs
	case a.smt:
		return config.ReclaimedOnPool
	default:
		return config.ReclaimedOnOnline
	}
}

// computePoolsLocked sizes the pools for what is lent, holding a reclaimed pool's CPUs as
// poolHold says when the quota is what holds reclaimed work. Under the cores mechanism a node
// that lends whole cores gets them to itself; otherwise, with cpu.reclaimedCPUs: online, a
// node that lends anything lends it on every CPU of its shared pool.
func (a *Agent) computePoolsLocked(now time.Time, snap state.Snapshot, lent map[int]int64) plugins.Pools {
	m := a.mechanism()
	hold := a.cfg.CPU.PoolShrinkAfter
	if m != plugins.MechanismQuota {
		hold = 0 // the cpuset is what holds reclaimed work: narrow it at once
	}
	poolCPUs := map[int]int64{}
	for _, np := range a.pools {
		poolCPUs[np.Node] = int64(np.Reclaimed.Size())
	}
	pools := cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, snap.Dedicated, a.poolHold.sizing(now, lent, poolCPUs, hold))
	switch {
	case m == plugins.MechanismCores:
		pools = cpu.ExclusiveCores(a.topo, pools, lent)
	case a.reclaimedCPUs() == config.ReclaimedOnOnline:
		for i := range pools {
			if lent[pools[i].Node] > 0 {
				pools[i].Reclaimed = pools[i].Shared
			}
		}
	}
	return pools
}
