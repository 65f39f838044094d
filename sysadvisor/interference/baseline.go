package interference

import (
	"slices"
	"time"
)

// Baselines learns each online workload's own run-queue wait with nothing lent. One absolute
// target cannot fit every workload: a Go server whose runtime keeps more threads runnable than
// it has CPUs waits 0.3 per unit of CPU run alone, nginx 0.05. So the agent holds lending at
// its minimum for a short measurement, and each workload's median reading in it becomes its
// baseline, which its target may be relative to.
//
// It is pure logic: the caller holds lending down while Measuring and feeds it readings. It
// is not safe for concurrent use; the interference loop owns it.
type Baselines struct {
	measureFor, every time.Duration

	wait     map[string]float64
	readings map[string][]float64
	until    time.Time // the measurement running ends then; zero: none runs
	last     time.Time // when the last measurement ended
}

// minReadings a workload needs in a measurement for a baseline: one reading can be a fluke.
const minReadings = 2

// spacing is the least time between the ends of two measurements, in measurements: lending at
// its minimum for at most about a tenth of the time while workloads without a baseline come
// and go.
const spacing = 10

// NewBaselines measures for measureFor at a time (0: never), again every every (0: only for
// workloads that have no baseline).
func NewBaselines(measureFor, every time.Duration) *Baselines {
	return &Baselines{measureFor: measureFor, every: every, wait: map[string]float64{}}
}

// Of is workload name's baseline, if measured.
func (b *Baselines) Of(name string) (float64, bool) {
	v, ok := b.wait[name]
	return v, ok
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
	_, ok := b.wait[name]
	return !ok
}

// Start begins a measurement at now and returns when it ends. Readings count from the next
// one on: the current one covers time before lending went down.
func (b *Baselines) Start(now time.Time) time.Time {
	b.until = now.Add(b.measureFor)
	b.readings = map[string][]float64{}
	return b.until
}

// Add records workload name's run-queue wait ratio, read during the measurement.
func (b *Baselines) Add(name string, waitRatio float64) {
	if b.Measuring() {
		b.readings[name] = append(b.readings[name], waitRatio)
	}
}

// Finish ends the measurement once its time is up (done false before). It returns the
// baselines it measured, each the median of the workload's readings; a workload with too few
// readings keeps what it had.
func (b *Baselines) Finish(now time.Time) (measured map[string]float64, done bool) {
	if !b.Measuring() || now.Before(b.until) {
		return nil, false
	}
	measured = map[string]float64{}
	for name, rs := range b.readings {
		if len(rs) < minReadings {
			continue
		}
		slices.Sort(rs)
		m := rs[len(rs)/2]
		if len(rs)%2 == 0 {
			m = (rs[len(rs)/2-1] + m) / 2
		}
		b.wait[name], measured[name] = m, m
	}
	b.until, b.readings, b.last = time.Time{}, nil, now
	return measured, true
}

// Keep forgets the baselines of workloads not in names (gone, or no longer online).
func (b *Baselines) Keep(names map[string]bool) {
	for name := range b.wait {
		if !names[name] {
			delete(b.wait, name)
		}
	}
}
