package isolation

import (
	"context"
	"fmt"
	"math"
	"math/bits"
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
	// MilliCPU is the pod's CPU, from the sandbox's pod-level resources (the kubelet sends
	// the sum of its containers' limits); 0 when not sent.
	MilliCPU int64
}

// MilliCPUOf turns CFS quota and period, or else CPU shares, into millicores.
// The values come from the caller's request: huge ones saturate rather than wrap around
// (FuzzMilliCPUOf).
func MilliCPUOf(quota, period, shares int64) int64 {
	if quota > 0 && period > 0 {
		return mulDiv(quota, 1000, period)
	}
	if shares > 2 {
		return mulDiv(shares, 1000, 1024)
	}
	return 0
}

// mulDiv is a*b/c for positive a, b, c without overflow, saturating at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
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

// WithTimeout runs a hook's decision f with a deadline. Past it the hook goes on without the
// answer (fail-open); f keeps running in the background and its answer is dropped.
func WithTimeout[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("no decision within %v", timeout)
	}
}
