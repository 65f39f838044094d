package reporter

import (
	"strings"
	"testing"
)

// The workloads table shows each workload's CPU burst, or a reclaimed one's CPU satisfaction.
func TestWriteTextCPUQoS(t *testing.T) {
	sat := 0.04
	s := Status{Workloads: []Workload{
		{Name: "web", Tier: "shared", CPUBurstMilliCPU: 500},
		{Name: "api", Tier: "shared", CPUBurstPercent: 30},
		{Name: "batch", Tier: "reclaimed", CPUSatisfaction: &sat},
		{Name: "plain", Tier: "shared"},
	}}
	var b strings.Builder
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"CPU QOS", "burst 500m", "burst 30%", "satisfied 0.04"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
}
