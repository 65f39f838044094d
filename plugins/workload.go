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
	// SLO is an online workload's own latency probe (zero: none); the interference feedback
	// counts its latency as an indicator.
	SLO qos.SLO
	// Queue is the tenant queue reclaimed work runs for ("" the shared low-SLA queue): it
	// runs while the node's lease grants that queue capacity.
	Queue string
	// GPUs are the UUIDs of the GPUs it may use: lent ones (reclaimed) or its own
	// (dedicated).
	GPUs []string
	// GPUMinors are the /dev/nvidiaN minors of GPUs, for the device cgroup.
	GPUMinors []int
	Started   time.Time

	// Owner is who made the cgroup, and so which of its settings are tidal's to write.
	Owner Owner
	// UID tells a workload from an earlier one of the same name (a pod's UID); empty for
	// tidal's own workloads, whose names are unique while they run.
	UID string

	// CPU burst (issue 12).
	// CPUBurstPercent is the workload's own CPU burst as a percentage of its CPU limit
	// (tidalqos.io/cpu-burst-percent): 0 takes its tier's, NoBurst none, 1..100 that much.
	CPUBurstPercent int32
	// CPULimit and ContainerCPULimits are a pod's CPU limits as its spec has them now, in
	// millicores: the pod's (0: none known) and its containers' by container ID (nil: none
	// known). A burst sized by percentage is sized on the lesser of these and the quota each
	// cgroup has, so that the kubelet lowering a quota to a resized limit is not refused.
	CPULimit           int64
	ContainerCPULimits map[string]int64

	// Usage, filled from the latest sample, for eviction ranking and status.
	MemoryUsage int64
}

// NoBurst is the CPUBurstPercent that asks for no burst whatever the tier's.
const NoBurst = qos.NoCPUBurst

// Owner is who made a workload's cgroup and owns the settings tidal leaves alone.
type Owner uint8

const (
	// OwnerTidal: tidal made the cgroup (`tidal run`): it creates, writes and removes it.
	OwnerTidal Owner = iota
	// OwnerKubelet: a pod's cgroup, made and removed by the kubelet. tidal writes only what
	// the pod's tier decides (pools, reclaimed caps); requests and limits stay the kubelet's.
	OwnerKubelet
	// OwnerKubeletCPUManager: a pod the kubelet's CPU manager pinned (static policy): as
	// OwnerKubelet, and its cpusets are the kubelet's too.
	OwnerKubeletCPUManager
)

// Foreign says the cgroup is someone else's: never created or removed by tidal.
func (o Owner) Foreign() bool { return o != OwnerTidal }

// OwnsCPUSets says tidal writes the workload's cpusets.
func (o Owner) OwnsCPUSets() bool { return o != OwnerKubeletCPUManager }

// String names the owner for status and logs.
func (o Owner) String() string {
	return [...]string{"tidal", "kubelet", "kubelet-cpu-manager"}[o]
}
