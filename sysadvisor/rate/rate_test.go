package rate

import (
	"testing"
	"time"
)

func TestWindowRate(t *testing.T) {
	w := NewWindow(30 * time.Millisecond)
	t0 := time.Unix(0, 0)
	if _, ok := w.Add(t0, 0); ok {
		t.Fatal("rate before the window is covered")
	}
	var milli int64
	var ok bool
	for i := 1; i <= 6; i++ {
		// 1.5 cores: 15ms of CPU every 10ms.
		milli, ok = w.Add(t0.Add(time.Duration(i)*10*time.Millisecond), time.Duration(i)*15*time.Millisecond)
	}
	if !ok || milli != 1500 {
		t.Fatalf("rate = %d (%v), want 1500", milli, ok)
	}
	if len(w.t) > 5 {
		t.Errorf("window keeps %d points, want only those covering 30ms", len(w.t))
	}
}

func TestOverIsTheRateOfTheNewestSpan(t *testing.T) {
	w := NewWindow(30 * time.Millisecond)
	t0 := time.Unix(0, 0)
	if _, ok := w.Over(10 * time.Millisecond); ok {
		t.Fatal("a rate from no readings")
	}
	// Idle for 30ms, then 2 cores for the last 10ms: 20ms of CPU in 10ms.
	used := time.Duration(0)
	for i := 0; i <= 4; i++ {
		if i == 4 {
			used += 20 * time.Millisecond
		}
		w.Add(t0.Add(time.Duration(i)*10*time.Millisecond), used)
	}
	if milli, ok := w.Over(10 * time.Millisecond); !ok || milli != 2000 {
		t.Fatalf("rate over the last 10ms = %d (%v), want 2000", milli, ok)
	}
	if milli, ok := w.Over(20 * time.Millisecond); !ok || milli != 1000 {
		t.Fatalf("rate over the last 20ms = %d (%v), want 1000", milli, ok)
	}
	// A reading a little early still makes a span of about 10ms, not one of 20ms.
	w.Add(t0.Add(49*time.Millisecond), used+9*time.Millisecond)
	if milli, ok := w.Over(10 * time.Millisecond); !ok || milli != 1000 {
		t.Fatalf("rate over the last 9ms = %d (%v), want 1000", milli, ok)
	}
}
