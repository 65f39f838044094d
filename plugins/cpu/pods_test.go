package cpu

import (
	"fmt"
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Pods share what is lent max-min fairly: parts add up to what is lent, none above its cap,
// what a capped pod leaves goes to the rest, and no part falls under the kernel's least quota.
func TestPodShares(t *testing.T) {
	for _, c := range []struct {
		lent int64
		caps map[string]int64
		want map[string]int64
	}{
		{1500, map[string]int64{}, map[string]int64{}},
		{1500, map[string]int64{"a": 0}, map[string]int64{"a": 1500}},
		{1500, map[string]int64{"a": 0, "b": 0, "c": 0}, map[string]int64{"a": 500, "b": 500, "c": 500}},
		{1000, map[string]int64{"a": 0, "b": 0, "c": 0}, map[string]int64{"a": 333, "b": 333, "c": 334}},
		{1600, map[string]int64{"big": 1500, "small": 100}, map[string]int64{"big": 1500, "small": 100}},
		{1000, map[string]int64{"big": 1500, "small": 100}, map[string]int64{"big": 900, "small": 100}},
		{1000, map[string]int64{"a": 0, "b": 200, "c": 2000}, map[string]int64{"a": 400, "b": 200, "c": 400}},
		{100, map[string]int64{"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": 0, "i": 0, "j": 0, "k": 0, "l": 0},
			map[string]int64{"a": 10, "b": 10, "c": 10, "d": 10, "e": 10, "f": 10, "g": 10, "h": 10, "i": 10, "j": 10, "k": 10, "l": 10}},
		{100, map[string]int64{"a": 5}, map[string]int64{"a": 10}},
	} {
		got := PodShares(c.lent, c.caps)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("PodShares(%d, %v) = %v, want %v", c.lent, c.caps, got, c.want)
		}
	}
}

// While a quota holds, reclaimed pods' quotas add up to what is lent (each pod sits in the
// kubelet's cgroups, outside the tier whose one quota holds tidal's own reclaimed work); a
// pod the node does not list yet gets the part it would as one more. Without a quota, each
// is held only by its own cap.
func TestReclaimedPodsShareWhatIsLent(t *testing.T) {
	pods := map[string]int64{"ns/a": 0, "ns/b": 0, "ns/capped": 100}
	quota := func(m plugins.CPUMechanism, name string) int64 {
		n := plugins.Node{LentMilliCPU: 1000, Idle: true, ReclaimedCPU: m, ReclaimedPodParts: PodShares(1000, pods)}
		var d plugins.Decision
		Resource{}.Decide(plugins.Workload{Name: name, Tier: qos.Reclaimed, Owner: plugins.OwnerKubelet, MilliCPU: pods[name]}, n, &d)
		return d.Settings.CPUQuota
	}
	var sum int64
	for name := range pods {
		sum += quota(plugins.MechanismQuota, name)
	}
	if sum != 1000 {
		t.Errorf("the pods' quotas add up to %dm, want the 1000m lent", sum)
	}
	if a, capped := quota(plugins.MechanismQuota, "ns/a"), quota(plugins.MechanismQuota, "ns/capped"); a != 450 || capped != 100 {
		t.Errorf("quotas: ns/a %dm, ns/capped %dm; want 450m and its own 100m", a, capped)
	}
	if got := quota(plugins.MechanismQuota, "ns/new"); got != 250 {
		t.Errorf("a pod not listed yet: %dm, want 250m (one of four)", got)
	}
	if a, capped := quota(plugins.MechanismIdle, "ns/a"), quota(plugins.MechanismIdle, "ns/capped"); a != plugins.Unlimited || capped != 100 {
		t.Errorf("idle mechanism: ns/a %dm, ns/capped %dm; want none and its own 100m", a, capped)
	}
}
