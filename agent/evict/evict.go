// Package evict stops workloads. Every trigger (memory short, a lease that ended, a GPU that
// online work needs back, starvation) asks one Evictor; which one depends on who runs the
// workload: tidal's own processes get signals, pods go through the API server's Eviction API
// so PodDisruptionBudgets hold. Both honour the same grace period.
package evict

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Victim is a workload to stop, and why (the trigger and its figures, for logs and Events).
type Victim struct {
	Name   string
	UID    string
	Cgroup string
	Reason string
}

// Evictor stops one workload. Evict returns once the workload is gone (or, for a pod, the
// API server accepted the eviction and the kubelet stops it), or with an error when it was
// refused; it honours ctx.
type Evictor interface {
	Evict(ctx context.Context, v Victim) error
}

// Cgroups is what Signal needs of the cgroup layer: signal every process in a cgroup (and its
// children), and list them.
type Cgroups interface {
	Signal(cgroup string, sig syscall.Signal) (int, error)
	Procs(cgroup string) ([]int, error)
}

// Signal stops workloads tidal started: SIGTERM to every process of the cgroup, SIGKILL to
// what is left once the grace period is over.
type Signal struct {
	Cgroups Cgroups
	Grace   time.Duration
	// Poll is how often it looks whether the processes are gone (default 50ms).
	Poll time.Duration
}

// ErrStuck means processes survived SIGKILL (stuck in the kernel): the workload stays listed
// as evicting until its cgroup is found empty.
var ErrStuck = errors.New("processes still present after SIGKILL")

// Evict implements Evictor. When ctx ends first (the agent is stopping) it returns ctx's
// error without SIGKILL: the grace period is the workload's, not the agent's to cut short.
func (s Signal) Evict(ctx context.Context, v Victim) error {
	poll := s.Poll
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	if _, err := s.Cgroups.Signal(v.Cgroup, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(s.Grace)
	for time.Now().Before(deadline) && !s.empty(v.Cgroup) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
	_, _ = s.Cgroups.Signal(v.Cgroup, syscall.SIGKILL)
	for range 40 {
		if s.empty(v.Cgroup) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return ErrStuck
}

// empty: no process left. A cgroup that cannot be listed (removed) has none either.
func (s Signal) empty(cgroup string) bool {
	pids, _ := s.Cgroups.Procs(cgroup)
	return len(pids) == 0
}
