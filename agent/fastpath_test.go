package agent

import (
	"slices"
	"testing"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
)

// Handing cores back widens the busiest workloads' cpusets first: a busy pod's containers
// go with it, cgroups of no workload (the tiers) keep their place, and ties keep their order.
func TestBusiestFirst(t *testing.T) {
	rec := func(cgroup string, milli int64) state.Record {
		r := state.Record{MilliCPU: milli}
		r.Cgroup = cgroup
		return r
	}
	snap := state.Snapshot{Workloads: []state.Record{
		rec("tidal/shared/idle-1", 0), rec("tidal/shared/idle-2", 0), rec("tidal/shared/server", 900),
		rec("kubepods/pod-a", 300),
	}}
	var cgroups []plugins.Cgroup
	for _, p := range []string{"tidal/shared", "tidal/shared/idle-1", "tidal/shared/idle-2", "kubepods/pod-a/ctr", "tidal/shared/server"} {
		cgroups = append(cgroups, plugins.Cgroup{Path: p})
	}
	busiestFirst(cgroups, snap)
	var got []string
	for _, c := range cgroups {
		got = append(got, c.Path)
	}
	want := []string{"tidal/shared/server", "kubepods/pod-a/ctr", "tidal/shared", "tidal/shared/idle-1", "tidal/shared/idle-2"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
