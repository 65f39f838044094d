// Package mechanism chooses, on the running node, how reclaimed work is held to the CPU it is
// lent (cpu.mechanism: the idle class, shares, or a CFS quota). Which protects online work
// best differs between machines and workloads: on one machine of the same kind a quota kept a
// web server's tail at alone's, on another it hurt a database's 4.45x. So the agent does not
// assume: with cpu.mechanism auto it tries each candidate in turn, while the interference
// feedback sizes lending as always, and keeps the one that lends the largest share of the
// usage ceiling among those that hurt online work least.
//
// Two figures are kept per candidate. The harm: online work's run-queue wait over its own
// wait with nothing lent. The feedback holds that under its targets whatever the mechanism,
// but under the targets a mechanism can still cost the tail: sharing a core with reclaimed
// work, even at the idle class, lengthened a web server's wakeups by a third and doubled its
// p99, where whole cores of their own cost it almost nothing (docs/benchmark.md#sharing-a-core).
// So a candidate whose harm is more than WaitTolerance above the least harm of any candidate
// is not chosen. The lent share: among the rest, the one the feedback let lend most of what
// online usage allowed. The share, not the amount, is scored, so online load moving between
// trials does not decide the choice.
//
// Where online work has an SLO probe (an operator's own latency signal), the probe speaks
// for the harm instead of the wait: a candidate under which the share of the probes' answers
// slower than their targets was more than SLOTolerance above the least of any candidate's is
// not chosen. Every answer counts once, so a tail the median of a few answers would hide
// still shows. The wait is a proxy whose price in latency differs between machines; an SLO
// that holds under each candidate says the lending a tighter mechanism gives up buys nothing
// the operator asked for. An SLO missed in most answers under every candidate alike (a target
// under what the service answers even with nothing lent) cannot tell them apart, however much
// one hurts more: then the wait decides, as without a probe.
//
// It is pure logic; the interference loop owns a Chooser and feeds it readings.
package mechanism

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Config says what to try and how long.
type Config struct {
	// Candidates, in order of preference: the first one also wins a tie.
	Candidates []string
	// Trial is how long each candidate runs at a time; Rounds how many times each is tried
	// in one exploration (interleaved, so a slow drift of online load affects all alike).
	Trial  time.Duration
	Rounds int
	// Every is how long a choice holds before the candidates are tried again (0: never).
	Every time.Duration
	// Tie: a candidate must beat the earlier one's lent share by more than this to be chosen.
	Tie float64
	// WaitTolerance: a candidate under which online work's run-queue wait over its baseline
	// was more than this fraction above the least of any candidate's is not chosen (0.2: up
	// to 1.2x the least).
	WaitTolerance float64
	// SLOTolerance: where every candidate has SLO probe answers, a candidate under which the
	// share of answers slower than their targets was more than this above the least of any
	// candidate's is not chosen (0.05: five answers in a hundred).
	SLOTolerance float64
}

// Reading is one interval's figures under the current mechanism.
type Reading struct {
	// LentShare is the share (0..1) of what its usage ceiling allowed that the node lent.
	LentShare float64
	// WaitOverBaseline is online work's run-queue wait over its own wait with nothing lent
	// (1: no harm); 0 when no online workload has a baseline yet.
	WaitOverBaseline float64
	// ProbeAnswers is how many answers online workloads' SLO probes got since the last
	// reading, ProbeOverTarget how many of them were slower than their target.
	ProbeAnswers, ProbeOverTarget int
}

// sloMissed: where the probes' answers were over target more often than this under every
// candidate, and no candidate's share stood out by more than the tolerance, the SLO is missed
// alike under all of them and says nothing about which hurts more.
const sloMissed = 0.5

// harmlessWait: run-queue wait under this per unit of CPU run counts as none in the harm, so
// that a workload that almost never waits (a CPU spinner: 0.002 alone) does not show a
// fivefold harm for a few wakeups. The servers of the benchmark wait 0.03-0.33 alone.
const harmlessWait = 0.02

// Harm sums one interval's online run-queue wait against what it would be at the workloads'
// baselines, each workload weighted by the CPU it ran, and their SLO probes' answers: a
// Reading's figures of harm.
type Harm struct {
	waited, atBaseline float64
	answers, over      int
}

// Add counts one online workload's wait and baseline (per unit of CPU run) over runMilli
// millicores run.
func (h *Harm) Add(wait, baseline float64, runMilli int64) {
	h.waited += max(wait, harmlessWait) * float64(runMilli)
	h.atBaseline += max(baseline, harmlessWait) * float64(runMilli)
}

// Reading is the harm as a reading, without its lent share.
func (h Harm) Reading() Reading {
	return Reading{WaitOverBaseline: h.WaitOverBaseline(), ProbeAnswers: h.answers, ProbeOverTarget: h.over}
}

// AddProbe counts one online workload's SLO probe answers, over of them slower than its target.
func (h *Harm) AddProbe(answers, over int) { h.answers, h.over = h.answers+answers, h.over+over }

// WaitOverBaseline is the weighted wait over the weighted baselines; 0 when no workload with
// a baseline ran.
func (h Harm) WaitOverBaseline() float64 {
	if h.atBaseline <= 0 {
		return 0
	}
	return h.waited / h.atBaseline
}

// Chooser tries the candidates and keeps the best. Not safe for concurrent use.
type Chooser struct {
	cfg Config

	current    int       // index into Candidates
	exploring  bool      // trying candidates in turn; false once chosen
	trialStart time.Time // zero before the first Step
	trials     int       // trials finished in this exploration
	chosenAt   time.Time

	// Per candidate in this exploration: the sum and count of its lent shares, of its
	// readings' harm (those with a baseline), and its SLO probe answers and those of them
	// slower than their targets.
	share, wait      []float64
	nShare, nWait    []int
	answers, overSLO []int
	// Scores of the last finished exploration (absent: no reading had anything to lend).
	scores map[string]Score
	reason string
}

// New starts an exploration with the first candidate.
func New(cfg Config) *Chooser {
	c := &Chooser{cfg: cfg}
	c.explore()
	return c
}

func (c *Chooser) explore() {
	c.exploring, c.current, c.trials = true, 0, 0
	k := len(c.cfg.Candidates)
	c.share, c.wait, c.nShare, c.nWait = make([]float64, k), make([]float64, k), make([]int, k), make([]int, k)
	c.answers, c.overSLO = make([]int, k), make([]int, k)
	c.reason = fmt.Sprintf("trying %s (trial 1 of %d)", c.cfg.Candidates[0], c.total())
}

func (c *Chooser) total() int { return c.cfg.Rounds * len(c.cfg.Candidates) }

// Current is the mechanism to use now.
func (c *Chooser) Current() string { return c.cfg.Candidates[c.current] }

// Reason says what the chooser is doing and why, with its figures, for status.
func (c *Chooser) Reason() string { return c.reason }

// Score is one candidate's figures over an exploration.
type Score struct {
	LentShare float64 // mean lent share
	// WaitOverBaseline is the mean harm of its readings with a baseline (0: none had one).
	WaitOverBaseline float64
	// Probed says whether SLO probes answered under it; OverSLO is the share of their answers
	// slower than their targets.
	Probed  bool
	OverSLO float64
}

// Scores are each candidate's figures in the last finished exploration.
func (c *Chooser) Scores() map[string]Score { return c.scores }

// Observe records one reading under the current mechanism. Call it only when the usage
// ceiling was above the minimum (there was something to lend) and lending was not held down
// for another reason (a baseline measurement, stale metrics). After the choice readings count
// for nothing.
func (c *Chooser) Observe(r Reading) {
	if !c.exploring {
		return
	}
	c.share[c.current] += min(max(r.LentShare, 0), 1)
	c.nShare[c.current]++
	if r.WaitOverBaseline > 0 {
		c.wait[c.current] += r.WaitOverBaseline
		c.nWait[c.current]++
	}
	c.answers[c.current] += r.ProbeAnswers
	c.overSLO[c.current] += r.ProbeOverTarget
}

// Step moves to the next trial when the current one is over, to the choice after the last
// one, and back to exploring when the choice is older than Every. It returns the mechanism to
// use now, whether it changed, and whether an exploration ended in a choice at this step
// (which may keep the mechanism of the last trial).
func (c *Chooser) Step(now time.Time) (mechanism string, changed, chose bool) {
	before := c.Current()
	switch {
	case c.trialStart.IsZero():
		c.trialStart = now
	case c.exploring && now.Sub(c.trialStart) >= c.cfg.Trial:
		c.trials++
		c.trialStart = now
		if c.trials < c.total() {
			c.current = c.trials % len(c.cfg.Candidates)
			c.reason = fmt.Sprintf("trying %s (trial %d of %d)", c.Current(), c.trials+1, c.total())
			break
		}
		c.choose(now)
		chose = true
	case !c.exploring && c.cfg.Every > 0 && now.Sub(c.chosenAt) >= c.cfg.Every:
		c.explore()
		c.trialStart = now
	}
	return c.Current(), c.Current() != before, chose
}

// choose keeps, among the candidates that hurt online work least, the one with the highest
// mean lent share; an earlier candidate wins unless a later one beats it by more than Tie. The
// harm is the SLO probes' where probes answered under every candidate with readings (unless
// they missed their targets alike under all, see sloMissed), else the run-queue wait where
// every one had some with a baseline; otherwise it cannot be compared, and the share alone
// decides. With no reading at all (nothing to lend the whole time) the first candidate stays.
func (c *Chooser) choose(now time.Time) {
	c.exploring, c.chosenAt = false, now
	c.scores = map[string]Score{}
	bySLO, byWait := true, true
	for i, name := range c.cfg.Candidates {
		if c.nShare[i] == 0 {
			continue
		}
		s := Score{LentShare: c.share[i] / float64(c.nShare[i])}
		if c.nWait[i] > 0 {
			s.WaitOverBaseline = c.wait[i] / float64(c.nWait[i])
		}
		if c.answers[i] > 0 {
			s.Probed, s.OverSLO = true, float64(c.overSLO[i])/float64(c.answers[i])
		}
		bySLO, byWait = bySLO && s.Probed, byWait && c.nWait[i] > 0
		c.scores[name] = s
	}
	if len(c.scores) == 0 {
		c.current = 0
		c.reason = fmt.Sprintf("kept %s: no reading had anything to lend in %d trials", c.Current(), c.total())
		return
	}
	missedAlike := bySLO && sloMissedAlike(c.scores, c.cfg.SLOTolerance)
	bySLO = bySLO && !missedAlike
	harm := func(s Score) float64 { return s.WaitOverBaseline }
	if bySLO {
		harm = func(s Score) float64 { return s.OverSLO }
	}
	least, leastName := 0.0, ""
	for _, name := range c.cfg.Candidates {
		if s, ok := c.scores[name]; ok && (leastName == "" || harm(s) < least) {
			least, leastName = harm(s), name
		}
	}
	// A candidate whose harm is over limit is not chosen: the SLO's tolerance is a share of
	// answers added to the least, the wait's a ratio of it; with neither, no limit.
	limit := math.Inf(1)
	switch {
	case bySLO:
		limit = least + c.cfg.SLOTolerance
	case byWait:
		limit = least * (1 + c.cfg.WaitTolerance)
	}
	best := -1
	var excluded []string
	for i, name := range c.cfg.Candidates {
		s, ok := c.scores[name]
		if !ok {
			continue
		}
		if harm(s) > limit {
			excluded = append(excluded, name)
			continue
		}
		if best < 0 || s.LentShare > c.scores[c.cfg.Candidates[best]].LentShare+c.cfg.Tie {
			best = i
		}
	}
	c.current = best
	c.reason = fmt.Sprintf("chose %s: %s", c.Current(), c.describe())
	if missedAlike {
		c.reason += fmt.Sprintf("; SLO probes over target in more than %s of answers under every candidate alike, so they do not tell the candidates apart", percent(sloMissed))
	}
	switch {
	case bySLO && len(excluded) > 0:
		c.reason += fmt.Sprintf("; left out, SLO probes over target in more than %s of answers (%s under %s): %s",
			percent(limit), percent(least), leastName, strings.Join(excluded, ", "))
	case bySLO:
		c.reason += "; the SLO probes weighed, not the wait"
	case !byWait:
		c.reason += "; the lent share alone decided (no baseline of online work's wait under every candidate)"
	case len(excluded) > 0:
		c.reason += fmt.Sprintf("; left out, online wait more than %.2fx that under %s: %s",
			1+c.cfg.WaitTolerance, leastName, strings.Join(excluded, ", "))
	}
}

// sloMissedAlike says whether the SLO probes were over target in more than sloMissed of their
// answers under every scored candidate, none more than tolerance above the least.
func sloMissedAlike(scores map[string]Score, tolerance float64) bool {
	least, most := math.Inf(1), math.Inf(-1)
	for _, s := range scores {
		least, most = min(least, s.OverSLO), max(most, s.OverSLO)
	}
	return least > sloMissed && most-least <= tolerance
}

func percent(share float64) string { return fmt.Sprintf("%.0f%%", 100*share) }

// describe gives each candidate's figures, for the reason.
func (c *Chooser) describe() string {
	var parts []string
	for _, name := range c.cfg.Candidates {
		s, ok := c.scores[name]
		if !ok {
			parts = append(parts, name+" -")
			continue
		}
		part := fmt.Sprintf("%s lent %.2f of the ceiling", name, s.LentShare)
		if s.WaitOverBaseline > 0 {
			part += fmt.Sprintf(", online wait %.2fx its baseline", s.WaitOverBaseline)
		}
		if s.Probed {
			part += fmt.Sprintf(", SLO probes over target in %s of answers", percent(s.OverSLO))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}
