// Package cpu is the CPU resource plugin: it splits each NUMA node's CPUs into the system,
// dedicated, shared and reclaimed pools, allocates whole cores to dedicated workloads, and
// sets every cgroup's cpuset, priority and quota from the plan.
package cpu

import (
	"fmt"
	"sort"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// ComputePools splits the CPUs: reserved ones to system, dedicated ones to their owners, the
// rest to shared, and on each node the reclaimed pool is the ceil(lent/1000) shared CPUs
// farthest from system CPUs (highest IDs, whole cores together).
func ComputePools(topo *topology.Topology, reserved, dedicated cpuset.CPUSet, lentMilli map[int]int64) plugins.Pools {
	var pools plugins.Pools
	for _, node := range topo.NUMANodes {
		cpus := node.CPUs
		np := plugins.NUMAPools{
			Node:      node.ID,
			NoMemory:  node.MemoryBytes == 0,
			System:    cpus.Intersection(reserved),
			Dedicated: cpus.Intersection(dedicated).Difference(reserved),
		}
		np.Shared = cpus.Difference(np.System).Difference(np.Dedicated)
		want := int((lentMilli[node.ID] + 999) / 1000)
		np.Reclaimed = cpuset.New(farthest(topo, np.Shared, want)...)
		pools = append(pools, np)
	}
	return pools
}

// ExclusiveCores makes each node's reclaimed pool, under the cores mechanism, whole cores
// that online work does not run on: as many of the shared pool's cores (farthest from system
// CPUs first) as fit in what the node lends, leaving online work at least one core. A node
// that lends less than a whole core keeps its pool as ComputePools made it (shared with
// online work, held by the quota).
func ExclusiveCores(topo *topology.Topology, pools plugins.Pools, lentMilli map[int]int64) plugins.Pools {
	out := make(plugins.Pools, len(pools))
	for i, np := range pools {
		out[i] = np
		fit := int(lentMilli[np.Node] / 1000)
		cores := cpuset.New()
		whole, _ := wholeCores(topo, np.Shared)
		for _, sib := range whole {
			if cores.Size()+sib.Size() > fit || np.Shared.Size()-cores.Size()-sib.Size() < sib.Size() {
				break
			}
			cores = cores.Union(sib)
		}
		if !cores.IsEmpty() {
			out[i].Reclaimed, out[i].Exclusive = cores, true
		}
	}
	return out
}

// CoreMilliCPU is the CPU of one whole core in millicores (the most threads any core has):
// what the cores mechanism lends in.
func CoreMilliCPU(topo *topology.Topology) int64 {
	threads := 1
	for _, c := range topo.CPUs {
		threads = max(threads, topo.CoreSiblings(c.ID).Size())
	}
	return int64(threads) * 1000
}

// wholeCores lists the cores all of whose threads are in set, farthest from system CPUs
// first, and the most threads any core with a CPU in set has.
func wholeCores(topo *topology.Topology, set cpuset.CPUSet) (cores []cpuset.CPUSet, threads int) {
	seen := map[int]bool{}
	threads = 1
	for _, c := range farthest(topo, set, set.Size()) {
		if seen[c] {
			continue
		}
		sib := topo.CoreSiblings(c)
		threads = max(threads, sib.Size())
		for _, s := range sib.List() {
			seen[s] = true
		}
		if sib.IsSubsetOf(set) {
			cores = append(cores, sib)
		}
	}
	return cores, threads
}

// farthest picks n CPUs of set, highest core first, keeping a core's threads together.
func farthest(topo *topology.Topology, set cpuset.CPUSet, n int) []int {
	ids := set.List()
	core := map[int]int{}
	for _, c := range topo.CPUs {
		core[c.ID] = c.Core
	}
	sort.SliceStable(ids, func(i, j int) bool {
		if core[ids[i]] != core[ids[j]] {
			return core[ids[i]] > core[ids[j]]
		}
		return ids[i] > ids[j]
	})
	return ids[:min(n, len(ids))]
}

// Allocate picks n CPUs made of whole cores for a dedicated workload from the CPUs that are
// neither reserved nor taken, leaving at least one CPU for shared work. With numaBinding all
// of them come from one NUMA node (the fullest that fits, to keep big holes for later). A
// request that cannot be met gets an error that says why.
func Allocate(topo *topology.Topology, reserved, taken cpuset.CPUSet, n int, numaBinding bool) (cpuset.CPUSet, int, error) {
	if n <= 0 {
		return cpuset.New(), -1, fmt.Errorf("dedicated workloads need --cpus of at least 1, got %d", n)
	}
	free := topo.AllCPUs().Difference(reserved).Difference(taken)
	if free.Size()-n < 1 {
		return cpuset.New(), -1, fmt.Errorf("cannot dedicate %d CPUs: %d are free (not reserved or dedicated) and at least 1 must stay in the shared pool", n, free.Size())
	}
	// Whole free cores per NUMA node, highest core first.
	type core struct{ cpus []int }
	perNode := map[int][]core{}
	whole, threads := wholeCores(topo, free)
	for _, sib := range whole {
		node := topo.NUMANodeOf(sib.List()[0])
		perNode[node] = append(perNode[node], core{sib.List()})
	}
	if n%threads != 0 {
		return cpuset.New(), -1, fmt.Errorf("cannot dedicate %d CPUs: each core has %d threads, ask for a multiple of %d so no core is shared", n, threads, threads)
	}
	need := n / threads
	nodes := make([]int, 0, len(perNode))
	for node := range perNode {
		nodes = append(nodes, node)
	}
	sort.Ints(nodes)
	if numaBinding {
		best := -1
		for _, node := range nodes {
			if len(perNode[node]) >= need && (best < 0 || len(perNode[node]) < len(perNode[best])) {
				best = node
			}
		}
		if best < 0 {
			return cpuset.New(), -1, fmt.Errorf("cannot dedicate %d CPUs on one NUMA node: no node has %d whole free cores", n, need)
		}
		var cpus []int
		for _, c := range perNode[best][:need] {
			cpus = append(cpus, c.cpus...)
		}
		return cpuset.New(cpus...), best, nil
	}
	// Without binding: the node with the most free cores first, so the workload spans as few
	// nodes as it can.
	sort.SliceStable(nodes, func(i, j int) bool { return len(perNode[nodes[i]]) > len(perNode[nodes[j]]) })
	var cpus []int
	for _, node := range nodes {
		for _, c := range perNode[node] {
			if need == 0 {
				break
			}
			cpus = append(cpus, c.cpus...)
			need--
		}
	}
	if need > 0 {
		return cpuset.New(), -1, fmt.Errorf("cannot dedicate %d CPUs: not enough whole free cores", n)
	}
	return cpuset.New(cpus...), -1, nil
}
