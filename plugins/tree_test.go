package plugins_test

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// A pod's containers follow it with its cpuset and its burst, each burst sized on the
// container's own CPU limit, found by the container ID its cgroup is named after (cgroupfs
// and systemd names alike); a cgroup of no known container (the sandbox's) gets none.
func TestForeignChildrenTakeTheirContainersLimits(t *testing.T) {
	pod := "kubepods/burstable/podA"
	w := plugins.Workload{Name: "default/web", Tier: qos.Shared, Cgroup: pod, Owner: plugins.OwnerKubelet,
		CPULimit: 300, ContainerCPULimits: map[string]int64{"abc123": 200, "def456": 100}}
	children := map[string][]string{pod: {pod + "/cri-containerd-abc123.scope", pod + "/def456", pod + "/sandbox789"}}
	tree := plugins.NewTree("tidal", []plugins.Workload{w}, children)
	*tree.Workload(w) = plugins.Settings{CPUBurstPercent: 50, CPUBurstLimit: 300}

	want := map[string]int64{pod: 300, pod + "/cri-containerd-abc123.scope": 200, pod + "/def456": 100, pod + "/sandbox789": 0}
	seen := 0
	for _, c := range tree.Cgroups() {
		limit, ok := want[c.Path]
		if !ok {
			continue
		}
		seen++
		if !c.Foreign || c.Settings.CPUBurstPercent != 50 || c.Settings.CPUBurstLimit != limit {
			t.Errorf("%s: foreign %v, burst %d%% of at most %dm; want foreign, 50%% of at most %dm",
				c.Path, c.Foreign, c.Settings.CPUBurstPercent, c.Settings.CPUBurstLimit, limit)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the pod's %d cgroups in the tree", seen, len(want))
	}
}
