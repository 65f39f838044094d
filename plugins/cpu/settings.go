package cpu

import (
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// CPU shares by tier (cgroup v1 units; v2 converts). Reclaimed work gets the kernel's idle
// class where it has one, else the smallest share.
const (
	sharesSystem    = 2048
	sharesOnline    = 1024
	SharesReclaimed = 2
)

// Fill sets the CPU knobs of tidal's root and tier cgroups: the root and the dedicated tier
// span every CPU (dedicated children own disjoint cores), system and shared get their pools
// at online weight, and the reclaimed tier the reclaimed pool at the lowest priority, capped
// at lentMilli. Each workload's own settings come from isolation.Decide.
func Fill(t *plugins.Tree, all cpuset.CPUSet, pools Pools, lentMilli int64, idle bool) {
	// cpuset.mems names NUMA nodes by the same IDs as the pools.
	allMems := cpuset.New()
	for _, np := range pools {
		allMems = allMems.Union(cpuset.New(np.Node))
	}
	shared := pools.Shared()
	system := pools.System()
	if system.IsEmpty() {
		system = shared
	}
	*t.Root() = merge(*t.Root(), plugins.Settings{CPUs: all, Mems: allMems})
	*t.Tier(qos.System) = merge(*t.Tier(qos.System), plugins.Settings{CPUs: system, Mems: allMems, CPUShares: sharesSystem})
	*t.Tier(qos.Dedicated) = merge(*t.Tier(qos.Dedicated), plugins.Settings{CPUs: all, Mems: allMems, CPUShares: sharesOnline})
	*t.Tier(qos.Shared) = merge(*t.Tier(qos.Shared), plugins.Settings{CPUs: shared, Mems: allMems, CPUShares: sharesOnline})
	reclaimed := plugins.Settings{CPUs: pools.Reclaimed(), Mems: allMems, CPUQuota: lentMilli}
	if idle {
		reclaimed.CPUIdle = plugins.On
	} else {
		reclaimed.CPUShares = SharesReclaimed
	}
	*t.Tier(qos.Reclaimed) = merge(*t.Tier(qos.Reclaimed), reclaimed)
}

// merge returns base with the CPU knobs of add laid over it.
func merge(base, add plugins.Settings) plugins.Settings {
	base.CPUs, base.Mems = add.CPUs, add.Mems
	base.CPUShares, base.CPUIdle, base.CPUQuota = add.CPUShares, add.CPUIdle, add.CPUQuota
	return base
}
