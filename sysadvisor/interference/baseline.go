package interference

import (
	"math"
	"slices"
	"time"
)

// Baselines learns each online workload's own run-queue wait with nothing lent, per load
// level. One absolute target cannot fit every workload: a Go server whose runtime keeps more
// threads runnable than it has CPUs waits 0.3 per unit of CPU run alone, nginx 0.05. Nor does
// one baseline fit every hour of one workload: its threads wait on each other more the more
// CPU it runs, and a baseline taken while it idled set a target it could not meet at its
// peak with nothing lent at all, which held lending at its minimum for the rest of the day.
//
// So a baseline belongs to a load level (how much CPU the workload ran, in half-octave steps),
// and every reading taken while the node lent its minimum teaches the level it was taken at:
// a crossing that cutting lending cannot cure is itself the measurement of that level's
// floor. A workload with no baseline at any level gets one from a short measurement: the
// caller holds lending at its minimum while Measuring.
//
// It is pure logic over one figure per reading (the agent keeps one for the wait ratio and one
// for SLO probes' latency in seconds): the caller tells which readings were taken with nothing
// lent. It is not safe for concurrent use; the interference loop owns it.
type Baselines struct {
	measureFor, every time.Duration
	readings          int // kept per level (levelReadings unless WithReadings)

	levels map[string]map[int][]float64 // workload -> level -> its latest readings with nothing lent
	until  time.Time                    // the measurement running ends then; zero: none runs
	last   time.Time                    // when the last measurement ended
}

// minReadings a level needs for a baseline: one reading can be a fluke.
const minReadings = 2

// levelReadings: a level's baseline is the median of its latest this many readings, so it
// follows a workload that changes (a new version, a different mix of requests).
const levelReadings = 5

// spacing is the least time between the ends of two measurements, in measurements: lending at
// its minimum for at most about a tenth of the time while workloads without a baseline come
// and go.
const spacing = 10

// NewBaselines measures for measureFor at a time (0: never), again every every (0: only for
// workloads that have no baseline).
func NewBaselines(measureFor, every time.Duration) *Baselines {
	return &Baselines{measureFor: measureFor, every: every, readings: levelReadings, levels: map[string]map[int][]float64{}}
}

// WithReadings keeps the latest n readings per level instead of levelReadings: for figures
// read one at a time (each answer of an SLO probe), whose tail as well as their median the
// caller asks about (Share). It returns b.
func (b *Baselines) WithReadings(n int) *Baselines {
	b.readings = max(n, minReadings)
	return b
}

// level is the load level of a reading of runMilli millicores: half-octaves from 10m, so a
// level spans about 1.4x and a 2-CPU node has about a dozen.
func level(runMilli int64) int {
	return int(math.Floor(2 * math.Log2(float64(max(runMilli, 10))/10)))
}

// Of is workload name's baseline for a reading of runMilli: its level's, or else the nearest
// level's (the lower one on a tie: a lighter load's floor is the stricter; borrowed true), if
// any is known.
func (b *Baselines) Of(name string, runMilli int64) (baseline float64, borrowed, ok bool) {
	rs, borrowed, ok := b.nearest(name, runMilli)
	if !ok {
		return 0, false, false
	}
	return median(rs), borrowed, true
}

// Share is the share of the readings behind Of's baseline that were above limit, and how many
// readings that is: how often the workload's figure was over limit with nothing lent.
func (b *Baselines) Share(name string, runMilli int64, limit float64) (share float64, readings int, ok bool) {
	rs, _, ok := b.nearest(name, runMilli)
	if !ok {
		return 0, 0, false
	}
	over := 0
	for _, r := range rs {
		if r > limit {
			over++
		}
	}
	return float64(over) / float64(len(rs)), len(rs), true
}

// nearest is the readings of runMilli's level, or else of the nearest level that has enough.
func (b *Baselines) nearest(name string, runMilli int64) (readings []float64, borrowed, ok bool) {
	want := level(runMilli)
	best, found := 0, false
	for l, rs := range b.levels[name] {
		if len(rs) < minReadings {
			continue
		}
		d, bd := abs(l-want), abs(best-want)
		if !found || d < bd || d == bd && l < best {
			best, found = l, true
		}
	}
	if !found {
		return nil, false, false
	}
	return b.levels[name][best], best != want, true
}

func abs(x int) int { return max(x, -x) }

func median(rs []float64) float64 {
	s := slices.Sorted(slices.Values(rs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return m
}

// Measuring says whether a measurement runs: lending must stay at its minimum.
func (b *Baselines) Measuring() bool { return !b.until.IsZero() }

// Due says whether a measurement should start now: a workload in active (those that ran
// enough CPU for a reading and are judged against a baseline) has none yet and the last
// measurement is long enough ago, or the baselines are older than every.
func (b *Baselines) Due(now time.Time, active []string) bool {
	if b.measureFor <= 0 || b.Measuring() || len(active) == 0 {
		return false
	}
	if b.last.IsZero() {
		return slices.ContainsFunc(active, b.missing)
	}
	since := now.Sub(b.last)
	return b.every > 0 && since >= b.every ||
		since >= spacing*b.measureFor && slices.ContainsFunc(active, b.missing)
}

func (b *Baselines) missing(name string) bool {
	for _, rs := range b.levels[name] {
		if len(rs) >= minReadings {
			return false
		}
	}
	return true
}

// Start begins a measurement at now and returns when it ends.
func (b *Baselines) Start(now time.Time) time.Time {
	b.until = now.Add(b.measureFor)
	return b.until
}

// AddUnlent records workload name's figure (its run-queue wait ratio), read over an interval
// in which it ran runMilli and the node lent its minimum throughout.
func (b *Baselines) AddUnlent(name string, runMilli int64, value float64) {
	if b.levels[name] == nil {
		b.levels[name] = map[int][]float64{}
	}
	l := level(runMilli)
	rs := append(b.levels[name][l], value)
	b.levels[name][l] = rs[max(len(rs)-b.readings, 0):]
}

// Finish ends the measurement once its time is up (done false before).
func (b *Baselines) Finish(now time.Time) (done bool) {
	if !b.Measuring() || now.Before(b.until) {
		return false
	}
	b.until, b.last = time.Time{}, now
	return true
}

// Keep forgets the baselines of workloads not in names (gone, or no longer online).
func (b *Baselines) Keep(names map[string]bool) {
	for name := range b.levels {
		if !names[name] {
			delete(b.levels, name)
		}
	}
}
