package interference

import "slices"

// Recent keeps each workload's readings of one figure over its last few passes, so that the
// feedback judges their median rather than each reading alone. One interval's run-queue wait
// is a small sample: on a VM whose idle vCPUs halt, a single-threaded database's wait alone,
// with nothing lent, crossed the target 1.5x its median sets in about one 500 ms reading of
// twenty, and each such reading cut lending by half. A harm that lasts crosses in most
// readings and still shows within a pass or two; the fast path, which watches CPU usage, does
// not wait on it.
//
// A cut changes what the readings measure, so Restart drops a workload's readings from
// before it: the median must not cut again on readings the cut has already answered. Until
// as many passes have passed as the median spans, the workload is settling and not judged.
//
// It is not safe for concurrent use; the interference loop owns it.
type Recent struct {
	passes int
	pass   uint64
	byName map[string]*readings
	// sorted is Add's buffer for the median, kept between calls so a reading allocates nothing.
	sorted []float64
}

// readings are one workload's recent readings and the pass of its last Restart (0: none;
// passes count from 1, the first Next).
type readings struct {
	kept    []stamped
	restart uint64
}

// stamped is one reading and the pass it was taken in.
type stamped struct {
	pass  uint64
	value float64
}

// NewRecent keeps the readings of the last passes passes (at least 1: each reading alone).
func NewRecent(passes int) *Recent {
	return &Recent{passes: max(passes, 1), byName: map[string]*readings{}}
}

// Next begins a pass: readings older than the last passes passes no longer count.
func (r *Recent) Next() { r.pass++ }

// Add records workload name's reading of this pass and returns the median of its readings
// in the last passes passes (since its last Restart), the upper one of an even count (the
// stricter). settled is false while fewer passes than the median spans have begun since its
// last Restart: the median is shown, not judged.
func (r *Recent) Add(name string, value float64) (median float64, settled bool) {
	rs := r.byName[name]
	if rs == nil {
		rs = &readings{}
		r.byName[name] = rs
	}
	kept := rs.kept[:0]
	for _, s := range rs.kept {
		if r.pass-s.pass < uint64(r.passes) && s.pass != r.pass && s.pass > rs.restart {
			kept = append(kept, s)
		}
	}
	rs.kept = append(kept, stamped{r.pass, value})
	values := r.sorted[:0]
	for _, s := range rs.kept {
		values = append(values, s.value)
	}
	slices.Sort(values)
	r.sorted = values
	return values[len(values)/2], rs.restart == 0 || r.pass-rs.restart >= uint64(r.passes)
}

// Restart drops workload name's readings up to this pass (a cut has just answered them).
func (r *Recent) Restart(name string) {
	if rs := r.byName[name]; rs != nil {
		rs.kept, rs.restart = nil, r.pass
	}
}

// Keep forgets the workloads not in names (gone, or no longer online).
func (r *Recent) Keep(names map[string]bool) {
	for name := range r.byName {
		if !names[name] {
			delete(r.byName, name)
		}
	}
}
