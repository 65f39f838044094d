package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tidalqos/tidal/internal/workload"
)

// Targets from issues 3 and 15.
const (
	targetP99Ratio       = 1.10 // tidal online p99 / online-alone p99
	targetOfflineVsNaive = 0.8  // tidal offline throughput / naive's
	targetNodeCPU        = 90.0 // % mean node CPU utilization with tidal
	targetSpikeP99Ms     = 50.0
	targetAgentCPU       = 2.0 // % of one core, with 200 workloads
	targetAgentRSSMiB    = 50.0
	// calibrationMin is the naive/alone p99 ratio under which the benchmark shows nothing.
	calibrationMin = 1.2
)

// writeResults writes results.json, a plot per scenario and results.md into dir.
func writeResults(dir string, res results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	plots, err := writePlots(dir, res)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.md"))
	if err != nil {
		return err
	}
	writeMarkdown(f, res, plots)
	return f.Close()
}

// writeMarkdown renders the results for people: the calibration check first, then the targets,
// the scenario table, the agent's figures, the machine and the plots.
func writeMarkdown(w io.Writer, res results, plots []string) {
	fmt.Fprintf(w, "# tidal colocation benchmark\n\n")
	for _, srv := range res.Options.Servers {
		sub := res.forServer(srv)
		if len(sub.Scenarios) == 0 {
			continue
		}
		server, _ := serverByName(srv)
		fmt.Fprintf(w, "# Online service: %s\n\n%s. Every figure in this part is of this service's runs.\n\n", srv, server.About)
		writeCalibration(w, sub)
		writeTargets(w, sub)
		writeScenarioTable(w, sub)
		writeTidal(w, sub)
	}
	writeOverhead(w, res.Overhead)
	writeMachine(w, res)
	if len(plots) > 0 {
		fmt.Fprintf(w, "## Plots\n\nOne run per scenario: the round with the median online p99 (offline-alone: median burner throughput). ")
		fmt.Fprintf(w, "All plots share their scales; the p99 axis is logarithmic.\n\n")
		for _, p := range plots {
			fmt.Fprintf(w, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
}

func writeCalibration(w io.Writer, res results) {
	naive, ok := summaryOf(res.Scenarios, "naive")
	if !ok || naive.P99Ratio.N == 0 {
		fmt.Fprintf(w, "**Calibration check:** not available (needs the naive and online-alone scenarios).\n\n")
		return
	}
	r := naive.P99Ratio
	fmt.Fprintf(w, "**Calibration check:** naive colocation's online p99 is **%s** online-alone's (median of %d rounds, min %s, max %s). ",
		ratio(r.Median), r.N, ratio(r.Min), ratio(r.Max))
	if r.Median < calibrationMin {
		fmt.Fprintf(w, "**Warning:** that is too close to 1 for the benchmark to show what isolation buys: raise -work or -peak-rps.\n\n")
		return
	}
	fmt.Fprintf(w, "Unisolated colocation measurably hurts the online service here, so the other scenarios show what isolation buys.\n\n")
}

func writeTargets(w io.Writer, res results) {
	fmt.Fprintf(w, "## Targets (issues 3 and 15)\n\nMedian over rounds (min–max). ")
	fmt.Fprintf(w, "docs/benchmark.md explains each figure and what limits a missed target.\n\n")
	fmt.Fprintf(w, "| target | measured | met |\n| --- | --- | --- |\n")
	row := func(target, measured string, met bool, known bool) {
		verdict := "n/a"
		if known {
			verdict = map[bool]string{true: "yes", false: "**no**"}[met]
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", target, measured, verdict)
	}
	t, ok := summaryOf(res.Scenarios, "tidal")
	if !ok {
		fmt.Fprintf(w, "| (the tidal scenario did not run) | | |\n\n")
		return
	}
	row(fmt.Sprintf("tidal online p99 ≤ %.2f× online-alone p99", targetP99Ratio), ratioStat(t.P99Ratio),
		t.P99Ratio.Median <= targetP99Ratio, t.P99Ratio.N > 0)
	if best, name, ok := bestBaseline(res.Scenarios); ok {
		row("tidal online p99 ≤ the best no-agent baseline's ("+strings.Join(noAgentBaselines, ", ")+")",
			fmt.Sprintf("tidal %s, best %s %s", ratio(t.P99Ratio.Median), name, ratio(best)),
			t.P99Ratio.Median <= best, t.P99Ratio.N > 0)
	}
	burner := crossRatio(res.Runs, "tidal", "naive", burnerUnits)
	antag := crossRatio(res.Runs, "tidal", "naive", antagonistBytes)
	row(fmt.Sprintf("… while tidal's offline throughput ≥ %.1f× naive colocation's", targetOfflineVsNaive),
		fmt.Sprintf("burner %s, antagonist %s of naive's", ratioStat(burner), ratioStat(antag)),
		burner.Median >= targetOfflineVsNaive && antag.Median >= targetOfflineVsNaive, burner.N > 0 && antag.N > 0)
	row(fmt.Sprintf("tidal node CPU utilization ≥ %.0f%% (mean over the day)", targetNodeCPU), pctStat(t.NodeCPUPercent),
		t.NodeCPUPercent.Median >= targetNodeCPU, t.NodeCPUPercent.N > 0)
	if c := t.ContentionToShrink; c != nil && c.Samples > 0 {
		row(fmt.Sprintf("spike-to-shrink p99 ≤ %.0f ms (with %d more workloads managed)", targetSpikeP99Ms, res.Options.DayWorkloads),
			fmt.Sprintf("p99 %.0f ms, p50 %.0f ms over %d spikes%s (from online use crossing %.0f%% of what it kept to the reclaimed quota's fall)",
				c.P99Ms, c.P50Ms, c.Samples, missedContentions(c.Missed), 100*agentSpikeShare),
			c.P99Ms <= targetSpikeP99Ms && c.Missed == 0, true)
	} else if s := t.SpikeToShrink; s != nil && s.Samples > 0 {
		row(fmt.Sprintf("spike-to-shrink p99 ≤ %.0f ms", targetSpikeP99Ms),
			fmt.Sprintf("p99 %.0f ms, p50 %.0f ms (%d spikes%s; an upper bound: from the spike's scheduled start)", s.P99Ms, s.P50Ms, s.Samples, missed(s.Missed)),
			s.P99Ms <= targetSpikeP99Ms, true)
	} else {
		row(fmt.Sprintf("spike-to-shrink p99 ≤ %.0f ms", targetSpikeP99Ms), "no throttle during any spike (lending was already down)", false, false)
	}
	if o := res.Overhead; o != nil {
		row(fmt.Sprintf("agent CPU ≤ %.0f%% of one core with %d workloads", targetAgentCPU, o.Workloads),
			fmt.Sprintf("%.2f%%", o.AgentCPUPercent), o.AgentCPUPercent <= targetAgentCPU, true)
		rss := float64(o.AgentPeakRSSBytes) / (1 << 20)
		row(fmt.Sprintf("agent memory ≤ %.0f MiB resident with %d workloads", targetAgentRSSMiB, o.Workloads),
			fmt.Sprintf("%.1f MiB peak (VmHWM; %.1f MiB anonymous)", rss, float64(o.AgentAnonBytes)/(1<<20)), rss <= targetAgentRSSMiB, true)
	}
	fmt.Fprintln(w)
}

// bestBaseline is the no-agent baseline with the lowest median online p99 ratio.
func bestBaseline(ss []scenarioSummary) (best float64, name string, ok bool) {
	for _, b := range noAgentBaselines {
		s, found := summaryOf(ss, b)
		if !found || s.P99Ratio.N == 0 {
			continue
		}
		if !ok || s.P99Ratio.Median < best {
			best, name, ok = s.P99Ratio.Median, b, true
		}
	}
	return best, name, ok
}

func missed(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d more without a throttle in the spike", n)
}

func writeScenarioTable(w io.Writer, res results) {
	fmt.Fprintf(w, "## Scenarios\n\nMedian over rounds (min–max). Latencies in ms, from each request's intended send time. ")
	fmt.Fprintf(w, "Ratios are taken within each round (to that round's online-alone or offline-alone run). ")
	fmt.Fprintf(w, "SLO: %s, on each second's p99. ", res.Options.SLO)
	fmt.Fprintf(w, "Host steal: CPU time the hypervisor gave to something else while this machine had work (counted in node CPU too); a round with much of it was disturbed from outside.\n\n")
	fmt.Fprintf(w, "| scenario | p50 | p99 | p99.9 | p50 / alone | p99 / alone | p99.9 / alone | seconds over SLO | burner / alone | antagonist / alone | node CPU | host steal |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range res.Scenarios {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", scenarioCell(s),
			msStat(s.P50Ms), msStat(s.P99Ms), msStat(s.P999Ms), ratioStat(s.P50Ratio), ratioStat(s.P99Ratio), ratioStat(s.P999Ratio),
			countStat(s.SLOBrokenSeconds), ratioStat(s.BurnerRatio), ratioStat(s.AntagonistRatio), pctStat(s.NodeCPUPercent), plainStat(s.StealPercent, "%.1f%%"))
	}
	fmt.Fprintf(w, "\n")
	for _, s := range res.Scenarios {
		fmt.Fprintf(w, "- **%s**: %s.\n", s.Name, s.About)
	}
	fmt.Fprintln(w)
	writePhaseTable(w, res)
	writeWaitTable(w, res)
}

// writeWaitTable shows the interference indicator the agent uses, measured alike in every
// scenario: the online service's run-queue wait per unit of CPU it ran.
func writeWaitTable(w io.Writer, res results) {
	fmt.Fprintf(w, "Online run-queue wait per unit of CPU run (the agent's interference indicator, read by the benchmark the same way in every scenario every 500 ms; each run's median and 95th percentile over the day, then median over rounds, min–max):\n\n")
	fmt.Fprintf(w, "| scenario | p50 | p95 |\n| --- | --- | --- |\n")
	for _, s := range res.Scenarios {
		if s.RunQueueWaitP50.N == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", s.Name, plainStat(s.RunQueueWaitP50, "%.3f"), plainStat(s.RunQueueWaitP95, "%.3f"))
	}
	fmt.Fprintln(w)
}

// writePhaseTable shows where in the day each scenario's latency went: the p99 of each phase.
func writePhaseTable(w io.Writer, res results) {
	var header []string
	for _, s := range res.Scenarios {
		if len(s.PhaseP99Ms) > len(header) {
			header = header[:0]
			for _, p := range s.PhaseP99Ms {
				header = append(header, p.Phase)
			}
		}
	}
	if len(header) == 0 {
		return
	}
	fmt.Fprintf(w, "Online p99 of each phase of the day (ms; median over rounds, min–max):\n\n")
	fmt.Fprintf(w, "| scenario | %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)+1))
	for _, s := range res.Scenarios {
		if len(s.PhaseP99Ms) != len(header) {
			continue
		}
		cells := make([]string, len(header))
		for i, p := range s.PhaseP99Ms {
			cells[i] = msStat(p.stat)
		}
		fmt.Fprintf(w, "| %s | %s |\n", s.Name, strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

func scenarioCell(s scenarioSummary) string {
	if s.Failed > 0 {
		return fmt.Sprintf("%s (%d of %d runs failed)", s.Name, s.Failed, s.Failed+s.Runs)
	}
	return s.Name
}

func writeTidal(w io.Writer, res results) {
	t, ok := summaryOf(res.Scenarios, "tidal")
	if !ok || t.Runs == 0 {
		return
	}
	fmt.Fprintf(w, "## The agent during the tidal scenario\n\n")
	if s := t.SpikeToShrink; s != nil && s.Samples > 0 {
		fmt.Fprintf(w, "- Spike-to-shrink: p50 %.1f ms, p99 %.1f ms over %d spikes%s. Measured from the spike phase's scheduled start "+
			"to the agent's first \"throttle\" action: an upper bound, as it includes the time the load takes to become CPU use.\n",
			s.P50Ms, s.P99Ms, s.Samples, missed(s.Missed))
	}
	writeMissedSpikes(w, res)
	if c := t.ContentionToShrink; c != nil && c.Samples > 0 {
		fmt.Fprintf(w, "- Spike-to-shrink over the whole day, with %d idle workloads managed besides the run's own: p50 %.1f ms, p99 %.1f ms over %d spikes%s. "+
			"Measured by the benchmark itself, sampling every %s: from the first sample at which the online tier's CPU use over the last %s "+
			"crossed %.0f%% (the agent's default cpu.spikeThreshold) of what the agent left it (the CPUs less what it lent: the reclaimed tier's CFS quota, "+
			"or while that tier has none its status's figure) to the sample at which the quota fell under what was lent or came on. The kernel charges a running task's CPU time at its scheduler tick, which delays the probe and the agent alike.\n",
			res.Options.DayWorkloads, c.P50Ms, c.P99Ms, c.Samples, missedContentions(c.Missed), contentionEvery, contentionWindow, 100*agentSpikeShare)
	}
	writeContentionMisses(w, res)
	fmt.Fprintf(w, "- Agent CPU during the day: %s of one core (its status was polled twice a second).\n", plainStat(t.AgentCPUPercent, "%.2f%%"))
	fmt.Fprintf(w, "- Agent peak resident memory (VmHWM): %s MiB.\n\n", plainStat(t.AgentPeakRSSMiB, "%.1f"))
}

// writeMissedSpikes explains each tidal run without a throttle in the spike: lending was
// already down, and which throttle had last brought it down (the agent's own reason: the fast
// path's burst rule, an interference target, or a baseline measurement).
func writeMissedSpikes(w io.Writer, res results) {
	phases, err := workload.ParsePhases(res.Options.Phases)
	if err != nil {
		return
	}
	from, _, _ := phaseWindow(phases, spikePhase)
	for _, r := range res.Runs {
		t := r.Tidal
		if r.Scenario != "tidal" || r.Error != "" || t == nil || t.SpikeToShrinkMs != nil {
			continue
		}
		fmt.Fprintf(w, "- Round %d: no throttle during the spike: it began with %dm lent", r.Round, t.LentAtSpikeMilliCPU)
		if last, ok := t.lastThrottleBefore(from.Seconds()); ok {
			fmt.Fprintf(w, "; its last throttle before it was %.1f s into the day (%s): %s",
				last.T, phaseNameAt(phases, last.T), last.Reason)
		} else {
			fmt.Fprintf(w, "; the slow loop had already shrunk it to its minimum from the online peak it saw (all CPU use but reclaimed work's, "+
				"whatever else runs on the machine included; its shrink actions are in results.json)")
		}
		fmt.Fprintf(w, ".\n")
	}
}

// writeContentionMisses gives, for each crossing the probe saw and lending did not fall
// after, what the probe saw: online use against the threshold of what was kept.
func writeContentionMisses(w io.Writer, res results) {
	phases, err := workload.ParsePhases(res.Options.Phases)
	if err != nil {
		return
	}
	for _, r := range res.Runs {
		if r.Scenario != "tidal" || r.Tidal == nil {
			continue
		}
		for _, m := range r.Tidal.ContentionMisses {
			fmt.Fprintf(w, "- Round %d: a crossing without a fall within %s at %.1f s (%s): online use %dm over %s and %dm over %s, "+
				"against limits of %dm (%.0f%% of the %dm kept, with %dm lent) and %dm (all of it).\n",
				r.Round, contentionTimeout, m.T, phaseNameAt(phases, m.T), m.WindowMilliCPU, contentionWindow, m.BurstMilliCPU, contentionBurst,
				int64(agentSpikeShare*float64(m.KeptMilliCPU)), 100*agentSpikeShare, m.KeptMilliCPU, m.LentMilliCPU, m.KeptMilliCPU)
		}
	}
}

// phaseNameAt names the phase running sec seconds into the day.
func phaseNameAt(phases []workload.Phase, sec float64) string {
	var end float64
	for _, p := range phases {
		if end += p.Duration.Seconds(); sec < end {
			return p.Name
		}
	}
	return "after the day"
}

func writeOverhead(w io.Writer, o *overheadResult) {
	if o == nil {
		return
	}
	fmt.Fprintf(w, "## Agent overhead with %d workloads\n\n", o.Workloads)
	fmt.Fprintf(w, "The agent with its defaults managing %d `sleep` processes (half shared, half reclaimed; %d listed in its status at the end), "+
		"measured over %.0f s after they were admitted, with nothing polling it: **%.2f%% of one core**, "+
		"**%.1f MiB** peak resident memory (VmHWM; %.1f MiB resident at the end, of which %.1f MiB anonymous: the rest are the binary's own file-backed pages, "+
		"shared and reclaimable, most of them touched once by the init code of the Kubernetes and runtime-hook libraries linked in).\n\n",
		o.Workloads, o.Listed, o.DurationSeconds, o.AgentCPUPercent, float64(o.AgentPeakRSSBytes)/(1<<20), float64(o.AgentRSSBytes)/(1<<20),
		float64(o.AgentAnonBytes)/(1<<20))
}

func writeMachine(w io.Writer, res results) {
	m, o := res.Machine, res.Options
	fmt.Fprintf(w, "## Machine and command\n\n")
	llc := ""
	if m.LastLevelCache != "" {
		llc = " (" + m.LastLevelCache + ")"
	}
	fmt.Fprintf(w, "- Machine: %s%s, %d CPUs, %.1f GiB memory, Linux %s, cgroup %s\n", m.CPUModel, llc, m.CPUs, m.MemoryGiB, m.Kernel, m.Cgroup)
	fmt.Fprintf(w, "- Date: %s to %s; source %s, %s\n", res.Started.Format("2006-01-02 15:04 MST"), res.Finished.Format("15:04 MST"), m.Commit, m.Go)
	fmt.Fprintf(w, "- Command (as root): `%s`\n", o.Command)
	if len(res.Scenarios) > 0 {
		fmt.Fprintf(w, "- %d rounds of %s, interleaved; each run: %s warm-up (offline work and agent only), then the day: `%s`\n",
			o.Rounds, strings.Join(o.Scenarios, ", "), o.Warmup, o.Phases)
		fmt.Fprintf(w, "- Online: %s of CPU work per request; offline: burner %d threads, antagonist %d thread(s) over %s\n",
			o.WorkPerRequest, o.BurnerThreads, o.AntagonistThreads, o.AntagonistSize)
		if o.DayWorkloads > 0 {
			fmt.Fprintf(w, "- In every run with the agent, it also managed %d idle workloads (`sleep`, half shared, half reclaimed)\n", o.DayWorkloads)
		}
	}
	if o.AgentConfig != "" {
		fmt.Fprintf(w, "- **What-if run**: the agent ran with these settings on top of its defaults:\n\n```yaml\n%s\n```\n", strings.TrimSpace(o.AgentConfig))
	}
	fmt.Fprintln(w)
}

// crossRatio is, per round, a figure of scenario a over the same figure of scenario b.
func crossRatio(runs []runResult, a, b string, get func(runResult) float64) stat {
	ref := baselines(runs, b, get)
	var v []float64
	for _, r := range runs {
		if r.Scenario == a && r.Error == "" {
			v = append(v, get(r)/ref.of(r.Round))
		}
	}
	return statOf(v)
}

// Cell formats: "12.3 (11.0–14.2)", "1.05× (0.98–1.12)".
func plainStat(s stat, f string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmt.Sprintf(f, s.Median)
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.Median, s.Min, s.Max)
}

func msStat(s stat) string    { return plainStat(s, "%.1f") }
func pctStat(s stat) string   { return plainStat(s, "%.0f%%") }
func countStat(s stat) string { return plainStat(s, "%.0f") }

func ratioStat(s stat) string { return plainStat(s, "%.2f×") }

func ratio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// writePlots draws a chart per scenario and returns the file names.
func writePlots(dir string, res results) ([]string, error) {
	sc := commonScales(res)
	var names []string
	for _, s := range res.Scenarios {
		r, ok := representative(runsOf(res.Runs, s.Server), s.Name)
		if !ok {
			continue
		}
		name := s.Name + ".png"
		if s.Server != "" {
			name = s.Server + "-" + name
		}
		if err := runChart(r, res, sc).writePNG(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// representative is the completed run of a scenario with the median online p99 (or, without
// online work, the median burner throughput).
func representative(runs []runResult, scenario string) (runResult, bool) {
	var rs []runResult
	for _, r := range runs {
		if r.Scenario == scenario && r.Error == "" {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return runResult{}, false
	}
	key := func(r runResult) float64 {
		if r.Online != nil {
			return r.Online.P99Ms
		}
		return burnerUnits(r)
	}
	sort.Slice(rs, func(i, j int) bool { return key(rs[i]) < key(rs[j]) })
	return rs[(len(rs)-1)/2], true
}

func missedContentions(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d more without a fall within %s", n, contentionTimeout)
}
