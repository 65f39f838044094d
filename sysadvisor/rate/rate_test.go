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
