package spikewatch

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/rate"
)

// counter is a file in a counter's format, written as a cgroup's would be: the whole value
// at offset 0, so the thread's pread sees the old value or the new one.
type counter struct {
	f      *os.File
	format string        // of the file, with the value's verb
	unit   time.Duration // of the value
}

// The two formats a counter has: cgroup v1's cpuacct.usage and v2's cpu.stat.
var (
	v1 = counter{format: "%020d\n", unit: time.Nanosecond}
	v2 = counter{format: "usage_usec %020d\nuser_usec 0\nsystem_usec 0\n", unit: time.Microsecond}
)

func newCounter(t *testing.T, name string, kind counter) *counter {
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c := &counter{f: f, format: kind.format, unit: kind.unit}
	c.set(0)
	return c
}

func (c *counter) set(d time.Duration) {
	if _, err := c.f.WriteAt(fmt.Appendf(nil, c.format, d/c.unit), 0); err != nil {
		panic(err)
	}
}

func start(t *testing.T, cfg Config) *Watch {
	w, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

var quick = Config{Interval: 5 * time.Millisecond, Window: 20 * time.Millisecond, Burst: 5 * time.Millisecond, SlowTicks: 10}

// feed advances the counters' sum at rate millicores for d, in small steps, as a cgroup's
// counter grows while its tasks run.
func feed(plus *counter, from time.Duration, milli int64, d time.Duration) time.Duration {
	used := from
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Millisecond)
		used += time.Duration(milli) * time.Millisecond / 1000
		plus.set(used)
	}
	return used
}

// A sum growing at 1.5 cores crosses a window limit of 1000m and is reported with its rate,
// in cgroup v1's format (nanoseconds) and v2's (cpu.stat's usage_usec line); under the limit
// nothing is reported.
func TestCrossingsOfBothFormats(t *testing.T) {
	for name, kind := range map[string]counter{"v1": v1, "v2": v2} {
		t.Run(name, func(t *testing.T) {
			plus := newCounter(t, "plus", kind)
			w := start(t, quick)
			w.SetCounters(Counters{Plus: []string{plus.f.Name()}})
			w.SetLimits(Limits{WindowMilli: 1000, BurstMilli: Never})
			used := feed(plus, 0, 500, 200*time.Millisecond)
			select {
			case c := <-w.Crossings():
				t.Fatalf("a crossing at half a core against a limit of 1000m: %+v", c)
			default:
			}
			feed(plus, used, 1500, 200*time.Millisecond)
			select {
			case c := <-w.Crossings():
				if c.WindowMilli < 1000 || c.WindowMilli > 2500 || time.Since(c.At) > time.Second {
					t.Errorf("crossing %+v, want about 1500m just now", c)
				}
			case <-time.After(time.Second):
				t.Fatal("no crossing at 1.5 cores against a limit of 1000m")
			}
		})
	}
}

// feedBoth advances plus and minus at their rates for d.
func feedBoth(plus, minus *counter, p, m *time.Duration, plusMilli, minusMilli int64, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Millisecond)
		*p += time.Duration(plusMilli) * time.Millisecond / 1000
		*m += time.Duration(minusMilli) * time.Millisecond / 1000
		plus.set(*p)
		if minus != nil {
			minus.set(*m)
		}
	}
}

func noCrossing(t *testing.T, w *Watch, why string) {
	t.Helper()
	select {
	case c := <-w.Crossings():
		t.Fatalf("%s: a crossing %+v", why, c)
	default:
	}
}

// A minus counter is taken away from the sum. When it fails (its cgroup went: the parent's
// counter keeps what it used, so the sum would jump by all of it), it is dropped and the window
// starts over: no false spike, and the watch says it is stale until the counters are set again.
func TestAMinusCounterThatGoesIsDroppedWithoutAFalseSpike(t *testing.T) {
	plus, minus := newCounter(t, "kubepods", v1), newCounter(t, "reclaimed-pod", v1)
	w := start(t, quick)
	w.SetCounters(Counters{Plus: []string{plus.f.Name()}, Minus: []string{minus.f.Name()}})
	w.SetLimits(Limits{WindowMilli: 1000, BurstMilli: 1000})
	p, m := 100*time.Second, 90*time.Second // the pod has used 90 s so far
	feedBoth(plus, minus, &p, &m, 1600, 900, 200*time.Millisecond)
	noCrossing(t, w, "1600m less 900m against a limit of 1000m")
	if w.Stale() {
		t.Fatal("stale before any counter failed")
	}
	if err := minus.f.Truncate(0); err != nil { // a read of it now finds nothing
		t.Fatal(err)
	}
	feedBoth(plus, nil, &p, &m, 700, 0, 200*time.Millisecond)
	noCrossing(t, w, "the pod's 90 s left the sum")
	if !w.Stale() {
		t.Error("not stale after a counter failed")
	}
	w.SetCounters(Counters{Plus: []string{plus.f.Name()}})
	if w.Stale() {
		t.Error("still stale after the counters were set again")
	}
}

// A plus counter that fails (or cannot be opened) fails every reading: nothing is reported
// from a sum that lacks part of online work, and the watch says it is stale.
func TestAPlusCounterThatFailsFailsTheReading(t *testing.T) {
	plus := newCounter(t, "shared", v2)
	w := start(t, quick)
	w.SetCounters(Counters{Plus: []string{plus.f.Name(), filepath.Join(t.TempDir(), "missing")}})
	w.SetLimits(Limits{WindowMilli: 0, BurstMilli: 0})
	var p, m time.Duration
	feedBoth(plus, nil, &p, &m, 2000, 0, 100*time.Millisecond)
	noCrossing(t, w, "one plus counter missing")
	if !w.Stale() {
		t.Error("not stale with a plus counter missing")
	}
}

// Stop ends the thread and closes Crossings.
func TestStopClosesCrossings(t *testing.T) {
	w, err := Start(quick)
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	select {
	case _, open := <-w.Crossings():
		if open {
			t.Error("a crossing after Stop")
		}
	case <-time.After(time.Second):
		t.Error("Crossings still open after Stop")
	}
}

// The agent's other loops may still set limits and counters while it shuts down: after Stop
// every call does nothing (the native watch is freed), from any goroutine.
func TestCallsAfterStopDoNothing(t *testing.T) {
	plus := newCounter(t, "shared", v1)
	w, err := Start(quick)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.SetLimits(Limits{WindowMilli: 500, BurstMilli: 900})
			w.SetCounters(Counters{Plus: []string{plus.f.Name()}})
			_ = w.Stale()
		}
	})
	time.Sleep(20 * time.Millisecond)
	w.Stop()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	w.Stop()
	if w.Stale() {
		t.Error("a stopped watch reads as stale")
	}
}

// While Slow, the watch reads once every SlowTicks intervals; going back to fast (lending just
// grew) cuts the slow tick short, so a spike right after is seen in fast ticks, not after
// the rest of a slow one (here 5 s).
func TestLeavingSlowCutsTheSlowTickShort(t *testing.T) {
	plus := newCounter(t, "shared", v1)
	slow := quick
	slow.SlowTicks = 1000
	w := start(t, slow)
	w.SetCounters(Counters{Plus: []string{plus.f.Name()}})
	w.SetLimits(Limits{WindowMilli: 1000, BurstMilli: Never, Slow: true})
	time.Sleep(50 * time.Millisecond) // the thread is asleep in its slow tick
	w.SetLimits(Limits{WindowMilli: 1000, BurstMilli: Never})
	var p, m time.Duration
	began := time.Now()
	fed := make(chan struct{})
	go func() { defer close(fed); feedBoth(plus, nil, &p, &m, 1500, 0, 600*time.Millisecond) }()
	defer func() { <-fed }()
	select {
	case <-w.Crossings():
		if took := time.Since(began); took > 500*time.Millisecond {
			t.Errorf("the crossing came %v after leaving slow", took)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no crossing within 2 s of leaving a 5 s slow tick")
	}
}

// The thread's window (C) gives the rates sysadvisor/rate's Window gives the Go side, reading
// for reading: over random series with jittered ticks, idle stretches and bursts, and counters
// that go back.
func TestTheThreadsWindowIsRatesWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for series := 0; series < 200; series++ {
		interval := time.Duration(1+rng.IntN(20)) * time.Millisecond
		length := interval * time.Duration(1+rng.IntN(5))
		burst := time.Duration(0)
		if rng.IntN(3) > 0 {
			burst = interval + time.Duration(rng.Int64N(int64(length-interval)+1))
		}
		c, g := newWindow(interval, length, burst), rate.NewWindow(length)
		origin := time.Unix(1000, 0)
		var now, used time.Duration
		for reading := 0; reading < 100; reading++ {
			now += interval + time.Duration(rng.Int64N(int64(interval)/2)) - interval/4
			switch rng.IntN(10) {
			case 0: // the counter went back (a cgroup re-created)
				used /= 2
			case 1, 2: // idle
			default:
				used += time.Duration(rng.Int64N(int64(3 * interval)))
			}
			cm, cb, cok := c.add(now, used)
			gm, gok := g.Add(origin.Add(now), used)
			var gb int64
			if gok && burst > 0 {
				gb, _ = g.Over(burst)
			}
			if cok != gok || cm != gm || (cok && cb != gb) {
				c.free()
				t.Fatalf("series %d (interval %v, window %v, burst %v), reading %d at %v: C %d/%d/%v, Go %d/%d/%v",
					series, interval, length, burst, reading, now, cm, cb, cok, gm, gb, gok)
			}
		}
		c.free()
	}
}
