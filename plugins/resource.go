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
	// GPUMinors are the /dev/nvidiaN minors of the node's GPUs.
	GPUMinors []int
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
