// Package source is the seam between where workloads come from and the node state. Each
// source (standalone: `tidal run` over the local API; kube: the pods bound to this node;
// hooks: the runtime's CRI and NRI calls) lives in its own package, turns what it sees into
// state.Spec values and hands them to the agent through Node. No source builds another
// source's objects: a pod a hook saw first is put by the hooks source, and the pod watch
// updates the same workload (same name and UID) when it sees the pod.
package source

import (
	"context"

	"github.com/tidalqos/tidal/agent/evict"
	"github.com/tidalqos/tidal/agent/state"
)

// Source reports workloads until ctx is done.
type Source interface {
	// Name is the source's name in records, actions and logs.
	Name() string
	// Run does the source's own work (a watch, a server, collecting exited workloads) until
	// ctx is done. It returns an error only when the source cannot go on.
	Run(ctx context.Context) error
}

// Evicting is implemented by a source that stops its workloads its own way (pods through
// the Eviction API); the others' workloads get signals.
type Evicting interface {
	Evictor() evict.Evictor
}

// Refreshing is implemented by a source that re-reads outside state the slow loop's
// decisions rest on (the kubelet's CPU manager state): the loop calls Refresh at the start
// of every pass, so a pass never writes from a view older than that state.
type Refreshing interface {
	Refresh()
}

// Node is the node state as sources see it. Each change is reconciled to the cgroups before
// the call returns, recorded as an action and checkpointed.
type Node interface {
	// Add registers a new workload; a name in use or an allocation that cannot be met is
	// an error and changes nothing.
	Add(spec state.Spec) (state.Record, error)
	// Put adds a workload or updates the one of the same name and UID (a new UID replaces
	// it).
	Put(spec state.Spec) (state.Record, error)
	// Remove forgets a workload (its cgroup goes if tidal made it).
	Remove(name, why string)
	// Processes records the processes a source has just read in a workload's cgroup, so
	// status shows them before the agent next samples the workload.
	Processes(name string, pids []int)
	// Get is one workload now; Snapshot the whole registry.
	Get(name string) (state.Record, bool)
	Snapshot() state.Snapshot
	// Save makes the state durable now (the checkpoint), for a change the caller must not
	// acknowledge before a restart would find it.
	Save() error
}
