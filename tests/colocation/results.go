package main

import (
	"math"
	"os"
	"time"
)

// results is everything a benchmark run produced; results.json is this, indented.
type results struct {
	Options   optionsDoc        `json:"options"`
	Machine   machine           `json:"machine"`
	Started   time.Time         `json:"started"`
	Finished  time.Time         `json:"finished"`
	Scenarios []scenarioSummary `json:"scenarios"`
	Overhead  *overheadResult   `json:"overhead,omitempty"`
	Runs      []runResult       `json:"runs"`
}

// optionsDoc records the settings a run used.
type optionsDoc struct {
	Command           string   `json:"command"`
	Rounds            int      `json:"rounds"`
	Scenarios         []string `json:"scenarios"`
	Servers           []string `json:"servers"`
	Day               string   `json:"day"`
	DaySeconds        float64  `json:"daySeconds"`
	Warmup            string   `json:"warmup"`
	WarmupSeconds     float64  `json:"warmupSeconds"`
	Phases            string   `json:"phases"`
	WorkPerRequest    string   `json:"workPerRequest"`
	BurnerThreads     int      `json:"burnerThreads"`
	AntagonistThreads int      `json:"antagonistThreads"`
	AntagonistSize    string   `json:"antagonistSize"`
	DayWorkloads      int      `json:"dayWorkloads"` // idle workloads the agent manages besides each tidal run's own
	SLO               string   `json:"slo"`
	AgentConfig       string   `json:"agentConfig,omitempty"` // extra agent YAML of a what-if run
}

func describeOptions(o options) optionsDoc {
	slo := fmtFloat(o.sloFactor) + "x the same round's online-alone p99"
	if o.slo > 0 {
		slo = o.slo.String()
	}
	d := optionsDoc{Command: o.command, Rounds: o.rounds, Scenarios: o.scenarios, Servers: o.servers,
		Day: o.day.String(), DaySeconds: o.day.Seconds(), Warmup: o.warmup.String(), WarmupSeconds: o.warmup.Seconds(),
		Phases: phaseSpec(dayPhases(o)), WorkPerRequest: o.work.String(), SLO: slo,
		BurnerThreads: o.burnerThreads, AntagonistThreads: o.antagonistThreads, AntagonistSize: o.antagonistSize, DayWorkloads: o.dayWorkloads}
	if o.agentConfig != "" {
		extra, _ := os.ReadFile(o.agentConfig)
		d.AgentConfig = string(extra)
	}
	return d
}

// scenarioSummary is one scenario's figures over the rounds. Ratios are taken within a round
// (to that round's online-alone or offline-alone run) and then summarized, so a machine that
// is slower in one round than in another moves both sides of a ratio alike.
type scenarioSummary struct {
	Server string `json:"server"`
	Name   string `json:"name"`
	About  string `json:"about"`
	Runs   int    `json:"runs"` // runs that completed
	Failed int    `json:"failed"`

	P50Ms     stat `json:"p50Ms"`
	P99Ms     stat `json:"p99Ms"`
	P999Ms    stat `json:"p999Ms"`
	P50Ratio  stat `json:"p50Ratio"`
	P99Ratio  stat `json:"p99Ratio"`
	P999Ratio stat `json:"p999Ratio"`
	// SLOBrokenSeconds counts seconds whose 1-second p99 broke the SLO.
	SLOBrokenSeconds stat `json:"sloBrokenSeconds"`
	// PhaseP99Ms is the p99 of each phase of the day (requests by intended send time).
	PhaseP99Ms []phaseStat `json:"phaseP99Ms,omitempty"`

	// RunQueueWaitP50 and P95: the online service's run-queue wait per unit of CPU run.
	RunQueueWaitP50 stat `json:"runQueueWaitP50"`
	RunQueueWaitP95 stat `json:"runQueueWaitP95"`

	BurnerRatio     stat `json:"burnerRatio"`
	AntagonistRatio stat `json:"antagonistRatio"`
	NodeCPUPercent  stat `json:"nodeCPUPercent"`
	StealPercent    stat `json:"stealPercent"` // the host's, included in NodeCPUPercent

	// Tidal only.
	SpikeToShrink *spikeStat `json:"spikeToShrink,omitempty"`
	// ContentionToShrink pools every round's contention-to-shrink reactions (Missed: crossings
	// without a shrink within contentionTimeout).
	ContentionToShrink *spikeStat `json:"contentionToShrink,omitempty"`
	AgentCPUPercent    stat       `json:"agentCPUPercent"`
	AgentPeakRSSMiB    stat       `json:"agentPeakRSSMiB"`
}

// phaseStat is a figure of one phase of the day over the rounds.
type phaseStat struct {
	Phase string `json:"phase"`
	stat
}

// spikeStat is the spike-to-shrink reaction over all rounds.
type spikeStat struct {
	P50Ms   float64 `json:"p50Ms"`
	P99Ms   float64 `json:"p99Ms"`
	Samples int     `json:"samples"`
	// Missed counts runs with no throttle during the spike (lending was already down).
	Missed int `json:"missed"`
}

// baseline is a figure of a baseline scenario per round, for the ratios.
type baseline map[int]float64

// of is the round's value, or the median of the other rounds' when that round's run failed;
// NaN without any.
func (b baseline) of(round int) float64 {
	if v, ok := b[round]; ok {
		return v
	}
	var all []float64
	for _, v := range b {
		all = append(all, v)
	}
	if s := statOf(all); s.N > 0 {
		return s.Median
	}
	return math.NaN()
}

// baselines collects a figure of the completed runs of one scenario, per round.
func baselines(runs []runResult, scenario string, get func(runResult) float64) baseline {
	b := baseline{}
	for _, r := range runs {
		if r.Scenario == scenario && r.Error == "" {
			b[r.Round] = get(r)
		}
	}
	return b
}

func onlineP(q func(*onlineResult) float64) func(runResult) float64 {
	return func(r runResult) float64 {
		if r.Online == nil {
			return math.NaN()
		}
		return q(r.Online)
	}
}

var (
	p50  = onlineP(func(o *onlineResult) float64 { return o.P50Ms })
	p99  = onlineP(func(o *onlineResult) float64 { return o.P99Ms })
	p999 = onlineP(func(o *onlineResult) float64 { return o.P999Ms })
)

func burnerUnits(r runResult) float64 {
	if r.Offline == nil {
		return math.NaN()
	}
	return r.Offline.BurnerUnits
}

func antagonistBytes(r runResult) float64 {
	if r.Offline == nil {
		return math.NaN()
	}
	return r.Offline.AntagonistBytes
}

// applySLO sets each online run's SLO (fixed, or a multiple of its round's online-alone p99)
// and counts the seconds whose p99 broke it. A second with requests due but none answered
// counts as broken too.
func applySLO(runs []runResult, o options) {
	alone := baselines(runs, "online-alone", p99)
	for i := range runs {
		on := runs[i].Online
		if on == nil {
			continue
		}
		slo := o.slo.Seconds() * 1000
		if slo <= 0 {
			slo = o.sloFactor * alone.of(runs[i].Round)
		}
		if math.IsNaN(slo) {
			continue
		}
		on.SLOMs, on.SLOBrokenSeconds = slo, 0
		for _, iv := range on.Intervals {
			if iv.P99Ms > slo || (iv.Count == 0 && iv.TargetRPS > 0) {
				on.SLOBrokenSeconds++
			}
		}
	}
}

// summarize turns the runs into one summary per scenario, in the order they ran.
func summarize(runs []runResult, server string, o options) []scenarioSummary {
	applySLO(runs, o)
	ref := map[string]baseline{
		"p50": baselines(runs, "online-alone", p50), "p99": baselines(runs, "online-alone", p99),
		"p999": baselines(runs, "online-alone", p999), "burner": baselines(runs, "offline-alone", burnerUnits),
		"antagonist": baselines(runs, "offline-alone", antagonistBytes),
	}
	var out []scenarioSummary
	for _, name := range o.scenarios {
		sc, _ := scenarioByName(name)
		s := scenarioSummary{Server: server, Name: name, About: sc.About}
		var v struct {
			p50, p99, p999, r50, r99, r999, slo, burner, antagonist, cpu, steal, agentCPU, rss, spike, contention, wait50, wait95 []float64
		}
		phases := map[string][]float64{}
		var phaseOrder []string
		for _, r := range runs {
			if r.Scenario != name {
				continue
			}
			if r.Error != "" {
				s.Failed++
				continue
			}
			s.Runs++
			v.cpu, v.steal = append(v.cpu, r.NodeCPUPercent), append(v.steal, r.StealPercent)
			if r.Online != nil {
				v.p50, v.p99, v.p999 = append(v.p50, p50(r)), append(v.p99, p99(r)), append(v.p999, p999(r))
				v.r50 = append(v.r50, p50(r)/ref["p50"].of(r.Round))
				v.r99 = append(v.r99, p99(r)/ref["p99"].of(r.Round))
				v.r999 = append(v.r999, p999(r)/ref["p999"].of(r.Round))
				if r.Online.SLOMs > 0 {
					v.slo = append(v.slo, float64(r.Online.SLOBrokenSeconds))
				}
				v.wait50, v.wait95 = append(v.wait50, r.Online.RunQueueWaitP50), append(v.wait95, r.Online.RunQueueWaitP95)
				for _, ph := range r.Online.Phases {
					if _, seen := phases[ph.Name]; !seen {
						phaseOrder = append(phaseOrder, ph.Name)
					}
					phases[ph.Name] = append(phases[ph.Name], ph.P99Ms)
				}
			}
			if r.Offline != nil {
				v.burner = append(v.burner, burnerUnits(r)/ref["burner"].of(r.Round))
				v.antagonist = append(v.antagonist, antagonistBytes(r)/ref["antagonist"].of(r.Round))
			}
			if t := r.Tidal; t != nil {
				v.agentCPU = append(v.agentCPU, t.AgentCPUPercent)
				v.rss = append(v.rss, float64(t.AgentPeakRSSBytes)/(1<<20))
				if s.SpikeToShrink == nil {
					s.SpikeToShrink = &spikeStat{}
				}
				if t.SpikeToShrinkMs != nil {
					v.spike = append(v.spike, *t.SpikeToShrinkMs)
				} else {
					s.SpikeToShrink.Missed++
				}
				if t.ContentionToShrinkMs != nil {
					if s.ContentionToShrink == nil {
						s.ContentionToShrink = &spikeStat{}
					}
					v.contention = append(v.contention, t.ContentionToShrinkMs...)
					s.ContentionToShrink.Missed += t.ContentionMissed
				}
			}
		}
		s.P50Ms, s.P99Ms, s.P999Ms = statOf(v.p50), statOf(v.p99), statOf(v.p999)
		s.P50Ratio, s.P99Ratio, s.P999Ratio = statOf(v.r50), statOf(v.r99), statOf(v.r999)
		s.SLOBrokenSeconds = statOf(v.slo)
		s.RunQueueWaitP50, s.RunQueueWaitP95 = statOf(v.wait50), statOf(v.wait95)
		for _, name := range phaseOrder {
			s.PhaseP99Ms = append(s.PhaseP99Ms, phaseStat{Phase: name, stat: statOf(phases[name])})
		}
		s.BurnerRatio, s.AntagonistRatio = statOf(v.burner), statOf(v.antagonist)
		s.NodeCPUPercent, s.StealPercent = statOf(v.cpu), statOf(v.steal)
		s.AgentCPUPercent, s.AgentPeakRSSMiB = statOf(v.agentCPU), statOf(v.rss)
		if c := s.ContentionToShrink; c != nil && len(v.contention) > 0 {
			c.Samples, c.P50Ms, c.P99Ms = len(v.contention), percentile(v.contention, 0.50), percentile(v.contention, 0.99)
		}
		if s.SpikeToShrink != nil && len(v.spike) > 0 {
			s.SpikeToShrink.Samples = len(v.spike)
			s.SpikeToShrink.P50Ms = percentile(v.spike, 0.50)
			s.SpikeToShrink.P99Ms = percentile(v.spike, 0.99)
		}
		out = append(out, s)
	}
	return out
}

// summaryOf finds a scenario's summary.
func summaryOf(ss []scenarioSummary, name string) (scenarioSummary, bool) {
	for _, s := range ss {
		if s.Name == name {
			return s, true
		}
	}
	return scenarioSummary{}, false
}

// runsOf are the runs with the online service server.
func runsOf(runs []runResult, server string) []runResult {
	var out []runResult
	for _, r := range runs {
		if r.Server == server {
			out = append(out, r)
		}
	}
	return out
}

// forServer is res with only the runs and summaries of one online service.
func (res results) forServer(server string) results {
	sub := res
	sub.Runs = runsOf(res.Runs, server)
	sub.Scenarios = nil
	for _, s := range res.Scenarios {
		if s.Server == server {
			sub.Scenarios = append(sub.Scenarios, s)
		}
	}
	return sub
}
