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

// The text form shows what each disk lends and the rule behind it.
func TestWriteTextIO(t *testing.T) {
	s := Status{IO: &IO{Pressure: 3.5, PressureSource: "none on cgroup v1", Disks: []IODisk{{
		Device: "254:0", Name: "vda", Scheduler: "mq-deadline", Lent: IORates{ReadBps: 8 << 20, WriteBps: 40 << 20, ReadIOPS: 64, WriteIOPS: 300},
		Rule: "capacity less online peak and margin", LatencyMs: 1.5}}}}
	var b strings.Builder
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"io: pressure 3.5% (none on cgroup v1)", "disk vda (254:0, mq-deadline): lent read 8Mi/s 64 IO/s, write 40Mi/s 300 IO/s (rule capacity less online peak and margin)", "1.5ms per IO"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
}
