// Package ioadvisor sizes the disk IO the node lends to reclaimed work, per disk and per
// direction (read/write bytes and IOs per second), as the advisor sizes CPU: the disk's
// capacity less online work's recent peak use and a margin, grown by at most one step per
// grow interval, cut to the floor at once when online work shows IO pressure or the disk's
// latency rises, and the floor when metrics are stale. A rate whose capacity the operator
// did not give is lent its floor only: without a capacity there is no way to tell slack
// from saturation before online work suffers. It is pure logic: callers feed it samples.
package ioadvisor

import (
	"fmt"
	"time"
)

// Rates are per-second figures of one disk, in the order of io.max: read bytes, write bytes,
// read IOs, write IOs. As a capacity, 0 is unknown; as a limit, 0 is none.
type Rates [4]uint64

// Direction names, indexed as Rates.
var Directions = [4]string{"read_bytes", "write_bytes", "read_ios", "write_ios"}

// Config is the sizing rule (from the agent config).
type Config struct {
	// FloorBps and FloorIOPS are the least lent per direction: what reclaimed work always
	// gets, and all it gets where the capacity is unknown.
	FloorBps, FloorIOPS uint64
	// MarginRatio is added to online work's peak use before what is left is lent.
	MarginRatio float64
	// GrowStepRatio is the most lending grows per grow interval, as a share of capacity.
	GrowStepRatio float64
	// PeakWindow is how far back online use is remembered; its peak is what online work
	// needs.
	PeakWindow time.Duration
	// PressureThreshold (percent of time, PSI avg10) and LatencyThreshold (the disk's mean
	// time per IO) cut lending to the floor when crossed; 0 turns a signal off.
	PressureThreshold float64
	LatencyThreshold  time.Duration
	// Hold is how long after a cut lending may not grow.
	Hold time.Duration
}

// Disk is one disk lending is sized for.
type Disk struct {
	Device   string // "MAJ:MIN"
	Name     string // "vda"
	Capacity Rates
}

// Sample is one reading of a disk.
type Sample struct {
	// Online is online work's use: the disk's IO less reclaimed work's own.
	Online Rates
	// Latency is the disk's mean time per completed IO over the sample; 0 when it did none.
	Latency time.Duration
}

// Lent is what a disk lends now and why.
type Lent struct {
	Disk  Disk
	Rates Rates
	// Online is online work's peak use over the window.
	Online Rates
	Rule   string
}

type disk struct {
	Disk
	lent    Rates
	rule    string
	history []point
	cutAt   time.Time
}

type point struct {
	at time.Time
	v  Rates
}

// Advisor holds lending per disk.
type Advisor struct {
	cfg   Config
	disks []*disk
}

// New starts every disk at its floor.
func New(cfg Config, disks []Disk) *Advisor {
	a := &Advisor{cfg: cfg}
	for _, d := range disks {
		a.disks = append(a.disks, &disk{Disk: d, lent: a.floor(), rule: "starting at the floor"})
	}
	return a
}

func (a *Advisor) floor() Rates {
	return Rates{a.cfg.FloorBps, a.cfg.FloorBps, a.cfg.FloorIOPS, a.cfg.FloorIOPS}
}

// Lent is what each disk lends now.
func (a *Advisor) Lent() []Lent {
	out := make([]Lent, len(a.disks))
	for i, d := range a.disks {
		out[i] = Lent{Disk: d.Disk, Rates: d.lent, Online: peak(d.history), Rule: d.rule}
	}
	return out
}

// Stale lends every disk its floor: without fresh figures lending cannot be sized.
func (a *Advisor) Stale(reason string) (changed bool) {
	for _, d := range a.disks {
		changed = d.set(a.floor(), "metrics stale ("+reason+"): floor") || changed
	}
	return changed
}

// Pressure cuts every disk to its floor when online IO pressure (percent) crosses the
// threshold, at once: the fast path's signal. It returns whether anything changed.
func (a *Advisor) Pressure(now time.Time, pressure float64) bool {
	if a.cfg.PressureThreshold <= 0 || pressure <= a.cfg.PressureThreshold {
		return false
	}
	changed := false
	for _, d := range a.disks {
		d.cutAt = now
		changed = d.set(a.floor(), fmt.Sprintf("online IO pressure %.1f%% > %.1f%%: floor", pressure, a.cfg.PressureThreshold)) || changed
	}
	return changed
}

// Observe takes one reading per disk (keyed by device; a disk missing is stale) and moves
// lending: a disk whose latency crosses the threshold is cut to its floor; otherwise each
// direction is shrunk at once to its target, and grown by at most one step when grow is set
// (once per grow interval) and no cut is held. It returns whether anything changed.
func (a *Advisor) Observe(now time.Time, samples map[string]Sample, grow bool) bool {
	changed := false
	for _, d := range a.disks {
		s, ok := samples[d.Device]
		if !ok {
			changed = d.set(a.floor(), "no figures for "+d.Name+": floor") || changed
			continue
		}
		d.history = record(d.history, point{now, s.Online}, now, a.cfg.PeakWindow)
		if a.cfg.LatencyThreshold > 0 && s.Latency > a.cfg.LatencyThreshold {
			d.cutAt = now
			changed = d.set(a.floor(), fmt.Sprintf("%s latency %s > %s: floor", d.Name, s.Latency.Round(time.Millisecond/10), a.cfg.LatencyThreshold)) || changed
			continue
		}
		held := !d.cutAt.IsZero() && now.Sub(d.cutAt) < a.cfg.Hold
		online := peak(d.history)
		next := d.lent
		for i := range next {
			next[i] = a.size(d.Capacity[i], online[i], d.lent[i], grow && !held, i)
		}
		rule := "capacity less online peak and margin"
		if d.Capacity == (Rates{}) {
			rule = "capacity unknown: floor"
		} else if held {
			rule = "holding after a cut"
		}
		changed = d.set(next, rule) || changed
	}
	return changed
}

// size is one direction's next lending: the capacity left after online use and the margin,
// never below the floor, reached at once when lower and by a step when higher.
func (a *Advisor) size(capacity, online, cur uint64, grow bool, dir int) uint64 {
	floor := a.floor()[dir]
	if capacity == 0 {
		return floor
	}
	need := uint64(float64(online) * (1 + a.cfg.MarginRatio))
	target := floor
	if capacity > need {
		target = max(capacity-need, floor)
	}
	switch {
	case target < cur && cur-target < capacity/deadbandDivisor && target > floor:
		// A small move of online use: not worth a cgroup write and an action each interval.
		return cur
	case target <= cur:
		return target
	case !grow:
		return cur
	}
	step := max(uint64(float64(capacity)*a.cfg.GrowStepRatio), 1)
	return min(target, cur+step)
}

// deadbandDivisor: lending shrinks for a change of online use only when it moves by more
// than 1/deadbandDivisor of the capacity (the margin covers less).
const deadbandDivisor = 32

func (d *disk) set(r Rates, rule string) bool {
	d.rule = rule
	if r == d.lent {
		return false
	}
	d.lent = r
	return true
}

func record(h []point, p point, now time.Time, window time.Duration) []point {
	h = append(h, p)
	cut := 0
	for cut < len(h)-1 && now.Sub(h[cut].at) > window {
		cut++
	}
	return h[cut:]
}

func peak(h []point) Rates {
	var r Rates
	for _, p := range h {
		for i := range r {
			r[i] = max(r[i], p.v[i])
		}
	}
	return r
}
