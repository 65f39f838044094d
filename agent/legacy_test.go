package agent

import (
	"os/exec"
	"path"
	"slices"
	"testing"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// An agent that finds reclaimed work where an older one kept the tier, under its root
// ("ROOT/reclaimed/NAME"), adopts it into the tier's place beside the root
// ("ROOT-reclaimed/NAME"): the processes move, the old cgroups go, the workload keeps its name
// and tier. Real cgroups under a root of the test's own.
func TestAdoptsReclaimedWorkFromTheTiersOldPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("real cgroups")
	}
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	old := path.Join(plugins.LegacyReclaimedPath(root), "batch")
	setup, err := isolation.NewWriter(layout, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	if err := setup.Attach(old, sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}

	a := realAgent(t, layout, root)

	moved := plugins.WorkloadPath(root, qos.Reclaimed, "batch")
	if pids, err := layout.Procs(moved, false); err != nil || !slices.Contains(pids, sleep.Process.Pid) {
		t.Fatalf("processes of %s: %v, %v; want the old workload's pid %d", moved, pids, err, sleep.Process.Pid)
	}
	for _, gone := range []string{old, plugins.LegacyReclaimedPath(root)} {
		if layout.Exists(gone) {
			t.Errorf("old cgroup %s is still there", gone)
		}
	}
	var found bool
	for _, r := range a.store.Snapshot().Workloads {
		if r.Name == "batch" {
			found = true
			if r.Tier != qos.Reclaimed || r.Cgroup != moved {
				t.Errorf("adopted workload: tier %s, cgroup %s; want reclaimed in %s", r.Tier, r.Cgroup, moved)
			}
		}
	}
	if !found {
		t.Error("the old workload was not adopted")
	}
}

// An empty tier left in the old place goes at start.
func TestRemovesTheReclaimedTiersEmptyOldPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("real cgroups")
	}
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	setup, err := isolation.NewWriter(layout, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Ensure(plugins.LegacyReclaimedPath(root)); err != nil {
		t.Fatal(err)
	}
	realAgent(t, layout, root)
	if layout.Exists(plugins.LegacyReclaimedPath(root)) {
		t.Errorf("old cgroup %s is still there", plugins.LegacyReclaimedPath(root))
	}
}
