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

// Each indicator shows its baseline beside its target (a probe's in time units), and says when the workload's own figure
// with nothing lent is over the target (an SLO lending less cannot meet) or a probe's target
// sits inside its own tail (missed that often whatever is lent).
func TestWriteTextIndicatorBaselines(t *testing.T) {
	s := Status{Pools: []Pool{{NUMANode: 0, Control: Control{Indicators: []Indicator{
		{Workload: "web", Tier: "shared", Name: "run-queue wait", Value: 0.2, Target: 0.45, Baseline: 0.3},
		{Workload: "api", Tier: "shared", Name: "probe latency", Value: 0.004, Target: 0.005, Baseline: 0.002},
		{Workload: "slow", Tier: "shared", Name: "probe latency", Value: 0.031, Target: 0.01, Baseline: 0.03},
		{Workload: "moved", Tier: "shared", Name: "probe latency", Value: 0.031, Target: 0.01, Baseline: 0.03, BaselineBorrowed: true},
		{Workload: "tight", Tier: "shared", Name: "probe latency", Value: 0.004, Target: 0.005, Baseline: 0.003, BaselineOverTarget: 0.18, BaselineAnswers: 50},
	}}}}}
	var b strings.Builder
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"target 0.450 (own baseline 0.300) ",
		"probe latency 4ms ", "target 5ms (own baseline 2ms) ",
		"probe latency 31ms ", "target 10ms (own baseline 30ms: over the target with nothing lent)",
		"target 10ms (own baseline 30ms, at another load)",
		"target 5ms (own baseline 3ms; with nothing lent 18% of 50 answers over the target)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
}
