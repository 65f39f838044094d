package main

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
)

// split-oracle lends CPU 1 whole in the valleys and nothing beside online work otherwise, in
// the order that never lets the two share a core: the offline work held before the online
// service widens, and the online service narrowed before the offline work is let go.
func TestSplitOracleNeverSharesACore(t *testing.T) {
	all := cpuset.New(0, 1)
	for _, phase := range []string{"valley", "valley2"} {
		steps := splitOracle(all, phase)
		if len(steps) != 2 || steps[0][0].Path != "online" || steps[1][0].Path != "offline" {
			t.Fatalf("%s: steps %+v, want online narrowed, then offline let go", phase, steps)
		}
		if got := steps[0][0].Settings.CPUs; !got.Equals(cpuset.New(0)) {
			t.Errorf("%s: online on %s, want 0", phase, got)
		}
		if got := steps[1][0].Settings.CPUQuota; got != plugins.Unlimited {
			t.Errorf("%s: offline quota %d, want none", phase, got)
		}
	}
	for _, phase := range []string{"ramp", "peak", "spike"} {
		steps := splitOracle(all, phase)
		if len(steps) != 2 || steps[0][0].Path != "offline" || steps[1][0].Path != "online" {
			t.Fatalf("%s: steps %+v, want offline held, then online widened", phase, steps)
		}
		if got := steps[0][0].Settings.CPUQuota; got != oracleHeldMilliCPU {
			t.Errorf("%s: offline quota %d, want %d", phase, got, oracleHeldMilliCPU)
		}
		if got := steps[1][0].Settings.CPUs; !got.Equals(all) {
			t.Errorf("%s: online on %s, want every CPU", phase, got)
		}
	}
	if got := lowerHalfOnline(cpuset.New(3)).CPUs; !got.Equals(cpuset.New(3)) {
		t.Errorf("one CPU: online on %s, want it", got)
	}
}
