package interference

import (
	"testing"
	"time"
)

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
		b.Add("web", v)
	}
	b.Add("api", 0.05) // one reading only
	if _, done := b.Finish(t0.Add(time.Second)); done {
		t.Fatal("finished before its time")
	}
	measured, done := b.Finish(until)
	if !done || b.Measuring() || len(measured) != 1 || measured["web"] != 0.33 {
		t.Fatalf("finish: %v %v (want web's median 0.33 only)", measured, done)
	}
	if v, ok := b.Of("web"); !ok || v != 0.33 {
		t.Errorf("Of(web) = %v %v", v, ok)
	}
	if _, ok := b.Of("api"); ok {
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
	if _, ok := b.Of("web"); ok {
		t.Error("kept the baseline of a workload that went away")
	}
	// A reading outside a measurement counts for nothing.
	b.Add("web", 5)
	if _, ok := b.Of("web"); ok {
		t.Error("Add outside a measurement")
	}
}

func TestBaselinesOff(t *testing.T) {
	b := NewBaselines(0, time.Minute)
	if b.Due(time.Unix(1000, 0), []string{"web"}) {
		t.Error("due with measurements off")
	}
}
