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

// Resource is the CPU dimension of the policy: cpusets from the pools, priority, quota and
// burst.
type Resource struct {
	// Burst is the CPU burst each online tier gets by default.
	Burst Burst
}

// Burst is the CPU burst of each online tier, as a percentage (0..100) of a workload's CPU
// limit: how much of the CPU time it left unused it may spend above the limit in one period.
// Reclaimed work never bursts: it would run above what is lent.
type Burst struct {
	System, Dedicated, Shared int32
}

// MaxBurstPercent is the most burst the kernel takes: no more than the quota itself.
const MaxBurstPercent = 100

func (b Burst) percent(t qos.Tier) int32 {
	switch t {
	case qos.System:
		return b.System
	case qos.Dedicated:
		return b.Dedicated
	case qos.Shared:
		return b.Shared
	}
	return 0
}

var _ plugins.Resource = Resource{}

func (Resource) Name() string { return "cpu" }

// Fill sets the CPU knobs of tidal's root and tier cgroups: the root and the dedicated tier
// span every CPU (dedicated children own disjoint cores), system and shared get their pools
// (less exclusive reclaimed cores) at online weight, and the reclaimed tier the reclaimed pool
// at the lowest priority, capped at what is lent where the quota holds it.
func (Resource) Fill(t *plugins.Tree, n plugins.Node) {
	allMems, system, shared := n.Pools.Mems(), systemPool(n.Pools), n.Pools.Online()
	*t.Root() = merge(*t.Root(), plugins.Settings{CPUs: n.CPUs, Mems: allMems})
	*t.Tier(qos.System) = merge(*t.Tier(qos.System), plugins.Settings{CPUs: system, Mems: allMems, CPUShares: sharesSystem})
	*t.Tier(qos.Dedicated) = merge(*t.Tier(qos.Dedicated), plugins.Settings{CPUs: n.CPUs, Mems: allMems, CPUShares: sharesOnline})
	*t.Tier(qos.Shared) = merge(*t.Tier(qos.Shared), plugins.Settings{CPUs: shared, Mems: allMems, CPUShares: sharesOnline})
	reclaimed := plugins.Settings{CPUs: n.Pools.Reclaimed(), Mems: allMems, CPUQuota: plugins.Unlimited, CPUBurst: plugins.BurstOff}
	reclaimedPriority(&reclaimed, n)
	if quotaHolds(n) {
		reclaimed.CPUQuota = n.LentMilliCPU
	}
	*t.Tier(qos.Reclaimed) = merge(*t.Tier(qos.Reclaimed), reclaimed)
}

// quotaHolds says whether a CFS quota of what is lent holds reclaimed work: under the quota
// mechanism, and under cores while some node lends less than a whole core (its reclaimed
// pool shares CPUs with online work).
func quotaHolds(n plugins.Node) bool {
	switch n.ReclaimedCPU {
	case plugins.MechanismQuota:
		return true
	case plugins.MechanismCores:
		return n.Pools.ReclaimedSharesCPUs()
	}
	return false
}

// reclaimedPriority sets the lowest CPU priority the mechanism asks for: the idle class where
// the kernel has it (idle and quota mechanisms), else cpu.shares 2. Going from idle to shares
// turns idle off first: the kernel refuses shares on an idle group.
func reclaimedPriority(s *plugins.Settings, n plugins.Node) {
	if n.Idle && n.ReclaimedCPU != plugins.MechanismShares {
		s.CPUIdle = plugins.On
		return
	}
	s.CPUShares = SharesReclaimed
	if n.Idle {
		s.CPUIdle = plugins.Off
	}
}

// Decide sets a workload's cpuset, priority, quota and burst by tier: system runs on the system
// pool; dedicated on its own cores (and with NUMA binding the memory nodes of those cores);
// shared on the shared pool less exclusive reclaimed cores; reclaimed on the reclaimed pool at
// the lowest priority, capped at what is lent (or its own smaller cap). A pod (a foreign Owner) keeps the kubelet's quota
// unless it is reclaimed, and one the kubelet's CPU manager pinned (OwnerKubeletCPUManager) keeps its
// cpusets.
func (r Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	s := &d.Settings
	allMems := n.Pools.Mems()
	switch w.Tier {
	case qos.System:
		s.CPUs, s.Mems = systemPool(n.Pools), allMems
	case qos.Dedicated:
		s.CPUs, s.Mems = w.DedicatedCPUs, allMems
		if w.NUMABinding {
			s.Mems = cpuset.New()
			for _, np := range n.Pools {
				if !np.NoMemory && !np.Dedicated.Intersection(w.DedicatedCPUs).IsEmpty() {
					s.Mems = s.Mems.Union(cpuset.New(np.Node))
				}
			}
			if s.Mems.IsEmpty() { // cores on a memoryless node: its memory is everyone's
				s.Mems = allMems
			}
		}
	case qos.Shared:
		s.CPUs, s.Mems = n.Pools.Online(), allMems
		s.CPUQuota = plugins.Unlimited
		if w.MilliCPU > 0 {
			s.CPUQuota = w.MilliCPU
		}
	case qos.Reclaimed:
		s.CPUs, s.Mems = n.Pools.Reclaimed(), allMems
		reclaimedPriority(s, n)
		s.CPUQuota = reclaimedQuota(w, n)
	}
	s.CPUBurst, s.CPUBurstPercent = r.burst(w, s.CPUQuota)
	if s.CPUBurstPercent > 0 {
		s.CPUBurstLimit = w.CPULimit
	}
	if w.Owner.Foreign() && w.Tier != qos.Reclaimed {
		s.CPUQuota = 0 // an online pod's CPU limit is the kubelet's
	}
	if !w.Owner.OwnsCPUSets() {
		// The kubelet's CPU manager owns this pod's cpusets (static policy).
		s.CPUs, s.Mems = cpuset.New(), cpuset.New()
	}
}

// reclaimedQuota is a reclaimed workload's CFS quota. Where a quota holds, inside tidal's
// reclaimed tier the tier's cgroup caps what all of them use together (one write per change
// of lending); pods sit outside it, so each is held to its part of what is lent. A workload's
// own cap applies under every mechanism and may only be smaller than what is lent (v1 refuses
// a child quota above its parent's).
func reclaimedQuota(w plugins.Workload, n plugins.Node) int64 {
	lent := plugins.Unlimited
	switch {
	case quotaHolds(n) && w.Owner.Foreign():
		lent = podPart(n, w.Name)
	case quotaHolds(n):
		lent = n.LentMilliCPU
	}
	switch {
	case w.MilliCPU > 0 && lent > 0:
		return min(lent, w.MilliCPU)
	case w.MilliCPU > 0:
		return w.MilliCPU
	case w.Owner.Foreign():
		return lent
	}
	return plugins.Unlimited
}

// burst is a workload's CPU burst over its limit: in millicores over the quota tidal sets, or
// for a pod (whose quotas are the kubelet's) as a percentage the writer sizes on each of its
// cgroups' quota. Its own percentage wins over its tier's. A workload of tidal's without a
// quota has nothing to burst above and its burst is left alone; reclaimed work has none.
func (r Resource) burst(w plugins.Workload, quota int64) (milli int64, pct int32) {
	if w.Tier == qos.Reclaimed {
		return plugins.BurstOff, 0
	}
	if !w.Owner.Foreign() && quota <= 0 {
		return 0, 0
	}
	pct = r.Burst.percent(w.Tier)
	if w.CPUBurstPercent != 0 {
		pct = max(w.CPUBurstPercent, 0)
	}
	pct = min(pct, MaxBurstPercent)
	switch {
	case pct <= 0:
		return plugins.BurstOff, 0
	case w.Owner.Foreign():
		return 0, pct
	}
	return quota * int64(pct) / 100, 0
}

// systemPool is where system work runs: the reserved CPUs, else (none reserved) where online
// work runs.
func systemPool(p plugins.Pools) cpuset.CPUSet {
	if system := p.System(); !system.IsEmpty() {
		return system
	}
	return p.Online()
}

// merge returns base with the CPU knobs of add laid over it.
func merge(base, add plugins.Settings) plugins.Settings {
	base.CPUs, base.Mems = add.CPUs, add.Mems
	base.CPUShares, base.CPUIdle, base.CPUQuota = add.CPUShares, add.CPUIdle, add.CPUQuota
	base.CPUBurst = add.CPUBurst
	return base
}
