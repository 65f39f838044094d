package advisor

import (
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{
		MinReclaimedMilliCPU: 100, SafetyMarginMilliCPU: 200, SafetyMarginRatio: 0.1,
		GrowStepMilliCPU: 250, PeakWindow: 5 * time.Second, SpikeThreshold: 0.8,
		ReservedSystemBytes: 1 << 30, MinReclaimedBytes: 256 << 20, SafetyMarginBytes: 512 << 20, GrowStepBytes: 1 << 30,
		Control: Control{Slack: 0.5, Cut: 0.5, Hold: 10 * time.Second},
	}
}

func sample(t0 time.Time, sec int, online int64) Sample {
	return Sample{
		Time:             t0.Add(time.Duration(sec) * time.Second),
		NUMA:             map[int]NUMASample{0: {PoolMilliCPU: 4000, OnlineMilliCPU: online}},
		MemoryTotalBytes: 16 << 30, MemoryOnlineBytes: 4 << 30,
	}
}

func TestStartsAtMinimumAndGrowsOneStepPerPass(t *testing.T) {
	a := New(testConfig())
	if a.Primed() {
		t.Fatal("primed before any sample")
	}
	t0 := time.Unix(1000, 0)
	a.Step(sample(t0, 0, 1000))
	// idle online 1000m: target = 4000 - (1100+200) = 2700; from 100 a step of 250 at a time.
	want := []int64{350, 600, 850, 1100}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != want[0] {
		t.Fatalf("first pass lends %dm, want %dm", got, want[0])
	}
	for i, w := range want[1:] {
		a.Step(sample(t0, i+1, 1000))
		if got := a.Plan().ReclaimedMilliCPU[0]; got != w {
			t.Fatalf("pass %d lends %dm, want %dm", i+2, got, w)
		}
	}
	for i := 5; i < 20; i++ {
		a.Step(sample(t0, i, 1000))
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 2700 {
		t.Fatalf("converged to %dm, want 2700m", got)
	}
	if !a.Primed() {
		t.Error("not primed after samples")
	}
}

func TestShrinksAtOnceAndRemembersThePeak(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(1000, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 3250 {
		t.Fatalf("lends %dm, want 3250m", got)
	}
	ch := a.Step(sample(t0, 20, 3000))
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 500 {
		t.Fatalf("after load rose to 3000m lends %dm, want 500m (4000-3300-200)", got)
	}
	if len(ch) == 0 || ch[0].Kind != "shrink" {
		t.Fatalf("changes = %+v, want a shrink", ch)
	}
	// Load falls back, but the peak stays in the window (5s): no growth yet.
	a.Step(sample(t0, 22, 500))
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 500 {
		t.Fatalf("grew inside the peak window: %dm", got)
	}
	// After the window it grows again, one step.
	a.Step(sample(t0, 27, 500))
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 750 {
		t.Fatalf("after the window lends %dm, want 750m", got)
	}
}

func TestNeverBelowMinimumNorAbovePool(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	a.Step(sample(t0, 0, 4000))
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 100 {
		t.Errorf("saturated node lends %dm, want the 100m minimum", got)
	}
	b := New(testConfig())
	s := sample(t0, 0, 0)
	s.NUMA[0] = NUMASample{PoolMilliCPU: 50}
	b.Step(s)
	if got := b.Plan().ReclaimedMilliCPU[0]; got != 50 {
		t.Errorf("50m pool lends %dm, want 50m", got)
	}
}

func TestBurstOverWhatOnlineKeptShrinksAtOnce(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	// Online kept 750m. Over the fast window the burst has not shown yet (300m, under 600m);
	// over the burst window it used 900m, more than all it kept.
	ch := a.Spike(t0.Add(20*time.Second), 0, SpikeRates{WindowMilli: 300, BurstMilli: 900, Window: 30 * time.Millisecond, Burst: 10 * time.Millisecond})
	if ch == nil || ch.Kind != "shrink" {
		t.Fatal("a burst over all online kept did not shrink")
	}
	if !strings.Contains(ch.Reason, "online burst 900m over 10ms > the 750m it kept") {
		t.Errorf("reason %q does not name the burst window's figures", ch.Reason)
	}
	// The burst is the demand: 4000 - 900*1.1 - 200 = 2810m.
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 2810 {
		t.Fatalf("after the burst lends %dm, want 2810m", got)
	}
}

func TestSpikeShrinksAtOnce(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	// Online kept 4000-3250 = 750m; 0.8 of that is 600m.
	if ch := a.Spike(t0.Add(20*time.Second), 0, SpikeRates{WindowMilli: 550, BurstMilli: 700}); ch != nil {
		t.Fatalf("550m (700m over the burst window) is under the thresholds but shrank: %+v", ch)
	}
	ch := a.Spike(t0.Add(20*time.Second), 0, SpikeRates{WindowMilli: 2500})
	if ch == nil || ch.Kind != "shrink" {
		t.Fatal("a 2500m spike did not shrink")
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 1050 {
		t.Fatalf("after spike lends %dm, want 1050m (4000-2750-200)", got)
	}
	// The slow loop right after must not grow back past what the spike left.
	a.Step(sample(t0, 21, 400))
	if got := a.Plan().ReclaimedMilliCPU[0]; got > 1050 {
		t.Fatalf("slow loop grew back to %dm right after a spike", got)
	}
	if a.Spike(t0, 7, SpikeRates{WindowMilli: 9999}) != nil {
		t.Error("spike on an unknown NUMA node changed the plan")
	}
}

// SpikeLimits are where Spike begins to act: at them it cuts nothing, one millicore above
// either (the window rate or the burst) it does. The fast path's watch wakes the agent only
// above them, so a limit set too high would leave a spike unseen.
func TestSpikeLimitsAreWhereSpikeBeginsToCut(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	window, burst, ok := a.SpikeLimits(0)
	if !ok || window != 600 || burst != 750 {
		t.Fatalf("limits %dm, %dm (%v), want 600m and 750m (0.8 of the 750m kept, and all of it)", window, burst, ok)
	}
	if ch := a.Spike(t0.Add(20*time.Second), 0, SpikeRates{WindowMilli: window, BurstMilli: burst}); ch != nil {
		t.Fatalf("at the limits Spike cut: %+v", ch)
	}
	for _, r := range []SpikeRates{{WindowMilli: window + 1}, {BurstMilli: burst + 1}} {
		b := New(testConfig())
		for i := 0; i < 20; i++ {
			b.Step(sample(t0, i, 500))
		}
		if b.Spike(t0.Add(20*time.Second), 0, r) == nil {
			t.Errorf("%+v, just above a limit, cut nothing", r)
		}
	}
	if _, _, ok := a.SpikeLimits(7); ok {
		t.Error("limits for a NUMA node that lends nothing")
	}
}

func TestResetFallsToMinimum(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	if !a.LendsAboveMinimum() {
		t.Fatal("lending grown over 20 steps, but not above the minimum")
	}
	ch := a.Reset("metrics stale")
	if a.LendsAboveMinimum() {
		t.Error("at the minimum, but still something to cut")
	}
	p := a.Plan()
	if p.ReclaimedMilliCPU[0] != 100 || p.ReclaimedMemory != 256<<20 {
		t.Fatalf("after reset plan = %+v", p)
	}
	if len(ch) != 2 || a.Primed() {
		t.Fatalf("reset changes = %+v, primed = %v", ch, a.Primed())
	}
}

func TestMemoryIsTakenBackOnlyForOnlineDemand(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	// A restart beside reclaimed work holding 3GiB: the plan starts there, not at the minimum.
	a.KeepMemory(3 << 30)
	if got := a.Plan().ReclaimedMemory; got != 3<<30 {
		t.Fatalf("before any sample the plan lends %d bytes, want what reclaimed work holds (3GiB)", got)
	}
	// Online work leaves 16 - 1 reserved - 4 - 0.5 margin = 10.5GiB: it grows a step from there.
	a.Step(sample(t0, 0, 500))
	if got := a.Plan().ReclaimedMemory; got != 4<<30 {
		t.Fatalf("first pass lends %d bytes, want 4GiB (one step over what is held)", got)
	}
	a.KeepMemory(7 << 29) // holds 3.5GiB now
	if got := a.Plan().ReclaimedMemory; got != 4<<30 {
		t.Fatalf("KeepMemory moved a primed plan to %d bytes", got)
	}
	// No figures: growth stops where reclaimed work stands, nothing is taken from it.
	changes := a.Reset("metrics stale")
	if got := a.Plan().ReclaimedMemory; got != 7<<29 {
		t.Fatalf("after a reset the plan lends %d bytes, want what reclaimed work holds (3.5GiB)", got)
	}
	if len(changes) != 2 || !strings.Contains(changes[1].Reason, "4.0GiB -> 3.5GiB (what reclaimed work holds)") {
		t.Fatalf("reset changes = %+v", changes)
	}
	// Online demand does take it back, under what is held: eviction frees the rest.
	s := sample(t0, 1, 500)
	s.MemoryOnlineBytes = 14 << 30
	a.Step(s)
	if got := a.Plan().ReclaimedMemory; got != 512<<20 {
		t.Fatalf("with online work needing the memory the plan lends %d bytes, want 512MiB", got)
	}
	// A reset after that shrink keeps it, and what reclaimed work holds does not raise it
	// again (only a start does): the shrink stands until eviction frees the memory.
	a.Reset("cgroup writes failing")
	a.KeepMemory(4 << 30)
	if got := a.Plan().ReclaimedMemory; got != 512<<20 {
		t.Fatalf("after a shrink for online demand and a reset the plan lends %d bytes, want the 512MiB online work leaves", got)
	}
	// Reclaimed work holding nothing: a reset falls to the minimum as before.
	a.KeepMemory(0)
	a.Reset("metrics stale")
	if got := a.Plan().ReclaimedMemory; got != 256<<20 {
		t.Fatalf("after a reset with nothing held the plan lends %d bytes, want the 256MiB minimum", got)
	}
}

func TestMemoryLendsWhatOnlineLeaves(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 0))
	}
	// 16Gi - 1Gi reserved - 4Gi online - 0.5Gi margin
	if got, want := a.Plan().ReclaimedMemory, int64(21<<29); got != want {
		t.Fatalf("lends %d bytes, want %d", got, want)
	}
	s := sample(t0, 21, 0)
	s.MemoryOnlineBytes = 15 << 30
	a.Step(s)
	if got := a.Plan().ReclaimedMemory; got != 256<<20 {
		t.Fatalf("with online at 15Gi lends %d, want the minimum", got)
	}
}

func BenchmarkStep(b *testing.B) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	s := Sample{NUMA: map[int]NUMASample{0: {4000, 500}, 1: {4000, 900}}, MemoryTotalBytes: 64 << 30, MemoryOnlineBytes: 8 << 30}
	for i := 0; b.Loop(); i++ {
		s.Time = t0.Add(time.Duration(i) * time.Second)
		a.Step(s)
	}
}

func TestInitLendsTheMinimumPerNode(t *testing.T) {
	a := New(testConfig())
	a.Init(map[int]int64{0: 4000, 1: 50})
	p := a.Plan()
	if p.ReclaimedMilliCPU[0] != 100 || p.ReclaimedMilliCPU[1] != 50 || a.Primed() {
		t.Fatalf("after Init plan = %+v, primed %v", p, a.Primed())
	}
}

func TestSmallShrinksAreNoise(t *testing.T) {
	a := New(testConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	before := a.Plan()
	s := sample(t0, 20, 530) // 30m more online use, 33m less to lend: inside the deadband
	s.MemoryOnlineBytes += 16 << 20
	if ch := a.Step(s); len(ch) != 0 {
		t.Errorf("a 33m / 16MiB change moved the plan: %+v", ch)
	}
	if after := a.Plan(); after.ReclaimedMilliCPU[0] != before.ReclaimedMilliCPU[0] || after.ReclaimedMemory != before.ReclaimedMemory {
		t.Errorf("plan moved: %+v -> %+v", before, after)
	}
}

// The interference feedback: a crossing cuts lending at once by Cut and holds it for Hold;
// growth resumes only with slack on every indicator, and the usage ceiling still bounds it.
func TestInterferenceCutsHoldsAndGrowsOnSlack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 2700 {
		t.Fatalf("lends %dm with no interference, want the usage ceiling 2700m", got)
	}
	wait := func(v float64) []Indicator {
		return []Indicator{{Name: "run-queue wait", Workload: "web", Value: v, Target: 0.1}, {Name: "throttled", Workload: "web", Value: 0, Target: 0}}
	}
	now := t0.Add(12 * time.Second)
	c := a.Interfere(now, 0, wait(0.25))
	if c == nil || c.Kind != "shrink" || a.Plan().ReclaimedMilliCPU[0] != 1350 {
		t.Fatalf("a crossing: change %+v, lends %dm, want a cut to 1350m", c, a.Plan().ReclaimedMilliCPU[0])
	}
	if !strings.Contains(c.Reason, "run-queue wait of web 0.250 (target 0.100)") {
		t.Errorf("the cut does not name its indicator: %s", c.Reason)
	}
	// A second crossing cuts again, never under the minimum.
	for i := 0; i < 6; i++ {
		a.Interfere(now, 0, wait(0.5))
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 100 {
		t.Fatalf("repeated crossings: lends %dm, want the minimum 100m", got)
	}
	// Slack during the hold: no growth, and the slow loop does not grow past the cap.
	for i := 1; i <= 9; i++ {
		at := now.Add(time.Duration(i) * time.Second)
		a.Interfere(at, 0, wait(0.01))
		a.Step(sample(t0, 12+i, 1000))
	}
	if got, st := a.Plan().ReclaimedMilliCPU[0], a.Controllers()[0].State; got != 100 || st != "hold" {
		t.Fatalf("within the hold: lends %dm (state %s), want 100m held", got, st)
	}
	// After the hold, slack grows the cap a step per reading, and the plan follows a step per
	// slow pass up to the usage ceiling.
	at := now.Add(11 * time.Second)
	for i := 0; i < 20; i++ {
		a.Interfere(at, 0, wait(0.01))
		a.Step(sample(t0, 23+i, 1000))
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 2700 {
		t.Fatalf("after the hold with slack: lends %dm, want back at the usage ceiling 2700m", got)
	}
	// Between slack and target: hold, no growth of the cap.
	capBefore := a.Controllers()[0].CapMilliCPU
	a.Interfere(at.Add(time.Second), 0, wait(0.07))
	if ctl := a.Controllers()[0]; ctl.State != "hold" || ctl.CapMilliCPU != capBefore {
		t.Errorf("no slack, under target: %+v", ctl)
	}
	if limit, _, _ := a.Ceilings(0); limit.MilliCPU != 2700 {
		t.Errorf("usage ceiling %dm, want 2700m", limit.MilliCPU)
	}
}

// Slack is the room left over a workload's own baseline: one that waits 2.0 with nothing
// lent, with a target of 3.0, shows slack at 2.2 and none at 2.8 (measured against its target
// alone, 2.2 would be 0.73 of it and lending could never grow back after a cut).
func TestSlackIsJudgedOverTheBaseline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	wait := func(v float64) []Indicator {
		return []Indicator{{Name: "run-queue wait", Workload: "web", Value: v, Target: 3.0, Baseline: 2.0}}
	}
	now := t0.Add(12 * time.Second)
	if c := a.Interfere(now, 0, wait(3.5)); c == nil {
		t.Fatal("no cut over the target")
	}
	after := now.Add(time.Minute) // past the hold
	capBefore := a.Controllers()[0].CapMilliCPU
	a.Interfere(after, 0, wait(2.8))
	if ctl := a.Controllers()[0]; ctl.State != "hold" || ctl.CapMilliCPU != capBefore {
		t.Errorf("at 2.8 (0.8 of the way to the target): %+v, want a hold", ctl)
	}
	a.Interfere(after, 0, wait(2.2))
	if ctl := a.Controllers()[0]; ctl.State != "grow" || ctl.CapMilliCPU <= capBefore {
		t.Errorf("at 2.2 (0.2 of the way to the target): %+v, want growth", ctl)
	}
}

// A crossing judged only against another load level's baseline cuts at once but holds
// nothing back: the readings at the minimum that follow measure this level's own floor.
func TestACutAgainstABorrowedBaselineDoesNotHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	now := t0.Add(12 * time.Second)
	borrowed := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.6, Target: 0.25, Baseline: 0.1, Borrowed: true}}
	c := a.Interfere(now, 0, borrowed)
	if c == nil || !strings.Contains(c.Reason, "no hold: baseline borrowed") {
		t.Fatalf("cut %+v, want one that says it does not hold", c)
	}
	// Its level learned (0.5, target 0.75), the next reading shows slack: growth at once.
	own := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.55, Target: 0.75, Baseline: 0.5}}
	a.Interfere(now.Add(time.Second), 0, own)
	if st := a.Controllers()[0].State; st != "grow" {
		t.Errorf("after a borrowed cut, with slack at the level's own baseline: state %q, want grow", st)
	}
	// A crossing of its own level holds as ever.
	own[0].Value = 0.9
	if c := a.Interfere(now.Add(2*time.Second), 0, own); c == nil || !strings.Contains(c.Reason, "no growth for") {
		t.Fatalf("own-level cut %+v, want a hold", c)
	}
	own[0].Value = 0.5
	a.Interfere(now.Add(3*time.Second), 0, own)
	if st := a.Controllers()[0].State; st != "hold" {
		t.Errorf("within the hold of an own-level cut: state %q, want hold", st)
	}
}

// With FirstHold, a lone crossing holds growth back for FirstHold only; crossings that follow
// within Hold double the hold each time, up to Hold; one after a quiet Hold starts over.
func TestHoldBacksOffOverRepeatedCrossings(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	a.cfg.Control.FirstHold = 2500 * time.Millisecond
	cross := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.3, Target: 0.1}}
	quiet := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.01, Target: 0.1}}
	holdOf := func(at time.Time) time.Duration {
		t.Helper()
		a.Interfere(at, 0, cross)
		return a.Controllers()[0].HeldUntil.Sub(at)
	}
	now := t0.Add(12 * time.Second)
	if h := holdOf(now); h != 2500*time.Millisecond {
		t.Fatalf("a lone crossing holds %v, want 2.5s", h)
	}
	a.Interfere(now.Add(2600*time.Millisecond), 0, quiet)
	if st := a.Controllers()[0].State; st != "grow" {
		t.Fatalf("2.6s after a lone crossing, with slack: state %q, want grow", st)
	}
	// Crossings 3 s apart: each within Hold of the last, so 5s, then 10s, then 10s.
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 10 * time.Second} {
		now = now.Add(3 * time.Second)
		if h := holdOf(now); h != want {
			t.Fatalf("crossing %d within Hold of the last holds %v, want %v", i+2, h, want)
		}
	}
	// Quiet for longer than Hold: the next crossing is a lone one again.
	now = now.Add(11 * time.Second)
	if h := holdOf(now); h != 2500*time.Millisecond {
		t.Errorf("a crossing after a quiet Hold holds %v, want 2.5s", h)
	}
	// Without FirstHold every crossing holds for Hold, as before.
	a.cfg.Control.FirstHold = 0
	now = now.Add(time.Minute)
	if h := holdOf(now); h != 10*time.Second {
		t.Errorf("without FirstHold a crossing holds %v, want Hold, 10s", h)
	}
}

// A baseline measurement that starts inside the hold after a cut does not cancel it: once
// measured, lending still waits out the hold before it grows.
func TestBaselineKeepsTheHoldAfterACut(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	a.cfg.Control.FirstHold = 0 // every crossing holds for Hold
	cross := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.3, Target: 0.1}}
	quiet := []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.01, Target: 0.1}}
	now := t0.Add(12 * time.Second)
	a.Interfere(now, 0, cross)
	heldUntil := a.Controllers()[0].HeldUntil
	if want := now.Add(a.cfg.Control.Hold); !heldUntil.Equal(want) {
		t.Fatalf("held until %v after a cut, want %v", heldUntil, want)
	}
	a.Baseline(now.Add(time.Second), 0, now.Add(3*time.Second))
	a.EndBaseline(now.Add(3*time.Second), 0)
	if got := a.Controllers()[0].HeldUntil; !got.Equal(heldUntil) {
		t.Errorf("after the measurement held until %v, want the cut's %v", got, heldUntil)
	}
	a.Interfere(now.Add(4*time.Second), 0, quiet)
	if st := a.Controllers()[0].State; st != "hold" {
		t.Errorf("inside the cut's hold, with slack: state %q, want hold", st)
	}
	a.Interfere(heldUntil.Add(time.Second), 0, quiet)
	if st := a.Controllers()[0].State; st != "grow" {
		t.Errorf("after the hold, with slack: state %q, want grow", st)
	}
}

// Tiny moves are not changes: no action says "2.5GiB -> 2.5GiB".
func TestNoChangeBelowTheDeadband(t *testing.T) {
	for _, c := range []struct{ cur, target int64 }{{1000, 1020}, {1000, 980}, {1000, 1000}} {
		if next, kind := approach(c.cur, c.target, 250, 50); next != c.cur || kind != "" {
			t.Errorf("approach(%d, %d) = %d %q, want no change", c.cur, c.target, next, kind)
		}
	}
	if next, kind := approach(1000, 1100, 250, 50); next != 1100 || kind != "grow" {
		t.Errorf("approach(1000, 1100) = %d %q", next, kind)
	}
}

// A baseline measurement holds lending at the minimum whatever the slow loop, the spike path
// or the feedback say, then gives back what was lent, unless the usage ceiling fell meanwhile.
func TestBaselineHoldsTheMinimumThenGivesLendingBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := primed(t0)
	now := t0.Add(12 * time.Second)
	c := a.Baseline(now, 0, now.Add(2*time.Second))
	if c == nil || c.Kind != "shrink" || a.Plan().ReclaimedMilliCPU[0] != 100 {
		t.Fatalf("baseline: change %+v, lends %dm, want the minimum", c, a.Plan().ReclaimedMilliCPU[0])
	}
	if v := a.Vouched().ReclaimedMilliCPU[0]; v != 2700 {
		t.Errorf("during the baseline the node vouches for %dm, want what it lent before (2700m)", v)
	}
	if a.Baseline(now, 0, now.Add(time.Second)) != nil {
		t.Error("a second Baseline while one runs changed something")
	}
	// Nothing grows it meanwhile: slow loop, slack on the feedback.
	for i := 0; i < 3; i++ {
		a.Step(sample(t0, 12+i, 1000))
		if a.Interfere(now.Add(time.Duration(i)*time.Second), 0, []Indicator{{Name: "run-queue wait", Value: 0, Target: 1}}) != nil {
			t.Error("the feedback acted during a baseline")
		}
	}
	if got, st := a.Plan().ReclaimedMilliCPU[0], a.Controllers()[0].State; got != 100 || st != StateBaseline {
		t.Fatalf("during the baseline: lends %dm (state %s)", got, st)
	}
	c = a.EndBaseline(now.Add(2*time.Second), 0)
	if c == nil || c.Kind != "grow" || a.Plan().ReclaimedMilliCPU[0] != 2700 {
		t.Fatalf("after the baseline: change %+v, lends %dm, want 2700m back at once", c, a.Plan().ReclaimedMilliCPU[0])
	}
	if a.EndBaseline(now.Add(3*time.Second), 0) != nil {
		t.Error("EndBaseline without a baseline running changed something")
	}

	// Online work rose during the measurement: only what the usage ceiling allows comes back.
	a.Baseline(now.Add(4*time.Second), 0, now.Add(6*time.Second))
	a.Step(sample(t0, 17, 3000))
	a.EndBaseline(now.Add(6*time.Second), 0)
	if got, usage := a.Plan().ReclaimedMilliCPU[0], a.cpuTarget(0, a.limitPeak(0)); got != usage || got >= 2700 {
		t.Errorf("after a rise of online work: lends %dm, want the usage ceiling %dm", got, usage)
	}

	// Metrics went stale meanwhile: lending stays at its minimum.
	a.Baseline(now.Add(7*time.Second), 0, now.Add(9*time.Second))
	a.Reset("metrics stale")
	if c := a.EndBaseline(now.Add(9*time.Second), 0); c != nil || a.Plan().ReclaimedMilliCPU[0] != 100 {
		t.Errorf("stale metrics: change %+v, lends %dm", c, a.Plan().ReclaimedMilliCPU[0])
	}
}

// The limits follow a short window and use a dip within seconds; what the node publishes
// follows the long one and stays down until the peak has left it.
func TestLimitsFollowTheShortWindowPublishingTheLongOne(t *testing.T) {
	cfg := testConfig()
	cfg.PeakWindow, cfg.LimitWindow = 30*time.Second, 3*time.Second
	a := New(cfg)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 12; i++ {
		a.Step(sample(t0, i, 1000))
	}
	// pool 4000 - (1000 x 1.1 + 200) = 2700 by both windows.
	if p, v := a.Plan().ReclaimedMilliCPU[0], a.Vouched().ReclaimedMilliCPU[0]; p != 2700 || v != 2700 {
		t.Fatalf("steady: limits %dm, published %dm, want 2700m both", p, v)
	}
	// A peak of 3000m: both fall at once to 4000 - (3300 + 200) = 500.
	a.Step(sample(t0, 12, 3000))
	if p, v := a.Plan().ReclaimedMilliCPU[0], a.Vouched().ReclaimedMilliCPU[0]; p != 500 || v != 500 {
		t.Fatalf("peak: limits %dm, published %dm, want 500m both", p, v)
	}
	// Back to 1000m: once the peak is older than the limit window the limits grow back a
	// step per pass to 2700; the published figure stays at 500 for the peak window.
	for i := 13; i < 30; i++ {
		a.Step(sample(t0, i, 1000))
	}
	limit, published, _ := a.Ceilings(0)
	if p := a.Plan().ReclaimedMilliCPU[0]; p != 2700 || limit.MilliCPU != 2700 || limit.Window != 3*time.Second {
		t.Errorf("after the peak: limits %dm (ceiling %+v), want 2700m over 3s", p, limit)
	}
	if v := a.Vouched().ReclaimedMilliCPU[0]; v != 500 || published.MilliCPU != 500 || published.PeakMilliCPU != 3000 {
		t.Errorf("after the peak: published %dm (ceiling %+v), want 500m while the 3000m peak is in the 30s window", v, published)
	}
	for i := 30; i < 45; i++ {
		a.Step(sample(t0, i, 1000))
	}
	if v := a.Vouched().ReclaimedMilliCPU[0]; v != 2700 {
		t.Errorf("after the peak window: published %dm, want 2700m", v)
	}
	// Without a limit window both are the peak window's.
	cfg.LimitWindow = 0
	b := New(cfg)
	for i := 0; i < 12; i++ {
		b.Step(sample(t0, i, 1000))
	}
	b.Step(sample(t0, 12, 3000))
	for i := 13; i < 30; i++ {
		b.Step(sample(t0, i, 1000))
	}
	if p := b.Plan().ReclaimedMilliCPU[0]; p != 500 {
		t.Errorf("no limit window: limits %dm after the peak, want 500m for the peak window", p)
	}
}

// primed is an advisor after 12 slow passes of online work using 1000m of its pool from t0
// on, lending up to the usage ceiling.
func primed(t0 time.Time) *Advisor {
	a := New(testConfig())
	for i := 0; i < 12; i++ {
		a.Step(sample(t0, i, 1000))
	}
	return a
}

// LastCut is when lending was last cut for online work's sake: the fast path, the
// interference feedback and CPU pressure count; the slow loop following usage down does not.
func TestLastCutCountsCutsForOnlineWorksSake(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := New(testConfig())
	for i := 0; i < 20; i++ {
		a.Step(sample(t0, i, 500))
	}
	if a.Step(sample(t0, 20, 3000)); !a.LastCut().IsZero() {
		t.Fatalf("the slow loop's shrink counted as a cut at %v", a.LastCut())
	}
	for i := 27; i < 40; i++ {
		a.Step(sample(t0, i, 500))
	}
	for _, c := range []struct {
		name string
		at   time.Time
		cut  func(now time.Time) bool
	}{
		{"spike", t0.Add(41 * time.Second), func(now time.Time) bool {
			return a.Spike(now, 0, SpikeRates{WindowMilli: 2500}) != nil
		}},
		{"interference", t0.Add(42 * time.Second), func(now time.Time) bool {
			return a.Interfere(now, 0, []Indicator{{Name: "run-queue wait", Workload: "web", Value: 0.5, Target: 0.1}}) != nil
		}},
		{"pressure", t0.Add(43 * time.Second), func(now time.Time) bool { return len(a.Pressure(now, "cpu pressure")) > 0 }},
	} {
		if !c.cut(c.at) {
			t.Fatalf("%s: no cut (lends %dm)", c.name, a.Plan().ReclaimedMilliCPU[0])
		}
		if got := a.LastCut(); !got.Equal(c.at) {
			t.Errorf("after the %s cut LastCut = %v, want %v", c.name, got, c.at)
		}
	}
}

// Under the cores mechanism lending is whole cores or the minimum (a grow of less than a core
// would round to nothing, so it grows a core at a time), online work keeps enough cores that
// its peak is at most coreUtilization of them, and a spike over that share cuts.
func TestLendsWholeCores(t *testing.T) {
	a := New(testConfig())
	a.LendWholeCores(1000, 0.5)
	t0 := time.Unix(1000, 0)
	// Online peak 500m: it keeps max(500 x 1.1 + 200, 500 / 0.5) = 1000m of the 4000m pool.
	want := []int64{1000, 2000, 3000, 3000}
	for i, w := range want {
		a.Step(sample(t0, i, 500))
		if got := a.Plan().ReclaimedMilliCPU[0]; got != w {
			t.Fatalf("pass %d lends %dm, want %dm (whole cores from one up)", i+1, got, w)
		}
	}
	if v := a.Vouched().ReclaimedMilliCPU[0]; v != 3000 {
		t.Errorf("vouches for %dm, want 3000m", v)
	}
	// Online kept 1000m: 50% of it (under the 80% spikeThreshold) is where a spike begins.
	if window, _, _ := a.SpikeLimits(0); window != 500 {
		t.Errorf("spike limit %dm, want 500m (coreUtilization of the 1000m kept)", window)
	}
	// 700m: it keeps max(970, 1400) -> 2600m, rounded down to two cores.
	if ch := a.Spike(t0.Add(10*time.Second), 0, SpikeRates{WindowMilli: 700}); ch == nil {
		t.Fatal("a spike over half of what online work kept cut nothing")
	}
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 2000 {
		t.Fatalf("after the spike lends %dm, want 2000m", got)
	}
	// A cut under a core leaves the minimum: a fraction of a core would share it.
	a.Interfere(t0.Add(11*time.Second), 0, []Indicator{{Name: "run-queue wait", Value: 2, Target: 1}})
	a.Interfere(t0.Add(12*time.Second), 0, []Indicator{{Name: "run-queue wait", Value: 2, Target: 1}})
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 100 {
		t.Fatalf("after two cuts by half lends %dm, want the 100m minimum (2000 -> 1000 -> 500 -> 100)", got)
	}
	// Back to millicores.
	a.LendWholeCores(0, 0)
	a.Step(sample(t0, 30, 500))
	if got := a.Plan().ReclaimedMilliCPU[0]; got != 100 {
		t.Errorf("held after a cut, yet lends %dm", got)
	}
	if window, _, _ := a.SpikeLimits(0); window != int64(0.8*3900) {
		t.Errorf("spike limit %dm in millicores, want %dm", window, int64(0.8*3900))
	}
}

// A usage ceiling says which rule set it, so that status can show a true equation: the
// minimum when online work keeps more than the pool, and under whole cores the peak over the
// core utilization when that keeps more than the margins.
func TestCeilingSaysWhatSetIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := New(testConfig())
	a.Step(sample(t0, 0, 1000))
	if u, _, _ := a.Ceilings(0); u.AtMinimum || u.CoresMilliCPU != 0 || u.MilliCPU != 4000-1300 {
		t.Errorf("1000m online: %+v, want 2700m by the margins", u)
	}
	a.Step(sample(t0, 1, 4000))
	if u, _, _ := a.Ceilings(0); !u.AtMinimum || u.MilliCPU != 100 || u.PredictedMilliCPU != 4600 {
		t.Errorf("4000m online: %+v, want the 100m minimum over a predicted 4600m", u)
	}
	b := New(testConfig())
	b.LendWholeCores(1000, 0.5)
	b.Step(sample(t0, 0, 1000))
	if u, _, _ := b.Ceilings(0); u.AtMinimum || u.CoresMilliCPU != 2000 || u.MilliCPU != 2000 {
		t.Errorf("1000m online in whole cores at 0.5: %+v, want 2000m kept by the cores rule", u)
	}
}
