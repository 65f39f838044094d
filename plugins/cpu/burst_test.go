package cpu

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Online work bursts by its own percentage or its tier's, over the limit tidal sets or the
// kubelet's; reclaimed work never does, whatever it asks; without a limit the file is left.
func TestBurst(t *testing.T) {
	r := Resource{Burst: Burst{System: 10, Dedicated: 20, Shared: 50}}
	pools := ComputePools(twoNodes(), cpuset.New(0), cpuset.New(), map[int]int64{0: 1000})
	n := plugins.Node{CPUs: twoNodes().AllCPUs(), Pools: pools, LentMilliCPU: 1000}
	tidal, pod := plugins.OwnerTidal, plugins.OwnerKubelet
	cases := []struct {
		name  string
		w     plugins.Workload
		burst int64
		pct   int32
	}{
		{"shared with a cap: the tier's percent of it", plugins.Workload{Tier: qos.Shared, MilliCPU: 2000, Owner: tidal}, 1000, 0},
		{"its own percent wins", plugins.Workload{Tier: qos.Shared, MilliCPU: 2000, CPUBurstPercent: 100, Owner: tidal}, 2000, 0},
		{"its own none wins", plugins.Workload{Tier: qos.Shared, MilliCPU: 2000, CPUBurstPercent: plugins.NoBurst, Owner: tidal}, plugins.BurstOff, 0},
		{"never above the quota", plugins.Workload{Tier: qos.Shared, MilliCPU: 2000, CPUBurstPercent: 400, Owner: tidal}, 2000, 0},
		{"shared without a cap: left", plugins.Workload{Tier: qos.Shared, Owner: tidal}, 0, 0},
		{"a pod: a share of the kubelet's quota", plugins.Workload{Tier: qos.System, Owner: pod}, 0, 10},
		{"a pod's own percent", plugins.Workload{Tier: qos.Shared, CPUBurstPercent: 80, Owner: pod}, 0, 80},
		{"a pod's own none", plugins.Workload{Tier: qos.Shared, CPUBurstPercent: plugins.NoBurst, Owner: pod}, plugins.BurstOff, 0},
		{"a dedicated pod", plugins.Workload{Tier: qos.Dedicated, DedicatedCPUs: cpuset.New(3), Owner: pod}, 0, 20},
		{"reclaimed never", plugins.Workload{Tier: qos.Reclaimed, MilliCPU: 500, CPUBurstPercent: 100, Owner: tidal}, plugins.BurstOff, 0},
		{"a reclaimed pod never", plugins.Workload{Tier: qos.Reclaimed, CPUBurstPercent: 100, Owner: pod}, plugins.BurstOff, 0},
	}
	for _, c := range cases {
		var d plugins.Decision
		r.Decide(c.w, n, &d)
		if d.Settings.CPUBurst != c.burst || d.Settings.CPUBurstPercent != c.pct {
			t.Errorf("%s: burst %dm / %d%%, want %dm / %d%%", c.name, d.Settings.CPUBurst, d.Settings.CPUBurstPercent, c.burst, c.pct)
		}
	}
	// A pod's burst carries its spec's limit, on which the writer sizes it where it is lower
	// than the kubelet's quota (an in-place resize under way); a workload of tidal's has none.
	var d plugins.Decision
	r.Decide(plugins.Workload{Tier: qos.Shared, Owner: pod, CPULimit: 300}, n, &d)
	if d.Settings.CPUBurstPercent != 50 || d.Settings.CPUBurstLimit != 300 {
		t.Errorf("a resized pod: burst %d%% of at most %dm, want 50%% of at most 300m", d.Settings.CPUBurstPercent, d.Settings.CPUBurstLimit)
	}
	d = plugins.Decision{}
	r.Decide(plugins.Workload{Tier: qos.Shared, Owner: pod, CPULimit: 300, CPUBurstPercent: plugins.NoBurst}, n, &d)
	if d.Settings.CPUBurstLimit != 0 {
		t.Errorf("a pod without a burst carries a burst limit of %dm", d.Settings.CPUBurstLimit)
	}
	tree := plugins.NewTree("tidal", nil, nil)
	r.Fill(tree, n)
	if b := tree.Tier(qos.Reclaimed).CPUBurst; b != plugins.BurstOff {
		t.Errorf("reclaimed tier burst %d, want none", b)
	}
}
