package threadtick

import (
	"testing"
	"time"
)

func TestSleepKeepsThePeriodWithoutCatchingUp(t *testing.T) {
	p := Start()
	defer p.Stop()
	const period = 5 * time.Millisecond
	start := time.Now()
	for range 20 {
		p.Sleep(period)
	}
	if got := time.Since(start); got < 20*period {
		t.Fatalf("20 sleeps of %v took %v, want at least %v", period, got, 20*period)
	}
	// Fall behind by several periods: the next sleep still waits a whole period, rather
	// than returning at once for each deadline missed.
	time.Sleep(10 * period)
	before := time.Now()
	p.Sleep(period)
	p.Sleep(period)
	if got := time.Since(before); got < 2*period {
		t.Fatalf("two sleeps after falling behind took %v, want at least %v (no catch-up burst)", got, 2*period)
	}
}
