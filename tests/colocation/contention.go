package main

import (
	"os"
	"path"
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
// kept: the agent cuts at the threshold.) It samples every contentionEvery,
// so a figure is at most that much late; the kernel charges a running task's CPU time at its
// scheduler tick, which delays both the probe and the agent alike.
const (
	contentionEvery   = 2 * time.Millisecond
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
	t0      time.Time
	lentAt0 int64
	events  []contentionEvent
}

// contentionEvent is one crossing: when it began and how long until the quota fell (Missed:
// not within contentionTimeout).
type contentionEvent struct {
	At     time.Time
	Ms     float64
	Missed bool
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
	// Sampled every 2 ms, the burst window spans 8 ms here rather than the agent's 10 ms: a
	// crossing shows no later than the agent can see it.
	burst, _ := p.online.Over(contentionBurst)
	kept := p.poolMilli - lentMilli
	over := milli > int64(agentSpikeShare*float64(kept)) || burst > kept
	switch {
	case p.pending && lentMilli < p.lentAt0:
		p.events = append(p.events, contentionEvent{At: p.t0, Ms: float64(now.Sub(p.t0).Microseconds()) / 1000})
		p.pending, p.armed = false, false
	case p.pending && now.Sub(p.t0) > contentionTimeout:
		p.events = append(p.events, contentionEvent{At: p.t0, Missed: true})
		p.pending, p.armed = false, false
	case p.pending && !over:
		// A blip over the threshold for a sample or two (a burst of requests), gone before
		// the agent's next reading could confirm it: not a spike to cut.
		p.pending = false
	case p.pending:
	case p.armed && lentMilli > agentMinMilliCPU && over:
		p.pending, p.t0, p.lentAt0 = true, now, lentMilli
	case !over:
		p.armed = true
	}
}

// contentionSampler reads what the probe needs from the agent's cgroups: its shared tier's CPU
// time and its reclaimed tier's quota.
type contentionSampler struct {
	layout          *cgroupfs.Layout
	shared, tierDir string
	counter         *cgroupfs.CPUCounter
	quota           *os.File
	periodMicros    int64
	buf             []byte
}

func newContentionSampler(layout *cgroupfs.Layout, agentRoot string) *contentionSampler {
	return &contentionSampler{layout: layout, shared: path.Join(agentRoot, "shared"),
		tierDir: layout.Dir("cpu", path.Join(agentRoot, "reclaimed"))}
}

// read returns online CPU time and the CPU the reclaimed tier's quota allows (quota false
// while it has none), or ok false while the agent's tiers are not there yet.
func (s *contentionSampler) read() (used time.Duration, lent int64, quota, ok bool) {
	var err error
	if s.counter == nil {
		if s.counter, err = s.layout.OpenCPUCounter(s.shared); err != nil {
			s.counter = nil
			return 0, 0, false, false
		}
	}
	if s.quota == nil {
		name := "cpu.cfs_quota_us"
		if s.layout.Version == cgroupfs.V2 {
			name = "cpu.max"
		}
		if s.quota, err = os.Open(filepath.Join(s.tierDir, name)); err != nil {
			s.quota = nil
			return 0, 0, false, false
		}
		s.periodMicros = 100000 // v2 gives it in cpu.max itself
		if s.layout.Version == cgroupfs.V1 {
			if data, err := os.ReadFile(filepath.Join(s.tierDir, "cpu.cfs_period_us")); err == nil {
				if v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && v > 0 {
					s.periodMicros = v
				}
			}
		}
	}
	used, err = s.counter.Read()
	if err != nil {
		return 0, 0, false, false
	}
	if s.buf == nil {
		s.buf = make([]byte, 64)
	}
	n, _ := s.quota.ReadAt(s.buf, 0)
	lent, quota = lentOfQuota(string(s.buf[:n]), s.periodMicros)
	return used, lent, quota, true
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
