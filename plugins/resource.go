package plugins

import "k8s.io/utils/cpuset"

// Resource is one dimension of the policy (CPU, memory, GPU): what each tier gets of it.
// A Resource sets only its own fields of Settings and Decision, so the dimensions compose in
// any order. plugins/policy runs them in the order they are listed.
type Resource interface {
	// Name identifies the dimension ("cpu"); names are unique within a policy.
	Name() string
	// Fill sets this dimension's knobs of tidal's root and tier cgroups.
	Fill(t *Tree, n Node)
	// Decide adds this dimension's part of one workload's decision.
	Decide(w Workload, n Node, d *Decision)
}

// Node is what the policy needs of the node's current state.
type Node struct {
	// CPUs are all of the node's CPUs; Pools split them.
	CPUs  cpuset.CPUSet
	Pools Pools
	// LentMilliCPU and LentMemory are what the node lends to reclaimed work now.
	LentMilliCPU int64
	LentMemory   int64
	// Idle: the kernel offers cpu.idle, the lowest CPU priority.
	Idle bool
	// ReclaimedCPU is how reclaimed work is kept to what is lent (plugins/cpu).
	ReclaimedCPU CPUMechanism
	// GPUMinors are the /dev/nvidiaN minors of the node's GPUs.
	GPUMinors []int
	// LentIO is the disk IO lent to reclaimed work, one entry per disk tidal manages; nil
	// when IO isolation is off.
	LentIO []IOLimit
	// IOClear: IO isolation is off, so no throttle tidal's cgroups carry (one an earlier run
	// or configuration wrote) may stay.
	IOClear bool
	// IOWeightWorks: a managed disk's scheduler honours cgroup IO weights (bfq, or io.cost on
	// v2), so a low weight for reclaimed work means something.
	IOWeightWorks bool
	// IOFlat: a cgroup's IO throttle holds only its own IO, not its children's (cgroup v1's
	// blkio throttling is flat), so each reclaimed workload needs a throttle of its own.
	IOFlat bool
	// ReclaimedWorkloads is how many reclaimed workloads share the disk IO lent (counted
	// only while IO is lent: IO is split among them evenly).
	ReclaimedWorkloads int
	// ReclaimedPodParts are the reclaimed pods' parts of LentMilliCPU by workload name
	// (cpu.PodShares): pods sit outside tidal's reclaimed tier, so while a quota holds
	// reclaimed work each is held to its part.
	ReclaimedPodParts map[string]int64
}

// CPUMechanism is how the reclaimed tier is held to the CPU it is lent. Every mechanism
// confines reclaimed work to the reclaimed pool's CPUs (ceil(lent) of the shared ones); they
// differ in how it yields to online work on those CPUs, or (cores) in whether online work
// runs there at all. Which protects online latency best
// differs between machines and workloads (docs/benchmark.md has the figures behind the default).
type CPUMechanism string

const (
	// MechanismIdle: the kernel's idle class (cpu.idle 1), or cpu.shares 2 where the kernel has
	// no cpu.idle; no CFS quota, so reclaimed work uses all the idle time of its CPUs.
	MechanismIdle CPUMechanism = "idle"
	// MechanismShares: cpu.shares 2 (cpu.weight 1 on v2), no CFS quota.
	MechanismShares CPUMechanism = "shares"
	// MechanismQuota: the idle class (or shares 2) and a CFS quota of exactly what is lent.
	// Throttling reclaimed work this way hurt online tail latency on some machines.
	MechanismQuota CPUMechanism = "quota"
	// MechanismCores: whole cores, taken out of online work's cpusets, at the idle class
	// without a quota: online and reclaimed work never share a core. Lending is whole cores
	// (the advisor rounds it down); a NUMA node that lends less than one core lends it as
	// quota does, on a CPU online work keeps.
	MechanismCores CPUMechanism = "cores"
)

// CPUMechanisms lists the mechanisms, for config validation and docs.
func CPUMechanisms() []CPUMechanism {
	return []CPUMechanism{MechanismIdle, MechanismShares, MechanismQuota, MechanismCores}
}

// Decision is what one workload (a pod, a container, a `tidal run` process) gets.
type Decision struct {
	// Settings are its cgroup's knobs; a zero field is left as it is.
	Settings Settings
	// OOMScoreAdj for its processes; 0 leaves it alone.
	OOMScoreAdj int
	// Env is added to a container's environment (GPU visibility); nil adds nothing.
	Env map[string]string
}

// AddEnv adds env to the decision's environment.
func (d *Decision) AddEnv(env map[string]string) {
	if len(env) == 0 {
		return
	}
	if d.Env == nil {
		d.Env = make(map[string]string, len(env))
	}
	for k, v := range env {
		d.Env[k] = v
	}
}
