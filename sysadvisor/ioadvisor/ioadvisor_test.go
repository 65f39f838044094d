package ioadvisor

import (
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

func cfg() Config {
	return Config{FloorBps: 8 * mib, FloorIOPS: 100, MarginRatio: 0.25, GrowStepRatio: 0.1,
		PeakWindow: 30 * time.Second, PressureThreshold: 20, LatencyThreshold: 50 * time.Millisecond, Hold: 10 * time.Second}
}

func vda() Disk {
	return Disk{Device: "254:0", Name: "vda", Capacity: Rates{0, 200 * mib, 0, 2000}}
}

func TestGrowsByStepToCapacityLessOnlineAndMargin(t *testing.T) {
	a := New(cfg(), []Disk{vda()})
	t0 := time.Unix(1000, 0)
	online := Sample{Online: Rates{0, 40 * mib, 0, 400}}
	for i := 0; i < 30; i++ {
		a.Observe(t0.Add(time.Duration(i)*time.Second), map[string]Sample{"254:0": online}, true)
	}
	got := a.Lent()[0]
	// 200 - 40*1.25 = 150 MiB/s; 2000 - 400*1.25 = 1500 IOs/s.
	if got.Rates[1] != 150*mib || got.Rates[3] != 1500 {
		t.Errorf("lent %v, want write 150MiB/s and 1500 IOs/s", got.Rates)
	}
	// Unknown capacity (reads): the floor only.
	if got.Rates[0] != 8*mib || got.Rates[2] != 100 {
		t.Errorf("reads lent %v, want the floor", got.Rates)
	}
}

func TestGrowthIsOneStepAtATime(t *testing.T) {
	a := New(cfg(), []Disk{vda()})
	a.Observe(time.Unix(1000, 0), map[string]Sample{"254:0": {}}, true)
	if w := a.Lent()[0].Rates[1]; w != 8*mib+20*mib {
		t.Errorf("after one grow: %d MiB/s, want floor + one step (28)", w/mib)
	}
	a.Observe(time.Unix(1001, 0), map[string]Sample{"254:0": {}}, false)
	if w := a.Lent()[0].Rates[1]; w != 28*mib {
		t.Errorf("grew without a grow tick: %d MiB/s", w/mib)
	}
}

func TestShrinksAtOnceWhenOnlineUseRises(t *testing.T) {
	a := New(cfg(), []Disk{vda()})
	t0 := time.Unix(1000, 0)
	for i := 0; i < 20; i++ {
		a.Observe(t0.Add(time.Duration(i)*time.Second), map[string]Sample{"254:0": {}}, true)
	}
	a.Observe(t0.Add(21*time.Second), map[string]Sample{"254:0": {Online: Rates{0, 120 * mib}}}, false)
	if w := a.Lent()[0].Rates[1]; w != 50*mib {
		t.Errorf("after online rose to 120MiB/s: lent %d MiB/s, want 50", w/mib)
	}
}

func TestPressureAndLatencyCutToTheFloorAndHold(t *testing.T) {
	for _, signal := range []string{"pressure", "latency"} {
		a := New(cfg(), []Disk{vda()})
		t0 := time.Unix(1000, 0)
		for i := 0; i < 20; i++ {
			a.Observe(t0.Add(time.Duration(i)*time.Second), map[string]Sample{"254:0": {}}, true)
		}
		now := t0.Add(20 * time.Second)
		if signal == "pressure" {
			if a.Pressure(now, 10) {
				t.Fatal("pressure under the threshold cut lending")
			}
			if !a.Pressure(now, 35) {
				t.Fatal("pressure over the threshold did not cut")
			}
		} else if !a.Observe(now, map[string]Sample{"254:0": {Latency: 80 * time.Millisecond}}, true) {
			t.Fatal("latency over the threshold did not cut")
		}
		l := a.Lent()[0]
		if l.Rates != a.floor() || !strings.Contains(l.Rule, signal) {
			t.Errorf("%s: lent %v (%s), want the floor", signal, l.Rates, l.Rule)
		}
		// Held: no growth for Hold after the cut.
		a.Observe(now.Add(5*time.Second), map[string]Sample{"254:0": {}}, true)
		if a.Lent()[0].Rates != a.floor() {
			t.Errorf("%s: grew while held", signal)
		}
		a.Observe(now.Add(11*time.Second), map[string]Sample{"254:0": {}}, true)
		if a.Lent()[0].Rates == a.floor() {
			t.Errorf("%s: did not grow after the hold", signal)
		}
	}
}

func TestStaleOrMissingFiguresLendTheFloor(t *testing.T) {
	a := New(cfg(), []Disk{vda()})
	a.Observe(time.Unix(1000, 0), map[string]Sample{"254:0": {}}, true)
	if !a.Stale("diskstats unreadable") || a.Lent()[0].Rates != a.floor() {
		t.Errorf("stale: lent %v", a.Lent()[0].Rates)
	}
	a.Observe(time.Unix(1001, 0), map[string]Sample{"254:0": {}}, true)
	a.Observe(time.Unix(1002, 0), map[string]Sample{}, true)
	if a.Lent()[0].Rates != a.floor() {
		t.Errorf("missing disk: lent %v", a.Lent()[0].Rates)
	}
}

func TestSmallMovesOfOnlineUseDoNotShrink(t *testing.T) {
	a := New(cfg(), []Disk{vda()})
	t0 := time.Unix(1000, 0)
	for i := 0; i < 20; i++ {
		a.Observe(t0.Add(time.Duration(i)*time.Second), map[string]Sample{"254:0": {Online: Rates{0, 40 * mib}}}, true)
	}
	// 150 MiB/s lent; online rises by 4 MiB/s (5 MiB/s with the margin, under 200/32).
	if a.Observe(t0.Add(21*time.Second), map[string]Sample{"254:0": {Online: Rates{0, 44 * mib}}}, false) {
		t.Errorf("a small rise of online use shrank lending to %d MiB/s", a.Lent()[0].Rates[1]/mib)
	}
}
