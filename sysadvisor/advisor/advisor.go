// Package advisor turns online usage into a provision plan: how much CPU (per NUMA node) and
// memory the node lends to reclaimed work. It predicts online demand as the peak of recent
// usage plus a safety margin, grows what it lends by at most one step per slow-loop pass and
// shrinks it at once, on the slow loop or on the fast path's spike signal. It is pure logic:
// callers feed it samples and act on its plan.
//
// CPU has two usage ceilings. The plan (what reclaimed work's limits allow) follows online
// peak usage over a short window, LimitWindow, so offline work runs in a dip within seconds;
// what the node publishes (Vouched: Node resources, the arbiter) follows the peak over the
// long PeakWindow, damped, so the scheduler places work against what the node can lend
// through a day's swings rather than against the last few seconds.
package advisor

import (
	"fmt"
	"sort"
	"time"
)

// Config holds the advisor's knobs (from the agent config).
type Config struct {
	MinReclaimedMilliCPU int64
	SafetyMarginMilliCPU int64
	SafetyMarginRatio    float64
	GrowStepMilliCPU     int64
	PeakWindow           time.Duration
	LimitWindow          time.Duration // 0: PeakWindow
	SpikeThreshold       float64

	ReservedSystemBytes int64
	MinReclaimedBytes   int64
	SafetyMarginBytes   int64
	GrowStepBytes       int64

	Control Control
}

// Control configures the interference feedback: lending grows while online work shows slack
// on every indicator and is cut at once, multiplicatively, when one crosses its target.
type Control struct {
	// Slack: lending may grow only while every indicator is below Slack of the way from its
	// baseline (0 without one) to its target.
	Slack float64
	// Cut multiplies what a NUMA node lends when an indicator crosses its target.
	Cut float64
	// Hold is the longest lending may not grow again after a cut. FirstHold (0: Hold) is
	// the hold after a crossing that follows none within Hold; each crossing within Hold of
	// the last doubles the hold, up to Hold. A lone crossing then costs little lending, and
	// interference that persists is still held off for Hold.
	Hold, FirstHold time.Duration
}

// Indicator is one interference figure of online work against its target, such as the
// run-queue wait per unit of CPU run of the worst-off online workload.
type Indicator struct {
	Name     string // "run-queue wait", "throttled"
	Workload string // whose figure it is
	Value    float64
	Target   float64
	// Baseline is the workload's own figure with nothing lent, when its target is relative
	// to it (0 otherwise). Borrowed: it was measured at another load level, none being known
	// yet at this one.
	Baseline float64
	Borrowed bool
}

// load is the indicator as a fraction of its target (0 when it has none).
func (i Indicator) load() float64 {
	if i.Target <= 0 {
		return 0
	}
	return i.Value / i.Target
}

// headroomUsed is how much of the harm its target allows the indicator shows: 0 at the
// workload's own baseline (0 without one), 1 at the target. Slack is judged on it, not on
// load: a workload whose target is 1.5x its baseline sits at 0.67 of its target with
// nothing lent, so measured against the target alone it would never leave room to grow.
func (i Indicator) headroomUsed() float64 {
	if i.Target <= i.Baseline {
		return i.load()
	}
	return (i.Value - i.Baseline) / (i.Target - i.Baseline)
}

func (i Indicator) String() string {
	return fmt.Sprintf("%s of %s %.3f (target %.3f)", i.Name, i.Workload, i.Value, i.Target)
}

// Controller is the interference feedback's state on one NUMA node, for status.
type Controller struct {
	// CapMilliCPU is the most the interference feedback lets the node lend now.
	CapMilliCPU int64
	// State is "grow" (slack on every indicator), "hold" (under target, no slack, or just
	// cut), "cut" (the last reading crossed), "baseline" (lending held at its minimum while
	// online work's own indicators are measured, until HeldUntil) or "" before the first
	// reading.
	State string
	// Worst is the indicator nearest its target at the last reading.
	Worst     Indicator
	At        time.Time
	HeldUntil time.Time
	// LastCut is the last cut's reason ("" if none yet) and when it happened.
	LastCut   string
	LastCutAt time.Time

	// What the node lent, its cap, and the end of its hold after a cut, when a baseline
	// measurement began: the measurement does not cancel the hold.
	resumeMilliCPU, resumeCap int64
	resumeHeldUntil           time.Time
	// The last crossing of the node's own target and the hold it was given.
	lastCrossing time.Time
	lastHold     time.Duration
}

// StateBaseline is a Controller's state while a baseline is measured.
const StateBaseline = "baseline"

// NUMASample is what online work uses on one NUMA node's shared pool.
type NUMASample struct {
	// PoolMilliCPU is the size of the pool online and reclaimed work share on this node
	// (its CPUs less system-reserved and dedicated ones).
	PoolMilliCPU int64
	// OnlineMilliCPU is what everything but reclaimed work used on those CPUs.
	OnlineMilliCPU int64
}

// Sample is one slow-loop measurement of the node.
type Sample struct {
	Time time.Time
	NUMA map[int]NUMASample
	// MemoryTotalBytes is the node's memory; MemoryOnlineBytes what everything but reclaimed
	// work uses.
	MemoryTotalBytes  int64
	MemoryOnlineBytes int64
}

// Plan is what the node lends right now.
type Plan struct {
	ReclaimedMilliCPU map[int]int64 // per NUMA node
	ReclaimedMemory   int64
}

// TotalMilliCPU is the CPU lent on all NUMA nodes together.
func (p Plan) TotalMilliCPU() int64 {
	var t int64
	for _, v := range p.ReclaimedMilliCPU {
		t += v
	}
	return t
}

// Change is a decision the advisor made, for the action log.
type Change struct {
	Kind   string // "grow" or "shrink"
	Reason string
}

// Slow-loop changes smaller than these are noise in the usage figures, well inside the safety
// margins: ignoring them keeps cgroup writes and the action log for real changes (a grow of a
// few MiB would log "21.2GiB -> 21.2GiB"). The fast path and resets are not damped.
const (
	cpuDeadband    = 50       // millicores
	memoryDeadband = 64 << 20 // bytes
)

type point struct {
	t time.Time
	v int64
}

// Advisor keeps the usage history and the current plan. It is not safe for concurrent use:
// the agent serializes calls.
type Advisor struct {
	cfg    Config
	cpu    map[int][]point // online usage history per NUMA node
	mem    []point
	pool   map[int]int64
	plan   Plan
	memCap int64 // memory the node could lend (total less reserved)
	// memKeep is the least memory limit that leaves reclaimed work what it holds (KeepMemory).
	memKeep int64
	primed  bool // a fresh sample has arrived since start or since the last Reset
	ctl     map[int]*Controller
	// lastCut is when lending was last cut for online work's sake on any NUMA node: by the
	// fast path, the interference feedback or CPU pressure (not the slow loop following usage).
	lastCut time.Time
	// core is the CPU of one whole core when lending is in whole cores (the cores
	// mechanism), 0 otherwise; coreUtilization the most of the cores it keeps online work
	// may use then.
	core            int64
	coreUtilization float64
}

// New returns an advisor whose plan lends the minimum until the first fresh sample.
func New(cfg Config) *Advisor {
	a := &Advisor{cfg: cfg, cpu: map[int][]point{}, pool: map[int]int64{}, ctl: map[int]*Controller{}}
	a.plan = Plan{ReclaimedMilliCPU: map[int]int64{}, ReclaimedMemory: cfg.MinReclaimedBytes}
	return a
}

// Init tells the advisor each NUMA node's pool size before any sample, so the plan lends
// each node its minimum from the start.
func (a *Advisor) Init(poolMilliCPU map[int]int64) {
	for node, pool := range poolMilliCPU {
		a.pool[node] = pool
		if _, ok := a.plan.ReclaimedMilliCPU[node]; !ok {
			a.plan.ReclaimedMilliCPU[node] = a.minCPU(node)
		}
	}
}

// LendWholeCores makes every NUMA node lend whole cores of coreMilli each, or its minimum
// (the cores mechanism gives reclaimed work cores of its own, so a fraction would be lent on
// paper only, and a fraction of a core online work runs on is what hurt it); 0 lends in
// millicores again. What is lent now is rounded down at once. A grow is then a whole core.
//
// Online work then runs on fewer cores, where its queue grows fast with load: it keeps
// enough that its peak use is at most utilization (0..1] of them, and a spike over that
// share cuts (when that is under SpikeThreshold).
func (a *Advisor) LendWholeCores(coreMilli int64, utilization float64) {
	a.core, a.coreUtilization = max(coreMilli, 0), utilization
	for node, cur := range a.plan.ReclaimedMilliCPU {
		a.plan.ReclaimedMilliCPU[node] = a.wholeCores(node, cur)
	}
}

// wholeCores rounds v down to whole cores when lending is in cores, never under the node's
// minimum.
func (a *Advisor) wholeCores(node int, v int64) int64 {
	if a.core <= 0 {
		return v
	}
	return max(v-v%a.core, a.minCPU(node))
}

// PlannedMilliCPU is the CPU the plan lends over every NUMA node, in millicores, without
// copying the plan.
func (a *Advisor) PlannedMilliCPU() int64 { return a.plan.TotalMilliCPU() }

// Plan returns a copy of the current plan.
func (a *Advisor) Plan() Plan {
	p := Plan{ReclaimedMilliCPU: make(map[int]int64, len(a.plan.ReclaimedMilliCPU)), ReclaimedMemory: a.plan.ReclaimedMemory}
	for k, v := range a.plan.ReclaimedMilliCPU {
		p.ReclaimedMilliCPU[k] = v
	}
	return p
}

// Demand is the predicted online CPU demand per NUMA node the node publishes (peak over
// PeakWindow plus margins), in millicores.
func (a *Advisor) Demand() map[int]int64 {
	out := make(map[int]int64, len(a.cpu))
	for node, h := range a.cpu {
		out[node] = a.predict(peakOf(h))
	}
	return out
}

// MemoryDemand is the predicted online memory demand (peak plus margin), in bytes.
func (a *Advisor) MemoryDemand() int64 { return peakOf(a.mem) + a.cfg.SafetyMarginBytes }

// KeepMemory tells the advisor the least memory limit that leaves reclaimed work what it holds
// now. Memory is taken back only for online demand (Step): a start, stale metrics or failing
// writes stop its growth but never shrink it under this, since memory cannot be taken from
// running work without killing it (a v1 limit under what it holds is refused, a v2 one
// OOM-kills, and the agent evicts reclaimed work that holds more than is lent). Before the
// first fresh sample since the start it raises the plan to it: an agent restarted beside a
// job holding gigabytes lends it what it holds, and grows from there. Later it never raises
// the plan: a shrink for online demand stands until the eviction it calls for.
func (a *Advisor) KeepMemory(bytes int64) {
	a.memKeep = bytes
	if len(a.mem) == 0 { // no sample stepped yet
		a.plan.ReclaimedMemory = max(a.plan.ReclaimedMemory, bytes)
	}
}

// MemoryKept is the last KeepMemory figure.
func (a *Advisor) MemoryKept() int64 { return a.memKeep }

// Primed says whether the plan rests on fresh metrics (false after New or Reset).
func (a *Advisor) Primed() bool { return a.primed }

// minCPU is the floor of what a NUMA node lends: never more than its pool.
// LendsAboveMinimum says whether any NUMA node lends more than its minimum: something a
// spike could cut. The fast path asks every tick, so it allocates nothing.
func (a *Advisor) LendsAboveMinimum() bool {
	for node, lent := range a.plan.ReclaimedMilliCPU {
		if lent > a.minCPU(node) {
			return true
		}
	}
	return false
}

// LastCut is the latest time lending was cut for online work's sake on any NUMA node (by the
// fast path, the interference feedback or CPU pressure), zero if never.
func (a *Advisor) LastCut() time.Time { return a.lastCut }

// LendsMinimum says whether node lends only its minimum CPU (or nothing is planned for it).
func (a *Advisor) LendsMinimum(node int) bool {
	return a.plan.ReclaimedMilliCPU[node] <= a.minCPU(node)
}

func (a *Advisor) minCPU(node int) int64 {
	return min(a.cfg.MinReclaimedMilliCPU, a.pool[node])
}

// Reset drops the plan to its minimum, as when metrics go stale: with no fresh view of
// online demand, lending must be as small as it can be. Memory stops at what reclaimed work
// holds (KeepMemory).
func (a *Advisor) Reset(reason string) []Change {
	var changes []Change
	for node, cur := range a.plan.ReclaimedMilliCPU {
		if m := a.minCPU(node); cur > m {
			a.plan.ReclaimedMilliCPU[node] = m
			changes = append(changes, Change{"shrink", fmt.Sprintf("numa %d: %s: reclaimed CPU %dm -> %dm (minimum)", node, reason, cur, m)})
		}
	}
	if cur, keep := a.plan.ReclaimedMemory, max(a.cfg.MinReclaimedBytes, a.memKeep); cur > keep {
		a.plan.ReclaimedMemory = keep
		floor := "minimum"
		if keep > a.cfg.MinReclaimedBytes {
			floor = "what reclaimed work holds"
		}
		changes = append(changes, Change{"shrink", fmt.Sprintf("%s: reclaimed memory %s -> %s (%s)", reason, bytes(cur), bytes(keep), floor)})
	}
	a.primed = false
	return changes
}

// Step folds a slow-loop sample into the history and moves the plan toward the target:
// down at once, up by at most one step.
func (a *Advisor) Step(s Sample) []Change {
	var changes []Change
	nodes := make([]int, 0, len(s.NUMA))
	for n := range s.NUMA {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	for _, node := range nodes {
		ns := s.NUMA[node]
		a.pool[node] = ns.PoolMilliCPU
		a.cpu[node] = record(a.cpu[node], s.Time, ns.OnlineMilliCPU, a.cfg.PeakWindow)
		peak := a.limitPeak(node)
		target := a.cpuTarget(node, peak)
		cur, known := a.plan.ReclaimedMilliCPU[node]
		if !known {
			cur = a.minCPU(node)
		}
		next, kind := approach(cur, target, a.cfg.GrowStepMilliCPU, cpuDeadband)
		if a.core > 0 && kind == "grow" {
			// In whole cores a grow is one core: a grow of less would round to none.
			next = min(cur-cur%a.core+a.core, target)
		}
		if kind != "" {
			rule := fmt.Sprintf("online peak %dm of pool %dm over %s", peak, ns.PoolMilliCPU, a.limitWindow())
			if c := a.controller(node); c.CapMilliCPU < a.usageCeiling(node, peak) {
				rule = fmt.Sprintf("interference cap %dm (%s, worst %s)", c.CapMilliCPU, c.State, c.Worst)
			}
			changes = append(changes, Change{kind, fmt.Sprintf("numa %d: %s: reclaimed CPU %dm -> %dm", node, rule, cur, next)})
		}
		a.plan.ReclaimedMilliCPU[node] = next
	}
	for node := range a.plan.ReclaimedMilliCPU {
		if _, ok := s.NUMA[node]; !ok {
			delete(a.plan.ReclaimedMilliCPU, node)
		}
	}

	a.mem = record(a.mem, s.Time, s.MemoryOnlineBytes, a.cfg.PeakWindow)
	a.memCap = s.MemoryTotalBytes - a.cfg.ReservedSystemBytes
	peak := peakOf(a.mem)
	target := max(a.memCap-peak-a.cfg.SafetyMarginBytes, a.cfg.MinReclaimedBytes)
	cur := a.plan.ReclaimedMemory
	next, kind := approach(cur, target, a.cfg.GrowStepBytes, memoryDeadband)
	if kind != "" {
		changes = append(changes, Change{kind, fmt.Sprintf("online memory peak %s of %s: reclaimed memory %s -> %s", bytes(peak), bytes(s.MemoryTotalBytes), bytes(cur), bytes(next))})
	}
	a.plan.ReclaimedMemory = next
	a.primed = true
	return changes
}

// approach moves cur toward target: down at once, up by at most step, and not at all by less
// than deadband either way. kind is "shrink", "grow" or "" when nothing moved.
func approach(cur, target, step, deadband int64) (next int64, kind string) {
	switch {
	case target < cur && cur-target < deadband, target > cur && target-cur < deadband:
		// Noise, not a change of demand: keep the plan (and the action log) still.
		return cur, ""
	case target < cur:
		return target, "shrink"
	case target > cur:
		return min(cur+step, target), "grow"
	}
	return cur, ""
}

// cpuTarget is what a node can lend given an online demand: its pool less the demand with
// margins (the usage ceiling), no more than the interference feedback allows, never under
// the minimum.
func (a *Advisor) cpuTarget(node int, demand int64) int64 {
	return a.wholeCores(node, max(min(a.usageCeiling(node, demand), a.controller(node).CapMilliCPU), a.minCPU(node)))
}

// usageCeiling is the pool less the predicted online demand: interference feedback never
// lends more than this, whatever the indicators say.
func (a *Advisor) usageCeiling(node int, demand int64) int64 {
	need := a.predict(demand)
	if a.inCores() {
		need = max(need, int64(float64(demand)/a.coreUtilization))
	}
	return min(max(a.pool[node]-need, a.minCPU(node)), a.pool[node])
}

// inCores says whether online work is held to coreUtilization of the cores it keeps.
func (a *Advisor) inCores() bool { return a.core > 0 && a.coreUtilization > 0 }

// spikeThreshold is the share of what online work kept above which a spike cuts.
func (a *Advisor) spikeThreshold() float64 {
	if a.inCores() {
		return min(a.cfg.SpikeThreshold, a.coreUtilization)
	}
	return a.cfg.SpikeThreshold
}

// controller is node's feedback state; a node starts uncapped (lending still starts at the
// minimum and grows a step at a time).
func (a *Advisor) controller(node int) *Controller {
	c, ok := a.ctl[node]
	if !ok {
		c = &Controller{CapMilliCPU: a.pool[node]}
		a.ctl[node] = c
	}
	return c
}

// Controllers returns a copy of each NUMA node's feedback state.
func (a *Advisor) Controllers() map[int]Controller {
	out := make(map[int]Controller, len(a.ctl))
	for n, c := range a.ctl {
		out[n] = *c
	}
	return out
}

// UsageCeiling is one of a node's usage ceilings with its inputs, for status.
type UsageCeiling struct {
	MilliCPU          int64         // the pool less PredictedMilliCPU (or CoresMilliCPU), at least the minimum
	PredictedMilliCPU int64         // PeakMilliCPU with the safety margins
	PeakMilliCPU      int64         // online usage peak over Window
	Window            time.Duration // LimitWindow or PeakWindow
	// CoresMilliCPU is what online work keeps under the cores mechanism when that is more
	// than PredictedMilliCPU: PeakMilliCPU over the core utilization (0 otherwise).
	CoresMilliCPU int64
	// AtMinimum: the pool less what online work keeps is under the node's minimum, which
	// is lent instead.
	AtMinimum bool
}

// Ceilings says what bounds a node's lending, for status: the usage ceiling of its limits
// (over LimitWindow), the one it publishes (over PeakWindow), and the interference cap.
func (a *Advisor) Ceilings(node int) (limit, published UsageCeiling, interferenceCap int64) {
	ceiling := func(peak int64, window time.Duration) UsageCeiling {
		u := UsageCeiling{MilliCPU: a.usageCeiling(node, peak), PredictedMilliCPU: a.predict(peak), PeakMilliCPU: peak, Window: window}
		keep := u.PredictedMilliCPU
		if a.inCores() {
			if c := int64(float64(peak) / a.coreUtilization); c > keep {
				u.CoresMilliCPU, keep = c, c
			}
		}
		u.AtMinimum = a.pool[node]-keep < a.minCPU(node)
		return u
	}
	return ceiling(a.limitPeak(node), a.limitWindow()), ceiling(peakOf(a.cpu[node]), a.cfg.PeakWindow), a.controller(node).CapMilliCPU
}

// limitWindow is how far back the plan's usage ceiling looks.
func (a *Advisor) limitWindow() time.Duration {
	if a.cfg.LimitWindow <= 0 || a.cfg.LimitWindow > a.cfg.PeakWindow {
		return a.cfg.PeakWindow
	}
	return a.cfg.LimitWindow
}

// limitPeak is node's online usage peak over LimitWindow, up to its latest reading.
func (a *Advisor) limitPeak(node int) int64 {
	h := a.cpu[node]
	if len(h) == 0 {
		return 0
	}
	since := h[len(h)-1].t.Add(-a.limitWindow())
	var p int64
	for _, x := range h {
		if !x.t.Before(since) {
			p = max(p, x.v)
		}
	}
	return p
}

// Interfere is the feedback step for one NUMA node with its online work's indicators. When
// one crosses its target the node's lending is cut at once to Cut times what it lends (not
// under the minimum) and may not grow for a while (holdAfter); while every indicator is
// under Slack of the way from its baseline (0 without one) to its target, or there is none,
// the cap grows by one step toward the pool. It returns the cut, or nil when lending did not shrink.
func (a *Advisor) Interfere(now time.Time, node int, indicators []Indicator) *Change {
	c := a.controller(node)
	if c.State == StateBaseline {
		return nil // lending is at its minimum already, and stays there until EndBaseline
	}
	pool := a.pool[node]
	c.At, c.Worst = now, Indicator{}
	for _, ind := range indicators {
		if ind.load() > c.Worst.load() || c.Worst.Name == "" {
			c.Worst = ind
		}
	}
	worst, used, ownCrossing := c.Worst.load(), 0.0, false
	for _, ind := range indicators {
		used = max(used, ind.headroomUsed())
		ownCrossing = ownCrossing || ind.load() > 1 && !ind.Borrowed
	}
	switch {
	case worst > 1:
		c.State = "cut"
		cur, ok := a.plan.ReclaimedMilliCPU[node]
		if !ok {
			return nil
		}
		// Judged only against baselines of other load levels, a crossing gets no hold: the
		// readings at the minimum that follow measure this level's own, and the slack rule
		// decides growth then.
		var hold time.Duration
		held := "no hold: baseline borrowed from another load level"
		if ownCrossing {
			hold = a.holdAfter(c, now)
			held = fmt.Sprintf("no growth for %s", hold)
		}
		next := a.wholeCores(node, max(int64(float64(cur)*a.cfg.Control.Cut), a.minCPU(node)))
		c.CapMilliCPU = next
		if until := now.Add(hold); until.After(c.HeldUntil) {
			c.HeldUntil = until
		}
		if next >= cur {
			return nil
		}
		a.plan.ReclaimedMilliCPU[node] = next
		a.lastCut = now
		reason := fmt.Sprintf("numa %d: %s > target: reclaimed CPU %dm -> %dm (x%.2f, %s)", node, c.Worst, cur, next, a.cfg.Control.Cut, held)
		c.LastCut, c.LastCutAt = reason, now
		return &Change{"shrink", reason}
	case now.Before(c.HeldUntil) || used >= a.cfg.Control.Slack:
		c.State = "hold"
	default:
		c.State = "grow"
		c.CapMilliCPU = min(c.CapMilliCPU+a.cfg.GrowStepMilliCPU, pool)
	}
	return nil
}

// holdAfter is the hold after a crossing at now: FirstHold after one that follows no other
// within Hold, otherwise twice the last hold, up to Hold.
func (a *Advisor) holdAfter(c *Controller, now time.Time) time.Duration {
	longest, first := a.cfg.Control.Hold, a.cfg.Control.FirstHold
	if first <= 0 || first > longest {
		first = longest
	}
	hold := first
	if !c.lastCrossing.IsZero() && now.Sub(c.lastCrossing) < longest {
		hold = min(max(2*c.lastHold, first), longest)
	}
	c.lastCrossing, c.lastHold = now, hold
	return hold
}

// Baseline holds node's lending at its minimum until EndBaseline, so online work's own
// indicators can be measured with nothing lent (the baseline its targets are relative to).
// It returns the shrink, or nil when the node lent its minimum already.
func (a *Advisor) Baseline(now time.Time, node int, until time.Time) *Change {
	c := a.controller(node)
	cur, ok := a.plan.ReclaimedMilliCPU[node]
	if !ok || c.State == StateBaseline {
		return nil
	}
	c.resumeMilliCPU, c.resumeCap, c.resumeHeldUntil = cur, c.CapMilliCPU, c.HeldUntil
	m := a.minCPU(node)
	c.State, c.At, c.HeldUntil, c.CapMilliCPU = StateBaseline, now, until, m
	if cur <= m {
		return nil
	}
	a.plan.ReclaimedMilliCPU[node] = m
	return &Change{"shrink", fmt.Sprintf("numa %d: measuring online work's own run-queue wait with nothing lent until %s: reclaimed CPU %dm -> %dm",
		node, until.Format("15:04:05.000"), cur, m)}
}

// Vouched is the plan as the node reports it to the scheduler and the arbiter: never above
// the published usage ceiling (online peak over PeakWindow), however far a dip lets the limits
// go. A node measuring its baseline vouches for what it lent before, since the measurement is
// a dip of a few seconds, not a change of what it can lend.
func (a *Advisor) Vouched() Plan {
	p := a.Plan()
	for node, lent := range p.ReclaimedMilliCPU {
		if c := a.ctl[node]; c != nil && c.State == StateBaseline {
			lent = max(lent, c.resumeMilliCPU)
		}
		p.ReclaimedMilliCPU[node] = a.wholeCores(node, min(lent, a.usageCeiling(node, peakOf(a.cpu[node]))))
	}
	return p
}

// EndBaseline gives node back what it lent when Baseline began, as far as the usage ceiling
// allows now (a spike meanwhile keeps it down); with stale metrics it stays at the minimum.
// It returns the grow, or nil.
func (a *Advisor) EndBaseline(now time.Time, node int) *Change {
	c := a.controller(node)
	if c.State != StateBaseline {
		return nil
	}
	c.State, c.At, c.HeldUntil, c.CapMilliCPU = "hold", now, time.Time{}, c.resumeCap
	if now.Before(c.resumeHeldUntil) {
		c.HeldUntil = c.resumeHeldUntil
	}
	cur := a.plan.ReclaimedMilliCPU[node]
	next := cur
	if a.primed {
		next = max(cur, min(c.resumeMilliCPU, a.cpuTarget(node, a.limitPeak(node))))
	}
	if next == cur {
		return nil
	}
	a.plan.ReclaimedMilliCPU[node] = next
	return &Change{"grow", fmt.Sprintf("numa %d: baseline measured: reclaimed CPU %dm -> %dm (what it lent before, within the usage ceiling)", node, cur, next)}
}

// predict adds the safety margins to an observed online demand.
func (a *Advisor) predict(demand int64) int64 {
	return int64(float64(demand)*(1+a.cfg.SafetyMarginRatio)) + a.cfg.SafetyMarginMilliCPU
}

// SpikeRates is online work's CPU use on a NUMA node as the fast path sees it: over its
// window and over the shorter burst window (0 when that is off or not covered yet).
type SpikeRates struct {
	WindowMilli, BurstMilli int64
	Window, Burst           time.Duration // the windows' lengths, for the reason
}

// Spike is the fast path. It shrinks a node's lending at once when online work crosses
// either of two thresholds of the CPU it kept for itself:
//   - over the fast window, the spike threshold of it;
//   - over the burst window, all of it.
//
// The burst window sees a sudden spike in a third of the time the fast window needs, at a
// threshold high enough that a busy but unsaturated workload does not cross it. The node's
// lending shrinks to what the new demand leaves, and the usage enters the history so the
// slow loop does not grow it straight back. It returns nil when nothing changed.
func (a *Advisor) Spike(now time.Time, node int, r SpikeRates) *Change {
	cur, ok := a.plan.ReclaimedMilliCPU[node]
	if !ok {
		return nil
	}
	kept := a.pool[node] - cur
	var why string
	switch {
	case float64(r.WindowMilli) > a.spikeThreshold()*float64(kept):
		why = fmt.Sprintf("online spike %dm over %v > %.0f%% of the %dm it kept", r.WindowMilli, r.Window, 100*a.spikeThreshold(), kept)
	case r.BurstMilli > kept:
		why = fmt.Sprintf("online burst %dm over %v > the %dm it kept", r.BurstMilli, r.Burst, kept)
	default:
		return nil
	}
	demand := max(r.WindowMilli, r.BurstMilli)
	a.cpu[node] = record(a.cpu[node], now, demand, a.cfg.PeakWindow)
	target := a.cpuTarget(node, demand)
	if target >= cur {
		return nil
	}
	a.plan.ReclaimedMilliCPU[node] = target
	a.lastCut = now
	return &Change{"shrink", fmt.Sprintf("numa %d: %s: reclaimed CPU %dm -> %dm", node, why, cur, target)}
}

// SpikeLimits are node's share of online use at or below which Spike cuts nothing: a window
// rate above windowMilli or a burst above burstMilli may cut (ok false: the node lends
// nothing Spike could cut). The fast path's watch wakes the agent only above them.
func (a *Advisor) SpikeLimits(node int) (windowMilli, burstMilli int64, ok bool) {
	cur, ok := a.plan.ReclaimedMilliCPU[node]
	if !ok {
		return 0, 0, false
	}
	kept := a.pool[node] - cur
	return int64(a.spikeThreshold() * float64(kept)), kept, true
}

// record appends a point and drops those older than the window.
func record(h []point, t time.Time, v int64, window time.Duration) []point {
	h = append(h, point{t, v})
	cut := 0
	for cut < len(h) && t.Sub(h[cut].t) > window {
		cut++
	}
	return h[cut:]
}

func peakOf(h []point) int64 {
	var p int64
	for _, x := range h {
		p = max(p, x.v)
	}
	return p
}

func bytes(n int64) string {
	const gi, mi = 1 << 30, 1 << 20
	if n >= gi || n <= -gi {
		return fmt.Sprintf("%.1fGiB", float64(n)/gi)
	}
	return fmt.Sprintf("%dMiB", n/mi)
}

// Pressure is the fast path's other signal: the kernel reports online work stalled waiting for
// CPU. Lending drops to the minimum at once and the full pool enters the history as demand, so
// it grows back only after the limit window (and is published again after the peak window).
func (a *Advisor) Pressure(now time.Time, what string) []Change {
	var changes []Change
	for node, cur := range a.plan.ReclaimedMilliCPU {
		a.cpu[node] = record(a.cpu[node], now, a.pool[node], a.cfg.PeakWindow)
		if m := a.minCPU(node); cur > m {
			a.plan.ReclaimedMilliCPU[node] = m
			a.lastCut = now
			changes = append(changes, Change{"shrink", fmt.Sprintf("numa %d: %s: reclaimed CPU %dm -> %dm (minimum)", node, what, cur, m)})
		}
	}
	return changes
}
