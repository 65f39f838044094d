package interference

import (
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestBaselinesMeasureMissingOnesThenRefresh(t *testing.T) {
	b := NewBaselines(2*time.Second, 10*time.Minute)
	t0 := time.Unix(1000, 0)
	if b.Due(t0, nil) {
		t.Fatal("due with no active workload")
	}
	if !b.Due(t0, []string{"web"}) {
		t.Fatal("not due for a workload without a baseline")
	}
	until := b.Start(t0)
	if !b.Measuring() || until != t0.Add(2*time.Second) || b.Due(t0, []string{"web"}) {
		t.Fatalf("start: measuring %v until %s", b.Measuring(), until)
	}
	for _, v := range []float64{0.30, 0.90, 0.34, 0.32} {
		b.AddUnlent("web", 300, v)
	}
	b.AddUnlent("api", 300, 0.05) // one reading only
	if b.Finish(t0.Add(time.Second)) {
		t.Fatal("finished before its time")
	}
	if !b.Finish(until) || b.Measuring() {
		t.Fatal("did not finish at its time")
	}
	if v, _, ok := b.Of("web", 300); !ok || !near(v, 0.33) {
		t.Errorf("Of(web) = %v %v, want the median 0.33", v, ok)
	}
	if _, _, ok := b.Of("api", 300); ok {
		t.Error("api got a baseline from one reading")
	}
	// api still has none: measured again, but not before 10 measurements' time.
	if b.Due(until.Add(19*time.Second), []string{"web", "api"}) {
		t.Error("due again within the spacing")
	}
	if !b.Due(until.Add(20*time.Second), []string{"web", "api"}) {
		t.Error("not due after the spacing for a workload without a baseline")
	}
	if b.Due(until.Add(time.Minute), []string{"web"}) {
		t.Error("due with every active baseline fresh")
	}
	if !b.Due(until.Add(10*time.Minute), []string{"web"}) {
		t.Error("not due after every")
	}
	b.Keep(map[string]bool{"api": true})
	if _, _, ok := b.Of("web", 300); ok {
		t.Error("kept the baseline of a workload that went away")
	}
}

// A baseline taken while a server idled must not hold its busy hours to the idle floor: each
// load level learns its own from readings with nothing lent, and a level not yet seen borrows
// the nearest one's.
func TestBaselinesFollowTheLoadLevel(t *testing.T) {
	b := NewBaselines(2*time.Second, 0)
	b.AddUnlent("web", 40, 0.08) // warm-up: a few health checks
	b.AddUnlent("web", 45, 0.10)
	if v, borrowed, ok := b.Of("web", 1200); !ok || !borrowed || !near(v, 0.09) {
		t.Fatalf("a level not seen yet: %v borrowed %v %v, want the nearest level's 0.09, borrowed", v, borrowed, ok)
	}
	// At its peak with nothing lent, its threads wait on each other far more.
	b.AddUnlent("web", 1150, 0.60)
	b.AddUnlent("web", 1250, 0.70)
	if v, borrowed, _ := b.Of("web", 1200); !near(v, 0.65) || borrowed {
		t.Errorf("peak level: %v borrowed %v, want its own 0.65", v, borrowed)
	}
	if v, _, _ := b.Of("web", 40); !near(v, 0.09) {
		t.Errorf("idle level after the peak was learned: %v, want 0.09 still", v)
	}
	// Between the two, the nearer level's.
	if v, _, _ := b.Of("web", 150); !near(v, 0.09) {
		t.Errorf("150m: %v, want the idle level's 0.09", v)
	}
	if v, _, _ := b.Of("web", 800); !near(v, 0.65) {
		t.Errorf("800m: %v, want the peak level's 0.65", v)
	}
	// A level keeps only its latest readings: a workload that changed is followed.
	for range levelReadings {
		b.AddUnlent("web", 1200, 0.30)
	}
	if v, _, _ := b.Of("web", 1200); !near(v, 0.30) {
		t.Errorf("peak level after %d new readings: %v, want 0.30", levelReadings, v)
	}
	// Learned outside any measurement, so no measurement is due for it.
	if b.Due(time.Unix(1000, 0), []string{"web"}) {
		t.Error("due for a workload with baselines")
	}
}

func TestBaselinesOff(t *testing.T) {
	b := NewBaselines(0, time.Minute)
	if b.Due(time.Unix(1000, 0), []string{"web"}) {
		t.Error("due with measurements off")
	}
}

// Kept one answer at a time, a level's readings tell their tail as well as their median: the
// share of them over a limit, of the latest WithReadings, at the level Of would use.
func TestBaselinesShareOverALimit(t *testing.T) {
	b := NewBaselines(0, 0).WithReadings(4)
	if _, _, ok := b.Share("api", 300, 0.005); ok {
		t.Fatal("a share before any reading")
	}
	for _, v := range []float64{0.009, 0.002, 0.003, 0.006, 0.004} { // the first falls out
		b.AddUnlent("api", 300, v)
	}
	if v, _, _ := b.Of("api", 300); !near(v, 0.0035) {
		t.Errorf("median of the latest 4: %v, want 0.0035", v)
	}
	if share, n, ok := b.Share("api", 300, 0.005); !ok || n != 4 || !near(share, 0.25) {
		t.Errorf("share over 5ms = %v of %d (%v); want 0.25 of 4", share, n, ok)
	}
	// Another load borrows the nearest level's readings, as Of does.
	if share, n, _ := b.Share("api", 2000, 0.0035); n != 4 || !near(share, 0.5) {
		t.Errorf("borrowed share over 3.5ms = %v of %d; want 0.5 of 4", share, n)
	}
}
