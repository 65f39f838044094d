package isolation

import (
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/qos"
)

// ReclaimedOOMScoreAdj makes the kernel's OOM killer take reclaimed processes before any
// online one.
const ReclaimedOOMScoreAdj = 1000

// Node is what a decision needs of the node's current state.
type Node struct {
	Pools cpu.Pools
	// LentMilliCPU and LentMemory are what the node lends to reclaimed work now.
	LentMilliCPU int64
	LentMemory   int64
	// Idle: the kernel offers cpu.idle, the lowest CPU priority.
	Idle bool
	// GPUMinors are the /dev/nvidiaN minors of the node's GPUs.
	GPUMinors []int
}

// Decision is what one workload (a pod, a container, a `tidal run` process) gets.
type Decision struct {
	// Settings are its cgroup's knobs; a zero field is left as it is.
	Settings plugins.Settings
	// OOMScoreAdj for its processes; 0 leaves it alone.
	OOMScoreAdj int
	// Env is added to a container's environment (GPU visibility); nil adds nothing.
	Env map[string]string
}

// Decide is the one decision function: the reconcile loop, the CRI proxy and the NRI plugin
// all ask it what a workload's cgroup should hold, so the three paths can never disagree.
//
// By tier: system runs on the system pool; dedicated on its own cores (and with NUMA binding
// the memory nodes of those cores); shared on the shared pool; reclaimed on the reclaimed
// pool at the lowest priority, capped at what is lent (or its own smaller cap). A workload
// tidal does not own the cgroup of (a pod: a foreign Owner) keeps the kubelet's limits unless it
// is reclaimed, and one the kubelet's CPU manager pinned (OwnerKubeletCPUManager) keeps its cpusets.
func Decide(w plugins.Workload, n Node) Decision {
	allMems := cpuset.New()
	for _, np := range n.Pools {
		allMems = allMems.Union(cpuset.New(np.Node))
	}
	shared := n.Pools.Shared()
	system := n.Pools.System()
	if system.IsEmpty() {
		system = shared
	}
	var d Decision
	s := &d.Settings
	switch w.Tier {
	case qos.System:
		s.CPUs, s.Mems = system, allMems
		s.MemoryLimit = ownLimit(w)
	case qos.Dedicated:
		s.CPUs, s.Mems = w.DedicatedCPUs, allMems
		if w.NUMABinding {
			s.Mems = cpuset.New()
			for _, np := range n.Pools {
				if !np.Dedicated.Intersection(w.DedicatedCPUs).IsEmpty() {
					s.Mems = s.Mems.Union(cpuset.New(np.Node))
				}
			}
		}
		s.MemoryLimit = ownLimit(w)
	case qos.Shared:
		s.CPUs, s.Mems = shared, allMems
		s.CPUQuota = plugins.Unlimited
		if w.MilliCPU > 0 {
			s.CPUQuota = w.MilliCPU
		}
		s.MemoryLimit = ownLimit(w)
	case qos.Reclaimed:
		s.CPUs, s.Mems = n.Pools.Reclaimed(), allMems
		if n.Idle {
			s.CPUIdle = plugins.On
		} else {
			s.CPUShares = cpu.SharesReclaimed
		}
		// Inside tidal's reclaimed tier the tier's cgroup caps what all of them use together
		// (one write per change of lending); a pod sits outside it, so what is lent caps it
		// itself. Its own cap may only be smaller (v1 refuses a child quota above its parent's).
		s.CPUQuota, s.MemoryLimit = plugins.Unlimited, plugins.Unlimited
		if w.Owner.Foreign() {
			s.CPUQuota, s.MemoryLimit = n.LentMilliCPU, n.LentMemory
		}
		if w.MilliCPU > 0 {
			s.CPUQuota = min(n.LentMilliCPU, w.MilliCPU)
		}
		if w.MemoryLimit > 0 {
			s.MemoryLimit = min(n.LentMemory, w.MemoryLimit)
		}
		d.OOMScoreAdj = ReclaimedOOMScoreAdj
	}
	if w.Owner.Foreign() && w.Tier != qos.Reclaimed {
		// An online pod's CPU limit and memory limit are the kubelet's.
		s.CPUQuota, s.MemoryLimit = 0, 0
	}
	if !w.Owner.OwnsCPUSets() {
		// The kubelet's CPU manager owns this pod's cpusets (static policy).
		s.CPUs, s.Mems = cpuset.New(), cpuset.New()
	}
	if w.Tier == qos.Reclaimed || len(w.GPUs) > 0 {
		// Reclaimed work sees only the GPUs lent to it (none: "void"), by the environment
		// and, for cgroups tidal owns, the device cgroup (a pod's is its runtime's).
		d.Env = pgpu.Env(w.GPUs)
		if !w.Owner.Foreign() {
			s.Devices = pgpu.DeviceRules(n.GPUMinors, w.GPUMinors)
		}
	}
	return d
}

func ownLimit(w plugins.Workload) int64 {
	if w.MemoryLimit > 0 {
		return w.MemoryLimit
	}
	return plugins.Unlimited
}
