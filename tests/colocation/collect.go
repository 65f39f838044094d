package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
)

// runResult is what one run of one scenario measured.
type runResult struct {
	Server   string `json:"server"`
	Scenario string `json:"scenario"`
	Round    int    `json:"round"`
	Error    string `json:"error,omitempty"`
	// DayStart is when the day began: the load generator's first scheduled request (without
	// online work, the end of the warm-up). Every window below is [DayStart, DayStart+day).
	DayStart       time.Time      `json:"dayStart"`
	Online         *onlineResult  `json:"online,omitempty"`
	Offline        *offlineResult `json:"offline,omitempty"`
	NodeCPUPercent float64        `json:"nodeCPUPercent"`
	// StealPercent is the host's steal over the day (included in NodeCPUPercent).
	StealPercent float64      `json:"stealPercent"`
	Tidal        *tidalResult `json:"tidal,omitempty"`
	Series       series       `json:"series"`
}

// onlineResult is the load generator's view of the online service: latencies from each
// request's intended send time, for the whole run and per second.
type onlineResult struct {
	Requests  uint64                `json:"requests"`
	Errors    uint64                `json:"errors"`
	P50Ms     float64               `json:"p50Ms"`
	P99Ms     float64               `json:"p99Ms"`
	P999Ms    float64               `json:"p999Ms"`
	MaxMs     float64               `json:"maxMs"`
	Phases    []workload.PhaseStats `json:"phases"`
	Intervals []interval            `json:"intervals"`
	// The SLO on the 1-second p99 and the seconds that broke it (set by applySLO).
	SLOMs            float64 `json:"sloMs"`
	SLOBrokenSeconds int     `json:"sloBrokenSeconds"`
	// RunQueueWaitP50 and P95 are the online service's run-queue wait per unit of CPU run
	// over the day's half-second readings (the agent's interference indicator).
	RunQueueWaitP50 float64 `json:"runQueueWaitP50"`
	RunQueueWaitP95 float64 `json:"runQueueWaitP95"`
}

// interval is one second of the load generator's report (T: its end, seconds since DayStart).
type interval struct {
	T         float64 `json:"t"`
	Count     uint64  `json:"count"`
	P99Ms     float64 `json:"p99Ms"`
	RPS       float64 `json:"rps"`
	TargetRPS float64 `json:"targetRps"`
}

// offlineResult is the offline work done during the day.
type offlineResult struct {
	BurnerUnits     float64 `json:"burnerUnits"`
	AntagonistBytes float64 `json:"antagonistBytes"`
}

// tidalResult is what the agent did and cost.
type tidalResult struct {
	// SpikeToShrinkMs is the time from the spike phase's start to the agent's first "throttle"
	// action after it (nil: none during the spike).
	SpikeToShrinkMs     *float64 `json:"spikeToShrinkMs"`
	LentAtSpikeMilliCPU int64    `json:"lentAtSpikeMilliCPU"`
	// ContentionToShrinkMs are the agent's reaction times over the day, measured by the
	// benchmark's own probe: from online use crossing the spike threshold of what it kept to
	// the reclaimed quota's fall (contention.go). ContentionMissed counts crossings without a fall within
	// contentionTimeout.
	ContentionToShrinkMs []float64 `json:"contentionToShrinkMs"`
	ContentionMissed     int       `json:"contentionMissed"`
	// ContentionMisses are the probe's crossings without a fall, with what it saw.
	ContentionMisses  []contentionMiss `json:"contentionMisses,omitempty"`
	Throttles         int              `json:"throttles"` // during the day
	AgentCPUPercent   float64          `json:"agentCPUPercent"`
	AgentPeakRSSBytes int64            `json:"agentPeakRSSBytes"`
	// Actions are the agent's lending decisions of the run and, with cpu.mechanism auto, its
	// mechanism switches (T: seconds since DayStart).
	Actions []dayAction `json:"actions"`
}

// contentionMiss is a crossing the probe saw and lending did not fall after, with the figures
// at its start (T: seconds since DayStart), to set beside the agent's own fast path.
type contentionMiss struct {
	T              float64 `json:"t"`
	LentMilliCPU   int64   `json:"lentMilliCPU"`
	KeptMilliCPU   int64   `json:"keptMilliCPU"`   // the CPUs less what was lent
	WindowMilliCPU int64   `json:"windowMilliCPU"` // online use over contentionWindow
	BurstMilliCPU  int64   `json:"burstMilliCPU"`  // and over contentionBurst
}

// dayAction is one grow, shrink or throttle decision of the agent.
type dayAction struct {
	T    float64 `json:"t"`
	Kind string  `json:"kind"`
	// Trigger is what set it off (docs/status.md: online-spike, interference, baseline…).
	Trigger string `json:"trigger,omitempty"`
	Reason  string `json:"reason"`
}

// lastThrottleBefore is the agent's last throttle before sec seconds into the day, if any.
func (t *tidalResult) lastThrottleBefore(sec float64) (dayAction, bool) {
	var last dayAction
	ok := false
	for _, a := range t.Actions {
		if a.Kind == "throttle" && a.T < sec {
			last, ok = a, true
		}
	}
	return last, ok
}

// series are the run's time series for its plot; X is seconds since DayStart.
type series struct {
	P99Ms      xy `json:"p99Ms"`
	RPS        xy `json:"rps"`
	TargetRPS  xy `json:"targetRps"`
	Burner     xy `json:"burnerUnitsPerS"`
	Antagonist xy `json:"antagonistBytesPerS"`
	NodeCPU    xy `json:"nodeCPUPercent"`
	LentCores  xy `json:"lentCores"`
}

type xy struct {
	X []float64 `json:"x"`
	Y []float64 `json:"y"`
}

func (s *xy) add(x, y float64) {
	s.X = append(s.X, math.Round(x*1000)/1000)
	s.Y = append(s.Y, y)
}

// collect turns what the processes and samplers reported into the run's figures.
func (r *scenarioRun) collect(res *runResult, d day, w runWorkloads) error {
	if d.loadgen != nil {
		on, start, err := onlineFrom(d.loadgen.output())
		if err != nil {
			return fmt.Errorf("load generator: %w", err)
		}
		res.Online, res.DayStart = on, start
		for _, iv := range on.Intervals {
			res.Series.P99Ms.add(iv.T-0.5, iv.P99Ms)
			res.Series.RPS.add(iv.T-0.5, iv.RPS)
			res.Series.TargetRPS.add(iv.T-0.5, iv.TargetRPS)
		}
	}
	from, to := res.DayStart, res.DayStart.Add(r.b.opts.day)
	if res.Online != nil {
		var day []float64
		for _, s := range r.waits {
			if !s.At.Before(from) && !s.At.After(to) {
				day = append(day, s.Ratio)
			}
		}
		if len(day) > 0 { // (NaN has no JSON)
			res.Online.RunQueueWaitP50, res.Online.RunQueueWaitP95 = percentile(day, 0.5), percentile(day, 0.95)
		}
	}
	if w.burner != nil {
		units, err := counter(w.burner, from, to, &res.Series.Burner, func(l workload.BurnerLine) (float64, float64, bool) {
			return float64(l.Total), l.UnitsPerS, l.Final
		})
		if err != nil {
			return err
		}
		bytes, err := counter(w.antagonist, from, to, &res.Series.Antagonist, func(l workload.AntagonistLine) (float64, float64, bool) {
			return float64(l.Total), l.BytesPerS, l.Final
		})
		if err != nil {
			return err
		}
		res.Offline = &offlineResult{BurnerUnits: units, AntagonistBytes: bytes}
	}
	if res.NodeCPUPercent = nodeUtilization(r.cpu, from, to); math.IsNaN(res.NodeCPUPercent) {
		return errors.New("no node CPU readings")
	}
	res.StealPercent = hostSteal(r.cpu, from, to)
	for i := 1; i < len(r.cpu); i++ {
		a, b := r.cpu[i-1], r.cpu[i]
		if dt := b.Total - a.Total; dt > 0 {
			mid := a.At.Add(b.At.Sub(a.At) / 2)
			res.Series.NodeCPU.add(mid.Sub(from).Seconds(), 100*(b.Busy-a.Busy)/dt)
		}
	}
	if r.watch != nil {
		res.Tidal = tidalFrom(r.watch, dayPhases(r.b.opts), from, d.agentCPU, d.agentPeak, &res.Series.LentCores)
		if r.contention != nil {
			res.Tidal.ContentionToShrinkMs = []float64{}
			for _, e := range r.contention.events {
				switch {
				case e.At.Before(from) || !e.At.Before(to):
				case e.Missed:
					res.Tidal.ContentionMissed++
					res.Tidal.ContentionMisses = append(res.Tidal.ContentionMisses, contentionMiss{T: e.At.Sub(from).Seconds(),
						LentMilliCPU: e.LentMilli, KeptMilliCPU: e.KeptMilli, WindowMilliCPU: e.WindowMilli, BurstMilliCPU: e.BurstMilli})
				default:
					res.Tidal.ContentionToShrinkMs = append(res.Tidal.ContentionToShrinkMs, e.Ms)
				}
			}
		}
	}
	return nil
}

// onlineFrom decodes the load generator's lines. The day's start is when its schedule
// started: each per-second line arrived some time after its own T, so the earliest
// arrival-minus-T is the closest estimate of it.
func onlineFrom(lines []timedLine) (*onlineResult, time.Time, error) {
	on := &onlineResult{}
	var start time.Time
	var final *workload.LoadGenLine
	for _, l := range lines {
		var v workload.LoadGenLine
		if err := json.Unmarshal(l.Data, &v); err != nil {
			return nil, start, err
		}
		if v.Final {
			final = &v
			continue
		}
		on.Intervals = append(on.Intervals, interval{T: v.T, Count: v.Count, P99Ms: v.P99Ms, RPS: v.RPS, TargetRPS: v.TargetRPS})
		if s := l.At.Add(-time.Duration(v.T * float64(time.Second))); start.IsZero() || s.Before(start) {
			start = s
		}
	}
	if final == nil || start.IsZero() {
		return nil, start, errors.New("no final report")
	}
	on.Requests, on.Errors = final.Count, final.Errors
	on.P50Ms, on.P99Ms, on.P999Ms, on.MaxMs = final.P50Ms, final.P99Ms, final.P999Ms, final.MaxMs
	on.Phases = final.Phases
	return on, start, nil
}

// counter decodes an offline workload's lines (T: its line type) and returns the work it did
// from from to to, interpolating its running total between the lines' arrival times. It adds
// its per-second rate to s.
func counter[T any](p *proc, from, to time.Time, s *xy, get func(T) (total, rate float64, final bool)) (float64, error) {
	c := cumulative{{p.started, 0}}
	for _, l := range p.output() {
		var v T
		if err := json.Unmarshal(l.Data, &v); err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		total, rate, final := get(v)
		c = append(c, point{l.At, total})
		if !final {
			s.add(l.At.Sub(from).Seconds()-0.5, rate)
		}
	}
	if len(c) < 2 || c[len(c)-1].t.Before(to) {
		return 0, fmt.Errorf("%s did not report through the day", p.name)
	}
	return c.delta(from, to), nil
}

// tidalFrom reads the agent's reaction to the spike and its lending from the status polls.
// The reaction is measured from the spike phase's scheduled start to the first "throttle"
// action within the spike: an upper bound on the agent's own reaction, as it includes the
// time the online service takes to turn the new load into CPU use.
func tidalFrom(w *agentWatch, phases []workload.Phase, dayStart time.Time, agentCPU float64, agentPeak int64, lent *xy) *tidalResult {
	t := &tidalResult{AgentCPUPercent: agentCPU, AgentPeakRSSBytes: agentPeak}
	from, to, _ := phaseWindow(phases, spikePhase)
	spikeStart, spikeEnd := dayStart.Add(from), dayStart.Add(to)
	var day time.Duration
	for _, p := range phases {
		day += p.Duration
	}
	for _, a := range w.sortedActions() {
		switch a.Kind {
		case "grow", "shrink", "throttle", "mechanism":
			t.Actions = append(t.Actions, dayAction{T: a.Time.Sub(dayStart).Seconds(), Kind: a.Kind, Trigger: a.Trigger, Reason: a.Reason})
		}
		if a.Kind != "throttle" {
			continue
		}
		if !a.Time.Before(dayStart) && a.Time.Before(dayStart.Add(day)) {
			t.Throttles++
		}
		if t.SpikeToShrinkMs == nil && !a.Time.Before(spikeStart) && a.Time.Before(spikeEnd) {
			ms := float64(a.Time.Sub(spikeStart).Microseconds()) / 1000
			t.SpikeToShrinkMs = &ms
		}
	}
	for _, l := range w.lent {
		if l.At.Before(spikeStart) {
			t.LentAtSpikeMilliCPU = l.MilliCPU
		}
		lent.add(l.At.Sub(dayStart).Seconds(), float64(l.MilliCPU)/1000)
	}
	return t
}

// oneLine is the run's progress line.
func (r runResult) oneLine() string {
	if r.Error != "" {
		return "FAILED: " + r.Error
	}
	s := ""
	if r.Online != nil {
		s += fmt.Sprintf("p50 %6.1f ms  p99 %7.1f ms  p99.9 %7.1f ms  ", r.Online.P50Ms, r.Online.P99Ms, r.Online.P999Ms)
	}
	if r.Offline != nil {
		s += fmt.Sprintf("burner %.3g units  antagonist %.3g GB  ", r.Offline.BurnerUnits, r.Offline.AntagonistBytes/1e9)
	}
	s += fmt.Sprintf("node CPU %.0f%% (host steal %.1f%%)", r.NodeCPUPercent, r.StealPercent)
	if t := r.Tidal; t != nil {
		s += fmt.Sprintf("  agent CPU %.2f%%  RSS %.0f MiB  throttles %d", t.AgentCPUPercent, float64(t.AgentPeakRSSBytes)/(1<<20), t.Throttles)
		if t.SpikeToShrinkMs != nil {
			s += fmt.Sprintf("  spike->throttle %.0f ms", *t.SpikeToShrinkMs)
		} else {
			s += fmt.Sprintf("  no throttle in the spike (lent %dm at its start)", t.LentAtSpikeMilliCPU)
		}
		if n := len(t.ContentionToShrinkMs); n > 0 {
			s += fmt.Sprintf("  probe spike->shrink p50 %.0f ms max %.0f ms (%d, %d missed)", percentile(t.ContentionToShrinkMs, 0.5),
				percentile(t.ContentionToShrinkMs, 1), n, t.ContentionMissed)
		}
	}
	return s
}
