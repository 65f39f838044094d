package agent

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/interference"
	"github.com/tidalqos/tidal/sysadvisor/mechanism"
	"github.com/tidalqos/tidal/sysadvisor/perfcount"
)

// Indicator names, as status, actions and metrics show them.
const (
	indicatorRunQueueWait = "run-queue wait"
	indicatorThrottled    = "throttled"
	// indicatorCPI is shown where the hardware counts it, not yet used by the feedback: its
	// targets need measuring on machines that have the counters (this kind of VM has none).
	indicatorCPI = "cycles per instruction"
)

// interferenceLoop reads online work's interference indicators every interference.interval
// and steps the feedback on each NUMA node. A crossing writes the reclaimed limits at once,
// without waiting for the slow loop.
func (a *Agent) interferenceLoop(ctx context.Context) {
	meter := interference.NewMeter(a.procDir, a.layout)
	defer meter.Close()
	if err := meter.CountCPI(perfcount.CPI); err != nil {
		a.log.Info("cycles per instruction not measured: this machine does not count them", "err", err)
	}
	probes := newProbes(a.cfg.Interference.Interval, a.log)
	defer probes.stop()
	baselines := interference.NewBaselines(a.cfg.Interference.BaselineFor, a.cfg.Interference.BaselineEvery)
	waits := interference.NewRecent(a.cfg.Interference.WaitReadings)
	t := time.NewTicker(a.cfg.Interference.Interval)
	defer t.Stop()
	last := time.Now()
	var atMinimum map[int]bool
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			atMinimum = a.interfere(ctx, meter, probes, baselines, waits, now.Sub(last), atMinimum)
			last = now
		}
	}
}

// onlineWorkload is one online workload the meter reads, with what judging it needs.
type onlineWorkload struct {
	uid     string
	tier    qos.Tier
	nodes   []int
	targets config.Targets
	slo     qos.SLO
}

// interfere reads the indicators (no lock held), hands each NUMA node's to the advisor and,
// if one was cut, writes the reclaimed limits. While online workloads' baselines are measured
// it holds lending at the minimum instead, and gives it back when the measurement ends.
// wasAtMinimum is what it returned the time before: the NUMA nodes that lent their minimum
// after that pass's decisions; a reading from a node at its minimum then and now teaches the
// workload's baseline. A workload's run-queue wait is judged by the median of its recent
// readings (waits); its baselines and the auto chooser take each reading.
func (a *Agent) interfere(ctx context.Context, meter *interference.Meter, probes *probes, baselines *interference.Baselines, waits *interference.Recent, interval time.Duration, wasAtMinimum map[int]bool) (atMinimum map[int]bool) {
	snap := a.store.Snapshot()
	a.mu.Lock()
	pools := a.pools
	nowAtMinimum := a.atMinimumLocked(pools)
	a.mu.Unlock()
	// A workload's readings were taken with nothing lent if every node it runs on lent its
	// minimum at the last pass and still does.
	unlent := func(nodes []int) bool {
		return len(nodes) > 0 && !slices.ContainsFunc(nodes, func(n int) bool { return !wasAtMinimum[n] || !nowAtMinimum[n] })
	}
	groups, online := a.onlineGroups(snap, pools)
	slos := map[string]qos.SLO{}
	names := map[string]bool{}
	for name, w := range online {
		names[name] = true
		if w.slo.Probe != "" {
			slos[name] = w.slo
		}
	}
	probes.sync(ctx, slos)
	baselines.Keep(names)
	waits.Keep(names)
	waits.Next()
	minRun := max(time.Duration(a.cfg.Interference.MinRunMilliCPU)*interval/1000, 1)
	readings := meter.Read(groups, minRun)
	now := time.Now()

	perNode := map[int][]advisor.Indicator{}
	shown := map[int][]reporter.Indicator{}
	var active []string           // workloads with a reading whose target is relative to a baseline
	unjudged := map[string]bool{} // workloads whose wait is settling after a cut: shown, not judged
	var harm mechanism.Harm       // online work's wait over its baselines and SLO probes, for the auto chooser
	for _, r := range readings {
		w := online[r.Name]
		var inds []reporter.Indicator
		run := state.Milli(r.Run, interval)
		harm.AddProbe(probes.tally(r.Name, run, r.Err == nil && unlent(w.nodes)))
		if took, ok := probes.latency(r.Name); ok {
			// The workload's own SLO signal counts whatever CPU it ran. Its target is the
			// operator's; the baseline beside it only shows whether lending less could meet it.
			name := indicatorProbe
			if w.slo.Histogram != "" {
				name = indicatorMetric
			}
			probe := reporter.Indicator{Name: name, Value: took.Seconds(), Target: w.slo.Latency.Seconds()}
			if floor, changed, ok := probes.floor(r.Name, run); ok {
				probe.Baseline, probe.BaselineBorrowed = floor.Latency.Seconds(), floor.Borrowed
				probe.BaselineOverTarget, probe.BaselineAnswers = floor.OverTarget, floor.Answers
				if changed {
					a.tellProbeFloor(r.Name, w, floor.Latency)
				}
			}
			inds = append(inds, probe)
		}
		if r.Err == nil && r.Run >= minRun {
			// Enough CPU for a ratio to mean something.
			reading := r.WaitRatio()
			judged, settled := waits.Add(r.Name, reading)
			wait := reporter.Indicator{Name: indicatorRunQueueWait, Value: judged, Target: w.targets.RunQueueWait}
			if !settled {
				unjudged[r.Name] = true
			}
			if w.targets.RunQueueWaitOverBaseline > 0 {
				active = append(active, r.Name)
				if unlent(w.nodes) {
					baselines.AddUnlent(r.Name, run, reading)
				}
				if b, borrowed, ok := baselines.Of(r.Name, run); ok {
					wait.Baseline, wait.BaselineBorrowed = b, borrowed
					wait.Target = max(wait.Target, w.targets.RunQueueWaitOverBaseline*b)
					harm.Add(reading, b, run)
				}
			}
			inds = append(inds, wait,
				reporter.Indicator{Name: indicatorThrottled, Value: r.ThrottledRatio(), Target: w.targets.Throttled})
			if r.Instructions > 0 {
				inds = append(inds, reporter.Indicator{Name: indicatorCPI, Value: r.CPI()})
			}
		}
		for _, ind := range inds {
			ind.Workload, ind.Tier, ind.RunMilliCPU = r.Name, string(w.tier), run
			for _, n := range w.nodes {
				shown[n] = append(shown[n], ind)
				if ind.Target > 0 && !(ind.Name == indicatorRunQueueWait && unjudged[r.Name]) {
					judged := advisor.Indicator{Name: ind.Name, Workload: r.Name, Value: ind.Value, Target: ind.Target}
					if ind.Name == indicatorRunQueueWait {
						// The one target relative to a baseline.
						judged.Baseline, judged.Borrowed = ind.Baseline, ind.BaselineBorrowed
					}
					perNode[n] = append(perNode[n], judged)
				}
			}
		}
	}
	for _, list := range shown {
		sort.SliceStable(list, func(i, j int) bool { return load(list[i]) > load(list[j]) })
	}

	a.mu.Lock()
	changed := false
	act := func(c *advisor.Change, kind, trigger string) {
		if c != nil {
			a.actionLocked(kind, trigger, c.Reason)
			changed = true
		}
	}
	done := baselines.Finish(now)
	switch {
	case done:
		for _, np := range pools {
			act(a.advisor.EndBaseline(now, np.Node), "grow", "baseline")
		}
	case baselines.Measuring():
		// Lending stays at its minimum until the measurement ends.
	case baselines.Due(now, active):
		until := baselines.Start(now)
		for _, np := range pools {
			act(a.advisor.Baseline(now, np.Node, until), "throttle", "baseline")
		}
	default:
		cut := map[int]bool{}
		for _, np := range pools {
			c := a.advisor.Interfere(now, np.Node, perNode[np.Node])
			cut[np.Node] = c != nil
			act(c, "throttle", "interference")
		}
		// The readings before a cut are answered by it: the median starts afresh.
		for name, w := range online {
			if slices.ContainsFunc(w.nodes, func(n int) bool { return cut[n] }) {
				waits.Restart(name)
			}
		}
	}
	if a.chooseMechanismLocked(now, pools, harm.Reading()) {
		changed = true
	}
	a.indicators = shown
	if changed {
		a.planGeneration++
	}
	a.spikeLimitsChangedLocked()
	atMinimum = a.atMinimumLocked(pools)
	a.mu.Unlock()
	if done {
		a.log.Info("online baselines measured", "runQueueWait", baselinesOf(readings, baselines, interval))
	}
	if changed {
		a.writeReclaimedLimits()
	}
	return atMinimum
}

// Events a pod gets when its SLO probe's floor crosses its target.
const (
	eventSLOUnreachable = "SLOUnreachable"
	eventSLOReachable   = "SLOReachable"
)

// tellProbeFloor says once, on each change, whether a workload's SLO signal is slower than
// its target with nothing lent at its load: then lending less cannot meet the target, and the
// feedback holds lending at the minimum for nothing an operator can gain. The log says it,
// and for a pod an Event on it.
func (a *Agent) tellProbeFloor(name string, w onlineWorkload, floor time.Duration) {
	if floor > w.slo.Latency {
		msg := fmt.Sprintf("tidal: the SLO %s is %s with nothing lent to offline work, over its %s target (tidalqos.io/slo-latency): lending less cannot meet it, and lending stays at its minimum while it is over target",
			w.slo.Signal(), floor.Round(10*time.Microsecond), w.slo.Latency)
		a.log.Warn("SLO signal slower than its target with nothing lent: lending less cannot meet the target",
			"workload", name, "signal", w.slo.Signal(), "target", w.slo.Latency, "withNothingLent", floor)
		if a.pods != nil {
			a.pods.Event(w.uid, corev1.EventTypeWarning, eventSLOUnreachable, msg)
		}
		return
	}
	a.log.Info("SLO signal within its target with nothing lent again", "workload", name, "target", w.slo.Latency, "withNothingLent", floor)
	if a.pods != nil {
		a.pods.Event(w.uid, corev1.EventTypeNormal, eventSLOReachable, fmt.Sprintf("tidal: the SLO %s is %s with nothing lent, within its %s target again",
			w.slo.Signal(), floor.Round(10*time.Microsecond), w.slo.Latency))
	}
}

// atMinimumLocked says, per NUMA node of pools, whether the plan lends only its minimum.
func (a *Agent) atMinimumLocked(pools plugins.Pools) map[int]bool {
	out := map[int]bool{}
	for _, np := range pools {
		out[np.Node] = a.advisor.LendsMinimum(np.Node)
	}
	return out
}

// baselinesOf is each workload's baseline at the load of its latest reading, for the log.
func baselinesOf(readings []interference.Reading, b *interference.Baselines, interval time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, r := range readings {
		if v, _, ok := b.Of(r.Name, state.Milli(r.Run, interval)); ok {
			out[r.Name] = v
		}
	}
	return out
}

// load is an indicator as a fraction of its target; unused ones sort last.
func load(i reporter.Indicator) float64 {
	if i.Target <= 0 {
		return -1
	}
	return i.Value / i.Target
}

// onlineGroups are the online workloads (shared and dedicated tiers) to measure, keyed by
// name with their tier's targets and the NUMA nodes they run on: a dedicated workload's
// cores', the shared pool's for the others.
func (a *Agent) onlineGroups(snap state.Snapshot, pools plugins.Pools) ([]interference.Group, map[string]onlineWorkload) {
	var groups []interference.Group
	online := map[string]onlineWorkload{}
	var sharedNodes []int
	for _, np := range pools {
		if !np.Shared.IsEmpty() {
			sharedNodes = append(sharedNodes, np.Node)
		}
	}
	for _, r := range snap.Workloads {
		w := onlineWorkload{uid: r.UID, tier: r.Tier, nodes: sharedNodes, slo: r.SLO}
		switch r.Tier {
		case qos.Shared:
			w.targets = a.cfg.Interference.Shared
		case qos.Dedicated:
			w.targets = a.cfg.Interference.Dedicated
			w.nodes = nil
			for _, np := range pools {
				if !np.Dedicated.Intersection(r.DedicatedCPUs).IsEmpty() {
					w.nodes = append(w.nodes, np.Node)
				}
			}
		default:
			continue
		}
		groups = append(groups, interference.Group{Name: r.Name, Cgroup: r.Cgroup, Recursive: r.Owner.Foreign()})
		online[r.Name] = w
	}
	return groups, online
}

// controlStatusLocked is how node's lending was sized, for status and the Node report.
func (a *Agent) controlStatusLocked(node int, lent int64) reporter.Control {
	limit, published, capv := a.advisor.Ceilings(node)
	usage := limit.MilliCPU
	formula := func(u advisor.UsageCeiling) string {
		keep := fmt.Sprintf("(online peak %dm over %s x %.2f + %dm)", u.PeakMilliCPU, u.Window, 1+a.cfg.CPU.SafetyMarginRatio, a.cfg.CPU.SafetyMarginMilliCPU)
		if u.CoresMilliCPU > 0 {
			keep = fmt.Sprintf("(online peak %dm over %s / core utilization %.2f)", u.PeakMilliCPU, u.Window, a.cfg.CPU.CoreUtilization)
		}
		f := fmt.Sprintf("pool %dm - %s", a.poolMilliLocked(node), keep)
		if u.AtMinimum {
			f = fmt.Sprintf("the %dm minimum, more than %s", min(a.cfg.CPU.MinReclaimedMilliCPU, a.poolMilliLocked(node)), f)
		}
		return f
	}
	ctl := a.advisor.Controllers()[node]
	mech, why := a.mechanismStatusLocked(time.Now())
	c := reporter.Control{
		Mechanism: mech, MechanismChoice: why,
		UsageCeilingMilliCPU: usage, PredictedOnlineMilliCPU: limit.PredictedMilliCPU, Formula: formula(limit),
		PublishedCeilingMilliCPU: published.MilliCPU, PublishedFormula: formula(published),
		InterferenceCapMilliCPU: capv, State: ctl.State, HeldUntil: ctl.HeldUntil,
		LastCut: ctl.LastCut, LastCutAt: ctl.LastCutAt, Indicators: []reporter.Indicator{},
	}
	planned := a.advisor.Plan().ReclaimedMilliCPU[node]
	switch {
	case lent < planned:
		c.Bound = "lease"
	case ctl.State == advisor.StateBaseline:
		c.Bound = "baseline measurement"
	case lent <= a.cfg.CPU.MinReclaimedMilliCPU || planned <= a.cfg.CPU.MinReclaimedMilliCPU:
		c.Bound = "minimum"
	case capv < usage:
		c.Bound = "interference cap"
	default:
		c.Bound = "usage ceiling"
	}
	c.Indicators = append(c.Indicators, a.indicators[node]...)
	return c
}

// poolMilliLocked is the size of node's shared pool in millicores.
func (a *Agent) poolMilliLocked(node int) int64 {
	for _, np := range a.pools {
		if np.Node == node {
			return int64(np.Shared.Size()) * 1000
		}
	}
	return 0
}
