package interference

import "slices"

// Recent keeps each workload's readings of one figure over its last few passes, so that the
// feedback judges their median rather than each reading alone. One interval's run-queue wait
// is a small sample: on a VM whose idle vCPUs halt, a single-threaded database's wait alone,
// with nothing lent, was over 1.5x its own median in one 500 ms reading of twenty, and each
// such reading cut lending by half. A harm that lasts crosses in most readings and still
// shows within a pass or two; the fast path, which watches CPU usage, does not wait on it.
//
// It is not safe for concurrent use; the interference loop owns it.
type Recent struct {
	passes int
	pass   uint64
	byName map[string][]stamped
}

// stamped is one reading and the pass it was taken in.
type stamped struct {
	pass  uint64
	value float64
}

// NewRecent keeps the readings of the last passes passes (at least 1: each reading alone).
func NewRecent(passes int) *Recent {
	return &Recent{passes: max(passes, 1), byName: map[string][]stamped{}}
}

// Next begins a pass: readings older than the last passes passes no longer count.
func (r *Recent) Next() { r.pass++ }

// Add records workload name's reading of this pass and returns the median of its readings
// in the last passes passes, the upper one of an even count (the stricter: a workload read in
// two of three passes is judged by the higher).
func (r *Recent) Add(name string, value float64) float64 {
	kept := r.byName[name][:0]
	for _, s := range r.byName[name] {
		if r.pass-s.pass < uint64(r.passes) && s.pass != r.pass {
			kept = append(kept, s)
		}
	}
	kept = append(kept, stamped{r.pass, value})
	r.byName[name] = kept
	values := make([]float64, len(kept))
	for i, s := range kept {
		values[i] = s.value
	}
	slices.Sort(values)
	return values[len(values)/2]
}

// Keep forgets the workloads not in names (gone, or no longer online).
func (r *Recent) Keep(names map[string]bool) {
	for name := range r.byName {
		if !names[name] {
			delete(r.byName, name)
		}
	}
}
