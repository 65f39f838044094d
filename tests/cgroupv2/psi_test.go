package cgroupv2

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// The PSI trigger the fast path arms, on a real per-cgroup cpu.pressure: quiet while the
// cgroup's one process sleeps, firing once two busy loops share its one CPU, and ending with
// an error when the cgroup is removed under it.
func TestV2PressureTrigger(t *testing.T) {
	l := unified(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	g := root + "/shared"
	apply(t, w,
		plugins.Cgroup{Path: root, Settings: plugins.Settings{CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)}},
		plugins.Cgroup{Path: g, Settings: plugins.Settings{CPUs: cpuset.New(0), Mems: cpuset.New(0)}},
	)
	events := make(chan time.Time, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- metrics.WatchPressure(ctx, filepath.Join(l.Unified, g, "cpu.pressure"), 100*time.Millisecond, time.Second, func() {
			select {
			case events <- time.Now():
			default:
			}
		})
	}()
	if err := w.Attach(g, sleeper(t).Process.Pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
		t.Fatal("the trigger fired with no CPU contention in the cgroup")
	case err := <-done:
		t.Fatalf("WatchPressure ended: %v", err)
	case <-time.After(3 * time.Second):
	}
	loops := spin(t, 2)
	for _, c := range loops {
		if err := w.Attach(g, c.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	select {
	case at := <-events:
		t.Logf("trigger fired %v after two loops started on one CPU; %s", at.Sub(start).Round(time.Millisecond), cg(t, l, g, "cpu.pressure"))
	case err := <-done:
		t.Fatalf("WatchPressure ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("no PSI event in 30s with two loops on one CPU; cpu.pressure: %s", cg(t, l, g, "cpu.pressure"))
	}

	// The cgroup goes away: the watch must end with an error, not hang.
	isolationtest.Cleanup(t, l, root)
	select {
	case err := <-done:
		if err == nil {
			t.Error("WatchPressure returned nil after its cgroup was removed, want an error")
		}
		t.Logf("after removal: %v", err)
	case <-time.After(15 * time.Second):
		t.Error("WatchPressure still waiting 15s after its cgroup was removed")
	}
}
