package agent

import (
	"testing"
	"time"
)

func TestFastWindowRate(t *testing.T) {
	f := newFastWindow(30 * time.Millisecond)
	t0 := time.Unix(0, 0)
	if _, ok := f.add(t0, 0); ok {
		t.Fatal("rate before the window is covered")
	}
	var rate int64
	var ok bool
	for i := 1; i <= 6; i++ {
		// 1.5 cores: 15ms of CPU every 10ms.
		rate, ok = f.add(t0.Add(time.Duration(i)*10*time.Millisecond), time.Duration(i)*15*time.Millisecond)
	}
	if !ok || rate != 1500 {
		t.Fatalf("rate = %d (%v), want 1500", rate, ok)
	}
	if len(f.t) > 5 {
		t.Errorf("window keeps %d points, want only those covering 30ms", len(f.t))
	}
}
