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
	sharesReclaimed = 2
)

// Fill sets cpusets, priorities and quotas of every cgroup in the tree:
//   - root: all CPUs; system: reserved CPUs (the shared pool when none are reserved);
//   - dedicated: each workload its own cores (memory on their NUMA node with binding);
//   - shared: the shared pool;
//   - reclaimed: the reclaimed pool, idle (or shares 2), CFS quota = lent millicores on the
//     tier; each workload at most its own --cpus.
func Fill(t *plugins.Tree, all cpuset.CPUSet, pools Pools, lentMilli int64, workloads []plugins.Workload, idle bool) {
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
	reclaimed := pools.Reclaimed()

	*t.Root() = merge(*t.Root(), plugins.Settings{CPUs: all, Mems: allMems})
	*t.Tier(qos.System) = merge(*t.Tier(qos.System), plugins.Settings{CPUs: system, Mems: allMems, CPUShares: sharesSystem})
	// The dedicated tier holds no task itself; its children own disjoint cores.
	*t.Tier(qos.Dedicated) = merge(*t.Tier(qos.Dedicated), plugins.Settings{CPUs: all, Mems: allMems, CPUShares: sharesOnline})
	*t.Tier(qos.Shared) = merge(*t.Tier(qos.Shared), plugins.Settings{CPUs: shared, Mems: allMems, CPUShares: sharesOnline})
	*t.Tier(qos.Reclaimed) = merge(*t.Tier(qos.Reclaimed), reclaimedSettings(reclaimed, allMems, lentMilli, idle))

	for _, w := range workloads {
		s := t.Workload(w)
		switch w.Tier {
		case qos.System:
			*s = merge(*s, plugins.Settings{CPUs: system, Mems: allMems})
		case qos.Dedicated:
			m := allMems
			if w.NUMABinding {
				m = cpuset.New()
				for _, np := range pools {
					if !np.Dedicated.Intersection(w.DedicatedCPUs).IsEmpty() {
						m = m.Union(cpuset.New(np.Node))
					}
				}
			}
			*s = merge(*s, plugins.Settings{CPUs: w.DedicatedCPUs, Mems: m})
		case qos.Shared:
			q := plugins.Unlimited
			if w.MilliCPU > 0 {
				q = w.MilliCPU
			} else if w.KubeletOwned {
				q = 0 // a pod's CPU limit is the kubelet's
			}
			*s = merge(*s, plugins.Settings{CPUs: shared, Mems: allMems, CPUQuota: q})
		case qos.Reclaimed:
			// What is lent caps the reclaimed tier as a whole (as koordlet caps BestEffort at
			// its parent cgroup): a change of lending is one write, not one per workload.
			// A workload's own cap stays under it (v1 refuses a child quota above its parent's).
			q := plugins.Unlimited
			if w.MilliCPU > 0 {
				q = min(lentMilli, w.MilliCPU)
			} else if w.KubeletOwned {
				// A pod sits outside tidal's reclaimed tier, so the lent amount caps it itself.
				q = lentMilli
			}
			*s = merge(*s, reclaimedSettings(reclaimed, allMems, q, idle))
		}
		if w.KubeletCPUs {
			// The kubelet's CPU manager owns this pod's cpusets (static policy).
			s.CPUs, s.Mems = cpuset.New(), cpuset.New()
		}
	}
}

func reclaimedSettings(cpus, mems cpuset.CPUSet, quota int64, idle bool) plugins.Settings {
	s := plugins.Settings{CPUs: cpus, Mems: mems, CPUQuota: quota}
	if idle {
		s.CPUIdle = plugins.On
	} else {
		s.CPUShares = sharesReclaimed
	}
	return s
}

// merge returns base with the CPU knobs of add laid over it.
func merge(base, add plugins.Settings) plugins.Settings {
	base.CPUs, base.Mems = add.CPUs, add.Mems
	base.CPUShares, base.CPUIdle, base.CPUQuota = add.CPUShares, add.CPUIdle, add.CPUQuota
	return base
}
