package plugins

import (
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/qos"
)

// Workload is what plugins know of one managed workload.
type Workload struct {
	Name   string
	Tier   qos.Tier
	Cgroup string // relative cgroup path
	// DedicatedCPUs are the whole cores a dedicated workload owns.
	DedicatedCPUs cpuset.CPUSet
	// NUMABinding pins a dedicated workload's memory to the NUMA node of its cores.
	NUMABinding bool
	// MilliCPU caps a shared or reclaimed workload's CPU time (0: no cap of its own).
	MilliCPU int64
	// MemoryLimit caps its memory (0: no limit of its own).
	MemoryLimit     int64
	ReclaimPriority int32
	// Queue is the tenant queue reclaimed work runs for ("" the shared low-SLA queue): it
	// runs while the node's lease grants that queue capacity.
	Queue string
	// GPUs are the UUIDs of the GPUs it may use: lent ones (reclaimed) or its own
	// (dedicated).
	GPUs []string
	// GPUMinors are the /dev/nvidiaN minors of GPUs, for the device cgroup.
	GPUMinors []int
	Started   time.Time

	// KubeletOwned: the cgroup is a pod's, made and removed by the kubelet. tidal never
	// creates or removes it and writes only what its tier decides (pools, reclaimed caps);
	// requests and limits stay the kubelet's.
	KubeletOwned bool
	// Containers are the pod's container cgroups (relative paths): on cgroup v1 a cpuset
	// must be narrowed in every child too.
	Containers []string
	// KubeletCPUs: the kubelet's CPU manager gave DedicatedCPUs exclusively; their cpusets
	// are the kubelet's and never written.
	KubeletCPUs bool

	// Usage, filled from the latest sample, for eviction ranking and status.
	MemoryUsage int64
}
