package plugins

import "k8s.io/utils/cpuset"

// NUMAPools are the pools of one NUMA node. Reclaimed is a subset of Shared: online work may
// always run on lent CPUs (reclaimed work there runs at the lowest priority), so lending never
// takes a CPU away from online work, it only lets offline work fill it.
type NUMAPools struct {
	Node int
	// NoMemory: a memoryless node (some vNUMA VMs, POWER and ARM boxes). Its CPUs use the
	// other nodes' memory, and cgroup v1 refuses it in cpuset.mems.
	NoMemory  bool
	System    cpuset.CPUSet
	Dedicated cpuset.CPUSet
	Shared    cpuset.CPUSet
	Reclaimed cpuset.CPUSet
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
