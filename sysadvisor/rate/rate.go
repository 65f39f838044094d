// Package rate turns a cumulative CPU-time counter, read again and again, into a usage rate
// over a sliding window: the fast path's view of online work, and the colocation benchmark's
// probe of the same.
package rate

import "time"

// Window keeps the readings of the last window.
type Window struct {
	window time.Duration
	t      []time.Time
	used   []time.Duration
}

// NewWindow returns an empty window of the given length.
func NewWindow(window time.Duration) *Window { return &Window{window: window} }

// Add records a reading (the counter's total at now) and returns the usage rate in
// millicores over the window, once readings cover it.
func (w *Window) Add(now time.Time, used time.Duration) (milli int64, ok bool) {
	w.t, w.used = append(w.t, now), append(w.used, used)
	cut := 0
	for cut < len(w.t)-1 && now.Sub(w.t[cut+1]) >= w.window {
		cut++
	}
	w.t, w.used = w.t[cut:], w.used[cut:]
	span := now.Sub(w.t[0])
	if span < w.window || span <= 0 {
		return 0, false
	}
	return milliOver(used-w.used[0], span), true
}

// milliOver is CPU time used over span as millicores. A counter that went back (a cgroup
// re-created) reads as no use, not as negative use.
func milliOver(used, span time.Duration) int64 {
	return int64(float64(max(used, 0)) / float64(span) * 1000)
}

// Over returns the usage rate in millicores over about the last d: from the newest reading
// at least three quarters of d old to the latest one (d must not exceed the window). Readings
// come at a period with some jitter; asking for a span of exactly d would, half the time,
// reach back a whole period further and halve a burst that lasts d.
func (w *Window) Over(d time.Duration) (milli int64, ok bool) {
	last := len(w.t) - 1
	for i := last - 1; i >= 0; i-- {
		if span := w.t[last].Sub(w.t[i]); span >= d-d/4 && span > 0 {
			return milliOver(w.used[last]-w.used[i], span), true
		}
	}
	return 0, false
}
