package state

import (
	"fmt"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins/cpu"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// Allocator is the one place dedicated cores and GPUs are handed out, whichever source asks.
// The store calls it under its lock with what is taken already.
type Allocator struct {
	topo     *topology.Topology
	reserved cpuset.CPUSet
	gpus     *pgpu.Tracker
}

// NewAllocator allocates from topo's CPUs less reserved, and from the GPUs gpus tracks.
func NewAllocator(topo *topology.Topology, reserved cpuset.CPUSet, gpus *pgpu.Tracker) *Allocator {
	return &Allocator{topo: topo, reserved: reserved, gpus: gpus}
}

// GPUs is the GPU tracker: which GPUs are lendable, lent and to whom.
func (a *Allocator) GPUs() *pgpu.Tracker { return a.gpus }

// Dedicated picks n whole cores for a dedicated workload outside taken, and nGPUs GPUs of its
// own on one NUMA node (with numaBinding, its cores on that node too). dedicatedGPUs are the
// GPUs other dedicated workloads were given, by UUID, which it may not share.
func (a *Allocator) Dedicated(taken cpuset.CPUSet, n int, numaBinding bool, nGPUs int, dedicatedGPUs map[string]string) (cpuset.CPUSet, []string, error) {
	var uuids []string
	if nGPUs > 0 {
		node, picked, ok := a.gpus.ForNUMA(nGPUs)
		if !ok {
			return cpuset.New(), nil, fmt.Errorf("cannot give %d GPUs on one NUMA node: no node has that many free of online use", nGPUs)
		}
		// The tracker learns a GPU is online's once a process shows on it: until then,
		// refuse a GPU another dedicated workload was given.
		for _, u := range picked {
			if other, ok := dedicatedGPUs[u]; ok {
				return cpuset.New(), nil, fmt.Errorf("the free GPUs on NUMA node %d (%v) include one given to %s; try again once it runs on it", node, picked, other)
			}
		}
		uuids = picked
		if numaBinding {
			// Cores and memory on the GPUs' node: every other node's CPUs count as taken.
			taken = taken.Union(a.topo.AllCPUs().Difference(a.topo.CPUsOfNUMA(node)))
		}
	}
	cpus, _, err := cpu.Allocate(a.topo, a.reserved, taken, n, numaBinding)
	if err != nil {
		return cpuset.New(), nil, err
	}
	return cpus, uuids, nil
}

// LendGPUs lends n lendable GPUs to a reclaimed workload.
func (a *Allocator) LendGPUs(name string, n int, priority int32) ([]string, error) {
	return a.gpus.Assign(pgpu.Request{Workload: name, GPUs: n, ReclaimPriority: priority})
}
