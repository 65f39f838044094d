// Package spikewatch watches the CPU time online work uses for a spike: every interval it reads
// a sum of cgroup CPU counters (some added, some taken away), keeps the sum's rate over a
// window and over a shorter burst window, and reports a Crossing when either rate passes the
// limit its owner set. Its owner decides what a crossing means; spikewatch only notices it.
//
// Why a package of its own, and why C: the watch ticks a hundred times a second, and on a VM
// each wake-up costs far more than the reads it does. The watch runs on a native thread outside
// the Go runtime and wakes Go only on a crossing, so a tick costs one context switch; the same
// loop on a locked Go thread cost three, and the agent 1.5-2% of a core more
// (docs/benchmark.md#agent-cpu). The agent needs cgo anyway (NVML).
package spikewatch

import (
	"math"
	"os"
	"time"
)

// Config is fixed for the watch's lifetime.
type Config struct {
	Interval time.Duration // between two readings
	Window   time.Duration // the rate a crossing compares with Limits.WindowMilli
	Burst    time.Duration // the shorter one for Limits.BurstMilli (0: none)
	// SlowTicks: while Limits.Slow, read only every SlowTicks intervals.
	SlowTicks int
}

// Limits say what a crossing is: the window's rate above WindowMilli, or the burst's above
// BurstMilli (millicores). Slow ticks less often, while nothing could be cut anyway.
type Limits struct {
	WindowMilli, BurstMilli int64
	Slow                    bool
}

// Never is a limit no rate crosses.
const Never = math.MaxInt64

// Crossing is a reading whose rates passed a limit.
type Crossing struct {
	WindowMilli, BurstMilli int64
	At                      time.Time     // when the counters were read
	Late                    time.Duration // how late the tick that read them woke
}

// Counter files: paths of cgroup CPU counters, cpuacct.usage (nanoseconds) on cgroup v1 or
// cpu.stat (its usage_usec line) on v2. Plus are added, Minus taken away.
type Counters struct {
	Plus, Minus []string
}

// Crossings delivers the crossings; a crossing found while the previous one still waits to
// be received is dropped (the next reading brings a fresher one). Closed after Stop.
func (w *Watch) Crossings() <-chan Crossing { return w.crossings }

// deliver hands a crossing over without ever blocking the watch.
func (w *Watch) deliver(c Crossing) {
	select {
	case w.crossings <- c:
	default:
	}
}

// openAll opens the counter files, plus then minus; nil where one cannot be opened.
func openAll(c Counters) []*os.File {
	var files []*os.File
	for _, path := range append(append([]string(nil), c.Plus...), c.Minus...) {
		f, err := os.Open(path)
		if err != nil {
			f = nil
		}
		files = append(files, f)
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
