package main

import (
	"fmt"
	"math"

	"github.com/tidalqos/tidal/internal/workload"
)

// scales are the axes every scenario's chart shares, so the plots compare at a glance.
type scales struct {
	x0, x1       float64 // seconds since the day began
	p99Lo, p99Hi float64 // ms, log scale: whole decades
	rpsHi        float64
	cores        float64
}

func commonScales(res results) scales {
	s := scales{x0: -res.Options.WarmupSeconds, x1: res.Options.DaySeconds + 3, cores: float64(res.Machine.CPUs)}
	lo, hi := math.Inf(1), 0.0
	for _, r := range res.Runs {
		if r.Online == nil || r.Error != "" {
			continue
		}
		for _, iv := range r.Online.Intervals {
			if iv.P99Ms > 0 {
				lo, hi = math.Min(lo, iv.P99Ms), math.Max(hi, iv.P99Ms)
			}
			s.rpsHi = math.Max(s.rpsHi, math.Max(iv.RPS, iv.TargetRPS))
		}
		hi = math.Max(hi, r.Online.SLOMs)
	}
	if hi == 0 {
		lo, hi = 1, 1000
	}
	s.p99Lo = math.Pow(10, math.Floor(math.Log10(lo)))
	s.p99Hi = math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	s.rpsHi = math.Max(s.rpsHi*1.1, 10)
	return s
}

// runChart is the chart of one run: online p99 and rate, offline throughput, node CPU and, with
// tidal, the CPU it lent.
func runChart(r runResult, res results, sc scales) chart {
	sum, _ := summaryOf(res.Scenarios, r.Scenario)
	c := chart{title: fmt.Sprintf("%s (round %d): %s", r.Scenario, r.Round, sum.About), x0: sc.x0, x1: sc.x1}
	if phases, err := workload.ParsePhases(res.Options.Phases); err == nil {
		var t float64
		for _, p := range phases {
			c.marks = append(c.marks, mark{t, p.Name})
			t += p.Duration.Seconds()
		}
		c.marks = append(c.marks, mark{t, "end"})
	}
	if on := r.Online; on != nil {
		p99 := panel{title: "online p99 of each second (ms, log scale)", lo: sc.p99Lo, hi: sc.p99Hi, log: true,
			lines: []line{{name: "p99", c: blue, pts: r.Series.P99Ms}}}
		if on.SLOMs > 0 {
			p99.lines = append(p99.lines, line{name: fmt.Sprintf("SLO %.0f ms", on.SLOMs), c: red, dashed: true,
				pts: xy{X: []float64{sc.x0, sc.x1}, Y: []float64{on.SLOMs, on.SLOMs}}})
		}
		c.panels = append(c.panels, p99, panel{title: "online requests/s", hi: sc.rpsHi, lines: []line{
			{name: "answered", c: blue, pts: r.Series.RPS},
			{name: "scheduled", c: grey, pts: r.Series.TargetRPS, dashed: true}}})
	}
	if r.Offline != nil {
		day := res.Options.DaySeconds
		burner := baselines(res.Runs, "offline-alone", burnerUnits).of(r.Round) / day
		antag := baselines(res.Runs, "offline-alone", antagonistBytes).of(r.Round) / day
		c.panels = append(c.panels, panel{title: "offline throughput (% of offline-alone's mean rate, same round)", hi: 200, lines: []line{
			{name: "burner", c: orange, pts: scaled(r.Series.Burner, 100/burner)},
			{name: "antagonist", c: purple, pts: scaled(r.Series.Antagonist, 100/antag)}}})
	}
	c.panels = append(c.panels, panel{title: "node CPU utilization (%)", hi: 100, lines: []line{{name: "node CPU", c: green, pts: r.Series.NodeCPU}}})
	if r.Tidal != nil {
		c.panels = append(c.panels, panel{title: "CPU tidal lends to reclaimed work (cores)", hi: sc.cores, lines: []line{
			{name: "lent", c: teal, pts: r.Series.LentCores}}})
	}
	return c
}

// scaled multiplies a series' values by f (dropping it when f is not a number).
func scaled(s xy, f float64) xy {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return xy{}
	}
	out := xy{X: s.X, Y: make([]float64, len(s.Y))}
	for i, v := range s.Y {
		out.Y[i] = v * f
	}
	return out
}
