package plugins

import "k8s.io/utils/cpuset"

// NUMAPools are the pools of one NUMA node. Reclaimed is a subset of Shared. Unless the pool
// is Exclusive, online work may run on lent CPUs too (reclaimed work there runs at the lowest
// priority), so lending never takes a CPU away from online work, it only lets offline work
// fill it. An Exclusive pool is whole cores taken out of online work's CPUs (the cores
// mechanism): the two never share a core.
type NUMAPools struct {
	Node int
	// NoMemory: a memoryless node (some vNUMA VMs, POWER and ARM boxes). Its CPUs use the
	// other nodes' memory, and cgroup v1 refuses it in cpuset.mems.
	NoMemory  bool
	System    cpuset.CPUSet
	Dedicated cpuset.CPUSet
	Shared    cpuset.CPUSet
	Reclaimed cpuset.CPUSet
	Exclusive bool
}

// OnlineCPUs are the shared CPUs online work runs on: all of them, less an exclusive
// reclaimed pool.
func (n NUMAPools) OnlineCPUs() cpuset.CPUSet {
	if n.Exclusive {
		return n.Shared.Difference(n.Reclaimed)
	}
	return n.Shared
}

// Pools are a node's pools, one entry per NUMA node, by node ID.
type Pools []NUMAPools

// Union of one pool over all NUMA nodes.
func (p Pools) union(get func(NUMAPools) cpuset.CPUSet) cpuset.CPUSet {
	out := cpuset.New()
	for _, n := range p {
		out = out.Union(get(n))
	}
	return out
}

func (p Pools) System() cpuset.CPUSet {
	return p.union(func(n NUMAPools) cpuset.CPUSet { return n.System })
}
func (p Pools) Dedicated() cpuset.CPUSet {
	return p.union(func(n NUMAPools) cpuset.CPUSet { return n.Dedicated })
}
func (p Pools) Shared() cpuset.CPUSet {
	return p.union(func(n NUMAPools) cpuset.CPUSet { return n.Shared })
}
func (p Pools) Reclaimed() cpuset.CPUSet {
	return p.union(func(n NUMAPools) cpuset.CPUSet { return n.Reclaimed })
}

// Online is where shared (and, without reserved CPUs, system) work runs: the shared pool
// less exclusive reclaimed cores.
func (p Pools) Online() cpuset.CPUSet {
	return p.union(NUMAPools.OnlineCPUs)
}

// ReclaimedSharesCPUs says whether some node's reclaimed pool is CPUs online work runs on
// too; if not, the cpusets alone hold reclaimed work to what is lent.
func (p Pools) ReclaimedSharesCPUs() bool {
	for _, n := range p {
		if !n.Exclusive && !n.Reclaimed.IsEmpty() {
			return true
		}
	}
	return false
}

// PoolMilliCPU is the size of each node's shared pool in millicores: what online and
// reclaimed work share.
func (p Pools) PoolMilliCPU() map[int]int64 {
	out := make(map[int]int64, len(p))
	for _, n := range p {
		out[n.Node] = int64(n.Shared.Size()) * 1000
	}
	return out
}

// Mems are the memory nodes of all the pools: cpuset.mems names NUMA nodes by the same IDs.
// Should no node say it has memory (a topology that could not tell), every node is one.
func (p Pools) Mems() cpuset.CPUSet {
	out, all := cpuset.New(), cpuset.New()
	for _, n := range p {
		all = all.Union(cpuset.New(n.Node))
		if !n.NoMemory {
			out = out.Union(cpuset.New(n.Node))
		}
	}
	if out.IsEmpty() {
		return all
	}
	return out
}
