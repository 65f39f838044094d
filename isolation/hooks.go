package isolation

import (
	"context"
	"time"
)

// Pod is what a runtime hook (CRI proxy, NRI plugin) knows of a pod when it asks for a
// decision.
type Pod struct {
	Name, Namespace, UID string
	Annotations, Labels  map[string]string
	// CgroupParent is the pod's cgroup as the runtime is given it (a cgroupfs path or a
	// systemd slice name).
	CgroupParent string
}

// Decider answers the runtime hooks: the agent, whose answers come from Decide.
type Decider interface {
	// Sandbox is called before a pod's sandbox is created: the pod's cgroup may already
	// exist (the kubelet makes it), so the Decider may write it (cpu.idle has no CRI field).
	Sandbox(ctx context.Context, pod Pod) error
	// Container decides what a container of the pod gets.
	Container(ctx context.Context, pod Pod, container string) (Decision, error)
}

// HookObserver counts hook calls: result is "adjusted", "unchanged" or "fail-open".
type HookObserver interface {
	HookCall(hook, method, result string, d time.Duration)
}
