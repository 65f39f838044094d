package kube

import (
	"slices"
	"time"
)

// Damper decides when a NodeReport is worth publishing, so schedulers do not see the
// capacity flap: a change is published when it is large enough or old enough.
type Damper struct {
	// MinChange is the fraction of the published value a resource must move by.
	MinChange float64
	// MaxAge: a published report older than this is refreshed (its heartbeat too).
	MaxAge time.Duration

	last       *NodeReport
	at         time.Time
	readySince time.Time
}

// Due reports whether r should be published now.
func (d *Damper) Due(now time.Time, r NodeReport) bool {
	if d.last == nil || now.Sub(d.at) >= d.MaxAge {
		return true
	}
	last := *d.last
	if r.Ready != last.Ready || r.Reason != last.Reason || !slices.Equal(r.Queues, last.Queues) {
		return true // unsafe states, and lending to another queue, go out at once
	}
	for _, v := range [][2]int64{{last.MilliCPU, r.MilliCPU}, {last.MemoryBytes, r.MemoryBytes}, {last.GPUs, r.GPUs}} {
		old, cur := v[0], v[1]
		if old == cur {
			continue
		}
		if cur == 0 || old == 0 {
			return true // nothing left to lend, or something to lend again
		}
		if float64(abs(cur-old)) >= d.MinChange*float64(old) {
			return true
		}
	}
	return false
}

// Published records that r went out at now; it returns when Ready last changed.
func (d *Damper) Published(now time.Time, r NodeReport) time.Time {
	if d.last == nil || d.last.Ready != r.Ready {
		d.readySince = now
	}
	d.last, d.at = &r, now
	return d.readySince
}

// Transition is when Ready would last have changed if r were published at now.
func (d *Damper) Transition(now time.Time, r NodeReport) time.Time {
	if d.last == nil || d.last.Ready != r.Ready {
		return now
	}
	return d.readySince
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
