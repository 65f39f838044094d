package agent

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
)

// Handing cores back widens the busiest workloads' cpusets first: a busy pod's containers
// go with it, cgroups of no workload (the tiers) keep their place, and ties keep their order.
func TestBusiestFirst(t *testing.T) {
	rec := func(cgroup string, milli int64) state.Record {
		r := state.Record{UsedMilliCPU: milli}
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

// gatedWriter blocks every write until its gate is closed: a log whose reader has stalled.
type gatedWriter struct{ gate chan struct{} }

func (w gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	return len(p), nil
}

// A spike's cut reaches the cgroups while the log that records it is stuck: the fast path
// logs its actions after writing them, without holding the agent's lock.
func TestSpikeWritesBeforeItLogs(t *testing.T) {
	h := newFakeHost(t)
	a := h.agentWith(t.TempDir(), func(c *config.Config) { c.CPU.Mechanism = string(plugins.MechanismQuota) })
	growOverEveryCPU(t, h, a)

	gate := make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	defer release()
	a.log = slog.New(slog.NewTextHandler(gatedWriter{gate}, nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.spike(time.Now(), 3900, 0)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.read("tidal-reclaimed", "cpu.max") != "10000 100000" {
		if time.Now().After(deadline) {
			t.Fatalf("reclaimed quota %q while the log is stuck, want the cut's 10000 100000", h.read("tidal-reclaimed", "cpu.max"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The agent's lock is free meanwhile: status and the slow loop need it.
	if !a.mu.TryLock() {
		t.Error("the agent's lock is held while the fast path waits on its log")
	} else {
		a.mu.Unlock()
	}
	release()
	<-done
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.actions); n == 0 || a.actions[n-1].Trigger != "online-spike" {
		t.Errorf("actions %v, want the spike's cut last", a.actions)
	}
}
