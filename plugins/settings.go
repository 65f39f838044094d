// Package plugins is tidal's policy model: the workloads, the node state a decision needs, and
// what the policy produces (a Decision per workload, the desired settings of each cgroup tidal
// manages). Each resource dimension implements Resource in its own sub-package (cpu, memory,
// gpu); plugins/policy runs them in order. isolation turns the settings into kernel and
// runtime values.
package plugins

import "k8s.io/utils/cpuset"

// Unlimited is the CPUQuota or MemoryLimit that removes the limit.
const Unlimited int64 = -1

// Toggle is an on/off knob that may also be left alone.
type Toggle int8

const (
	Unset Toggle = iota
	On
	Off
)

// Settings are the cgroup knobs tidal controls, independent of the cgroup version. A zero field
// means "leave as it is".
type Settings struct {
	CPUs cpuset.CPUSet // cpuset.cpus
	Mems cpuset.CPUSet // cpuset.mems
	// CPUShares is in cgroup v1 units (2..262144); on v2 it becomes the equivalent cpu.weight.
	CPUShares uint64
	// CPUIdle puts the cgroup in the kernel's SCHED_IDLE class: it runs only when nothing else
	// wants the CPU. Shares are meaningless (and refused by the kernel) while it is on.
	CPUIdle Toggle
	// CPUQuota is a CFS bandwidth limit in millicores, or Unlimited.
	CPUQuota int64
	// MemoryLimit is a hard limit in bytes, or Unlimited.
	MemoryLimit int64

	// Memory QoS (below the hard limit; see plugins/memory). Each is bytes, Unlimited, or 0
	// to leave the file alone.
	//
	// MemoryHigh is the throttle point: on v2 memory.high (the kernel reclaims and slows
	// the cgroup's allocations above it); on v1 memory.soft_limit_in_bytes (global reclaim
	// takes from cgroups above their soft limit first; no throttling).
	MemoryHigh int64
	// MemoryLow is best-effort protection from reclaim (v2 memory.low; v1 has none).
	MemoryLow int64
	// MemoryMin is hard protection from reclaim (v2 memory.min; v1 has none).
	MemoryMin int64
	// MemoryOOMWait makes tasks that reach the hard limit wait for memory instead of being
	// OOM-killed (v1 memory.oom_control oom_kill_disable; v2 has no such knob).
	MemoryOOMWait Toggle
	// Devices are device cgroup rules applied in order, each "allow <rule>" or
	// "deny <rule>" with a rule as the kernel takes it ("c 195:* rwm"); nil leaves them.
	// cgroup v1 only: on v2 device access is an eBPF program, left to the runtime.
	Devices []string

	// CPU burst (issue 12).
	// CPUBurst is the CFS burst in millicores: CPU time above the quota a cgroup may spend
	// in one period out of what it left unused before (at most its quota: the kernel
	// refuses more). BurstOff writes none; 0 leaves the file as it is.
	CPUBurst int64
	// CPUBurstPercent is the burst as a percentage of the quota the cgroup has, for cgroups
	// whose quota is someone else's (a pod's and its containers', set by the kubelet): the
	// writer sizes it on the quota it reads. 0 leaves it to CPUBurst.
	CPUBurstPercent int32
	// CPUBurstLimit is the CPU limit, in millicores, the owner's spec gives such a cgroup (0:
	// none known): the burst is sized on the lesser of it and the quota the cgroup has. An
	// in-place resize changes the spec first and the quota after, and the kernel refuses a
	// quota below the burst: sized on the spec, the burst never blocks the resize.
	CPUBurstLimit int64

	// Disk IO (issue 12; see plugins/io).
	// IOLimits are per-device throttles (v1 blkio.throttle.*_device, v2 io.max), one entry per
	// device; a zero rate is no limit on that direction. nil leaves the files alone; an entry
	// whose rates are all zero clears the device's throttle.
	IOLimits []IOLimit
	// IOWeight is the cgroup's proportional IO weight in v1 units (10..1000; on v2 the
	// equivalent io.weight). It only counts where the device's scheduler honours weights (bfq,
	// or io.cost on v2); 0 leaves it alone.
	IOWeight uint16
}

// IOLimit is a throttle of one block device. Zero rates are unlimited.
type IOLimit struct {
	// Device is "MAJ:MIN", as the kernel's files name it.
	Device    string
	ReadBps   uint64
	WriteBps  uint64
	ReadIOPS  uint64
	WriteIOPS uint64
}

// Unlimited says no direction of the device is throttled.
func (l IOLimit) Unlimited() bool {
	return l.ReadBps == 0 && l.WriteBps == 0 && l.ReadIOPS == 0 && l.WriteIOPS == 0
}

// BurstOff is the CPUBurst that clears a cgroup's burst.
const BurstOff int64 = -1

// Cgroup is the desired state of one cgroup. Path is relative to the hierarchy root
// ("tidal-reclaimed/batch-1").
type Cgroup struct {
	Path     string
	Settings Settings
	// Foreign cgroups belong to someone else (the kubelet): never created or removed, and
	// skipped while they do not exist.
	Foreign bool
}
