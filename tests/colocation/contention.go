package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/rate"
)

// The contention probe measures the agent's reaction to online spikes independently of the
// agent: from the first moment online work uses more than the agent's spike threshold of the
// CPU it kept (the pool less what is lent, read from the reclaimed tier's CFS quota, or while
// reclaimed work has none, as under quota-on-cut while online work is calm, from the agent's
// status, polled twice a second) over the fast path's window, or more than all of it over
// the burst window, to the moment the quota falls under what was lent (or comes on at the
// cut); a crossing that ends before then was a blip, not a spike. (Online work rarely gets to use more than all it
// kept: the agent cuts at the threshold.) It samples every contentionEvery, the agent's own
// fast-path tick, so a figure is at most that much late; the kernel charges a running task's
// CPU time at its scheduler tick, which delays both the probe and the agent alike.
//
// The probe is part of the measuring instrument, so its sampler runs in every scenario with
// online work, agent or not, reading the same two files (the online cgroup's CPU time and the
// offline cgroup's quota): its cost is the same in every scenario. Sampling every 2 ms in the
// agent's runs alone had doubled the online service's run-queue wait there and added about a
// millisecond to its p99 (docs/benchmark.md#probe-cost).
const (
	contentionEvery   = 10 * time.Millisecond // the agent's default loops.fastInterval
	contentionWindow  = 30 * time.Millisecond // the agent's default loops.fastWindow
	contentionBurst   = 10 * time.Millisecond // the agent's default loops.fastBurstWindow
	contentionTimeout = time.Second           // no shrink within this: a miss
	agentSpikeShare   = 0.8                   // the agent's default cpu.spikeThreshold
	agentMinMilliCPU  = 100                   // the agent's default cpu.minReclaimedMilliCPU: nothing to cut at or under it
)

// contentionProbe turns samples of online CPU time and lent CPU into reaction times.
type contentionProbe struct {
	poolMilli int64
	online    *rate.Window
	// armed: online use was under the threshold since the last event, so a new crossing is a
	// new event (one long spike counts once).
	armed   bool
	pending bool
	first   contentionEvent // the pending crossing: its start and figures
	events  []contentionEvent
}

// contentionEvent is one crossing: when it began and how long until the quota fell (Missed:
// not within contentionTimeout), and the figures that made it one, so that a report can set
// them beside the agent's own (its status's fast path).
type contentionEvent struct {
	At     time.Time
	Ms     float64
	Missed bool
	// At its start: what was lent and kept, and online use over the window and the burst window.
	LentMilli, KeptMilli, WindowMilli, BurstMilli int64
}

func newContentionProbe(poolMilli int64) *contentionProbe {
	return &contentionProbe{poolMilli: poolMilli, online: rate.NewWindow(contentionWindow)}
}

// observe takes one sample: online work's cumulative CPU time and the CPU lent now.
func (p *contentionProbe) observe(now time.Time, online time.Duration, lentMilli int64) {
	milli, ok := p.online.Add(now, online)
	if !ok {
		return
	}
	// Over the last sample interval, as the agent's burst window over its last tick.
	burst, _ := p.online.Over(contentionBurst)
	kept := p.poolMilli - lentMilli
	over := milli > int64(agentSpikeShare*float64(kept)) || burst > kept
	switch {
	case p.pending && lentMilli < p.first.LentMilli:
		e := p.first
		e.Ms = float64(now.Sub(p.first.At).Microseconds()) / 1000
		p.events = append(p.events, e)
		p.pending, p.armed = false, false
	case p.pending && now.Sub(p.first.At) > contentionTimeout:
		e := p.first
		e.Missed = true
		p.events = append(p.events, e)
		p.pending, p.armed = false, false
	case p.pending && !over:
		// A blip over the threshold for a sample or two (a burst of requests), gone before
		// the agent's next reading could confirm it: not a spike to cut.
		p.pending = false
	case p.pending:
	case p.armed && lentMilli > agentMinMilliCPU && over:
		p.pending = true
		p.first = contentionEvent{At: now, LentMilli: lentMilli, KeptMilli: kept, WindowMilli: milli, BurstMilli: burst}
	case !over:
		p.armed = true
	}
}

// contentionSampler reads what the probe needs: the online cgroup's CPU time and the offline
// cgroup's quota (with the agent, its shared and reclaimed tiers).
type contentionSampler struct {
	layout       *cgroupfs.Layout
	online       string // cgroup, relative to the hierarchy roots
	quotaDir     string // the offline cgroup's directory in the cpu hierarchy
	counter      *cgroupfs.CPUCounter
	quota        *os.File
	periodMicros int64
	buf          []byte
}

func newContentionSampler(layout *cgroupfs.Layout, online, offline string) *contentionSampler {
	return &contentionSampler{layout: layout, online: online, quotaDir: layout.Dir("cpu", offline)}
}

// read returns online CPU time and the CPU the offline cgroup's quota allows (quota false
// while it has none, or while there is no offline cgroup), or ok false while the online
// cgroup is not there yet.
func (s *contentionSampler) read() (used time.Duration, lent int64, quota, ok bool) {
	var err error
	if s.counter == nil {
		if s.counter, err = s.layout.OpenCPUCounter(s.online); err != nil {
			s.counter = nil
			return 0, 0, false, false
		}
	}
	if used, err = s.counter.Read(); err != nil {
		return 0, 0, false, false
	}
	if s.quota == nil && !s.openQuota() {
		return used, 0, false, true
	}
	if s.buf == nil {
		s.buf = make([]byte, 64)
	}
	n, _ := s.quota.ReadAt(s.buf, 0)
	lent, quota = lentOfQuota(string(s.buf[:n]), s.periodMicros)
	return used, lent, quota, true
}

// openQuota opens the offline cgroup's quota file and reads its period, false while there is
// none (the agent has not made its tier yet, or the scenario has no offline work).
func (s *contentionSampler) openQuota() bool {
	name := "cpu.cfs_quota_us"
	if s.layout.Version == cgroupfs.V2 {
		name = "cpu.max"
	}
	f, err := os.Open(filepath.Join(s.quotaDir, name))
	if err != nil {
		return false
	}
	s.quota, s.periodMicros = f, 100000 // v2 gives the period in cpu.max itself
	if s.layout.Version == cgroupfs.V1 {
		if data, err := os.ReadFile(filepath.Join(s.quotaDir, "cpu.cfs_period_us")); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && v > 0 {
				s.periodMicros = v
			}
		}
	}
	return true
}

// lentOfQuota is the CPU a CFS quota allows, in millicores (v1: cpu.cfs_quota_us, with the
// period given; v2: cpu.max "quota period"); false for no quota.
func lentOfQuota(s string, period int64) (int64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 || f[0] == "-1" || f[0] == "max" {
		return 0, false
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	if len(f) > 1 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period <= 0 {
			return 0, false
		}
	}
	return quota * 1000 / period, true
}

func (s *contentionSampler) close() {
	if s.counter != nil {
		s.counter.Close()
	}
	if s.quota != nil {
		s.quota.Close()
	}
}
