package mechanism

import (
	"math"
	"strings"
	"testing"
	"time"
)

func testChooser() *Chooser {
	return New(Config{Candidates: []string{"quota", "idle", "shares"}, Trial: 10 * time.Second, Rounds: 2, Every: time.Hour, Tie: 0.05, WaitTolerance: 0.2})
}

// run feeds each trial the share its mechanism lends (no baselines) and returns the
// mechanisms in the order they were tried.
func run(c *Chooser, t0 time.Time, share map[string]float64) (tried []string, end time.Time) {
	readings := map[string]Reading{}
	for m, s := range share {
		readings[m] = Reading{LentShare: s}
	}
	return runReadings(c, t0, readings)
}

// runReadings feeds each trial of an exploration of 6 its mechanism's reading, 10 times.
func runReadings(c *Chooser, t0 time.Time, readings map[string]Reading) (tried []string, end time.Time) {
	now := t0
	c.Step(now)
	for i := 0; i < 6; i++ {
		tried = append(tried, c.Current())
		for s := 0; s < 10; s++ {
			c.Observe(readings[c.Current()])
		}
		now = now.Add(10 * time.Second)
		c.Step(now)
	}
	return tried, now
}

func TestTriesEachInTurnThenKeepsTheOneThatLendsMost(t *testing.T) {
	c := testChooser()
	t0 := time.Unix(1000, 0)
	tried, end := run(c, t0, map[string]float64{"quota": 0.4, "idle": 0.9, "shares": 0.7})
	if got := strings.Join(tried, ","); got != "quota,idle,shares,quota,idle,shares" {
		t.Fatalf("tried %s", got)
	}
	if c.Current() != "idle" || !strings.Contains(c.Reason(), "chose idle: quota lent 0.40 of the ceiling; idle lent 0.90 of the ceiling; shares lent 0.70 of the ceiling; the lent share alone decided") {
		t.Fatalf("chose %s: %s", c.Current(), c.Reason())
	}
	// Readings after the choice count for nothing, and the choice holds until Every.
	c.Observe(Reading{})
	if m, changed, chose := c.Step(end.Add(59 * time.Minute)); m != "idle" || changed || chose {
		t.Errorf("within Every: %s changed %v", m, changed)
	}
	if m, changed, chose := c.Step(end.Add(time.Hour)); m != "quota" || !changed || chose || !strings.Contains(c.Reason(), "trying quota (trial 1 of 6)") {
		t.Errorf("after Every: %s changed %v (%s)", m, changed, c.Reason())
	}
}

func TestATieKeepsTheEarlierCandidate(t *testing.T) {
	c := testChooser()
	run(c, time.Unix(1000, 0), map[string]float64{"quota": 0.95, "idle": 0.98, "shares": 0.97})
	if c.Current() != "quota" {
		t.Errorf("within the tie margin: chose %s (%s)", c.Current(), c.Reason())
	}
}

func TestNothingToLendKeepsTheFirst(t *testing.T) {
	c := testChooser()
	now := time.Unix(1000, 0)
	c.Step(now)
	for i := 0; i < 6; i++ {
		now = now.Add(10 * time.Second)
		c.Step(now)
	}
	if c.Current() != "quota" || !strings.Contains(c.Reason(), "no reading") || len(c.Scores()) != 0 {
		t.Errorf("no readings: %s (%s) %v", c.Current(), c.Reason(), c.Scores())
	}
}

func TestSharesAreClamped(t *testing.T) {
	c := New(Config{Candidates: []string{"quota", "idle"}, Trial: time.Second, Rounds: 1})
	now := time.Unix(1000, 0)
	c.Step(now)
	c.Observe(Reading{LentShare: 7}) // a ceiling that fell under what was lent
	c.Step(now.Add(time.Second))
	c.Observe(Reading{LentShare: -1})
	c.Step(now.Add(2 * time.Second))
	if s := c.Scores(); s["quota"].LentShare != 1 || s["idle"].LentShare != 0 || c.Current() != "quota" {
		t.Errorf("scores %v, chose %s", s, c.Current())
	}
}

// A candidate that lends more but lengthens online work's wait past the tolerance loses to
// one that hurts less; among those within it the lent share decides.
func TestTheWaitLeavesOutACandidateThatHurtsOnlineWork(t *testing.T) {
	c := testChooser()
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"quota":  {LentShare: 0.40, WaitOverBaseline: 1.10},
		"idle":   {LentShare: 0.90, WaitOverBaseline: 1.60}, // lends most, hurts most
		"shares": {LentShare: 0.70, WaitOverBaseline: 1.25}, // within 1.2x quota's wait
	})
	if c.Current() != "shares" {
		t.Fatalf("chose %s: %s", c.Current(), c.Reason())
	}
	want := "chose shares: quota lent 0.40 of the ceiling, online wait 1.10x its baseline; " +
		"idle lent 0.90 of the ceiling, online wait 1.60x its baseline; " +
		"shares lent 0.70 of the ceiling, online wait 1.25x its baseline; " +
		"left out, online wait more than 1.20x that under quota: idle"
	if c.Reason() != want {
		t.Errorf("reason\n got %s\nwant %s", c.Reason(), want)
	}
	if s := c.Scores()["idle"]; math.Abs(s.LentShare-0.9) > 1e-9 || math.Abs(s.WaitOverBaseline-1.6) > 1e-9 {
		t.Errorf("idle's score %+v", s)
	}
}

// Readings without a baseline do not count toward the wait, and a candidate with none at all
// makes the wait incomparable: the lent share alone decides.
func TestTheWaitIsWeighedOnlyWhenEveryCandidateHasOne(t *testing.T) {
	c := New(Config{Candidates: []string{"cores", "quota-on-cut"}, Trial: 10 * time.Second, Rounds: 3, WaitTolerance: 0.2})
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.5, WaitOverBaseline: 1.1},
		"quota-on-cut": {LentShare: 0.9},
	})
	if c.Current() != "quota-on-cut" || !strings.HasSuffix(c.Reason(), "the lent share alone decided (no baseline of online work's wait under every candidate)") {
		t.Errorf("chose %s: %s", c.Current(), c.Reason())
	}

	c = New(Config{Candidates: []string{"cores", "quota-on-cut"}, Trial: time.Second, Rounds: 1, WaitTolerance: 0.2})
	now := time.Unix(1000, 0)
	c.Step(now)
	c.Observe(Reading{LentShare: 0.5, WaitOverBaseline: 1.0})
	c.Step(now.Add(time.Second))
	// quota-on-cut: one reading near its baseline, one without a baseline at all: its
	// wait is the mean of the one that had one.
	c.Observe(Reading{LentShare: 0.9, WaitOverBaseline: 1.15})
	c.Observe(Reading{LentShare: 0.9})
	// The choice keeps the last trial's mechanism: no change, but a choice all the same.
	m, changed, chose := c.Step(now.Add(2 * time.Second))
	if s := c.Scores()["quota-on-cut"]; m != "quota-on-cut" || changed || !chose || math.Abs(s.WaitOverBaseline-1.15) > 1e-9 {
		t.Errorf("chose %s (changed %v, chose %v), quota-on-cut's score %+v: %s", m, changed, chose, s, c.Reason())
	}
}

// The harm weighs each workload by the CPU it ran, and waits under harmlessWait count as none.
func TestHarmWeighsByRunAndIgnoresTinyWaits(t *testing.T) {
	var h Harm
	if got := h.WaitOverBaseline(); got != 0 {
		t.Fatalf("no workload: %v, want 0", got)
	}
	h.Add(0.30, 0.10, 900)  // a busy server at 3x its baseline
	h.Add(0.01, 0.002, 100) // a spinner: both under harmlessWait, so no harm
	want := (0.30*900 + harmlessWait*100) / (0.10*900 + harmlessWait*100)
	if got := h.WaitOverBaseline(); math.Abs(got-want) > 1e-9 {
		t.Errorf("harm %v, want %v", got, want)
	}
	// SLO probe answers are summed over workloads.
	h.AddProbe(3, 1)
	h.AddProbe(2, 0)
	if r := h.Reading(); r.ProbeAnswers != 5 || r.ProbeOverTarget != 1 || math.Abs(r.WaitOverBaseline-want) > 1e-9 {
		t.Errorf("reading %+v", r)
	}
}

// Where online work has SLO probes answering under every candidate, they speak for the harm
// instead of the wait: a candidate that doubles the wait but keeps the SLO is chosen for what
// it lends, and one with more answers over target than the tolerance allows is left out.
func TestTheSLOProbesWeighInsteadOfTheWait(t *testing.T) {
	cfg := Config{Candidates: []string{"cores", "quota-on-cut"}, Trial: 10 * time.Second, Rounds: 3, Tie: 0.05, WaitTolerance: 0.2, SLOTolerance: 0.05}
	c := New(cfg)
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.2, WaitOverBaseline: 1.1, ProbeAnswers: 1},
		"quota-on-cut": {LentShare: 0.7, WaitOverBaseline: 2.5, ProbeAnswers: 1}, // the wait would leave it out
	})
	want := "chose quota-on-cut: cores lent 0.20 of the ceiling, online wait 1.10x its baseline, SLO probes over target in 0% of answers; " +
		"quota-on-cut lent 0.70 of the ceiling, online wait 2.50x its baseline, SLO probes over target in 0% of answers; " +
		"the SLO probes weighed, not the wait"
	if c.Current() != "quota-on-cut" || c.Reason() != want {
		t.Errorf("both within the SLO: chose %s\n got %s\nwant %s", c.Current(), c.Reason(), want)
	}

	// Every answer counts once, over readings of any number of answers: under quota-on-cut
	// 9 of 90 over target (10%), under cores 1 of 60 (1.7%): more than the 5% tolerance apart.
	readings := map[string]Reading{
		"cores":        {LentShare: 0.2, ProbeAnswers: 2},
		"quota-on-cut": {LentShare: 0.7, ProbeAnswers: 3},
	}
	over := map[string]int{"cores": 1, "quota-on-cut": 9}
	feed := func(c *Chooser) {
		now := time.Unix(1000, 0)
		c.Step(now)
		for trial := 0; trial < 6; trial++ {
			m := c.Current()
			for i := 0; i < 10; i++ {
				r := readings[m]
				if i < over[m] && trial < 2 { // the first trial of each
					r.ProbeOverTarget = 1
				}
				c.Observe(r)
			}
			now = now.Add(10 * time.Second)
			c.Step(now)
		}
	}
	c = New(cfg)
	feed(c)
	s := c.Scores()["quota-on-cut"]
	if c.Current() != "cores" || !s.Probed || math.Abs(s.OverSLO-0.1) > 1e-9 || math.Abs(c.Scores()["cores"].OverSLO-1.0/60) > 1e-9 ||
		!strings.HasSuffix(c.Reason(), "; left out, SLO probes over target in more than 7% of answers (2% under cores): quota-on-cut") {
		t.Errorf("10%% of answers over target against 2%%: chose %s, scores %+v: %s", c.Current(), c.Scores(), c.Reason())
	}

	// Within the tolerance the share decides again.
	cfg.SLOTolerance = 0.15
	c = New(cfg)
	feed(c)
	if c.Current() != "quota-on-cut" {
		t.Errorf("within a 15%% tolerance: chose %s: %s", c.Current(), c.Reason())
	}
}

// A candidate under which no probe answered (the probe started later) makes the SLO
// incomparable: the wait is weighed as without probes.
func TestTheSLOIsWeighedOnlyWhenProbesAnsweredUnderEveryCandidate(t *testing.T) {
	c := New(Config{Candidates: []string{"cores", "quota-on-cut"}, Trial: 10 * time.Second, Rounds: 3, WaitTolerance: 0.2, SLOTolerance: 0.05})
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.2, WaitOverBaseline: 1.1},
		"quota-on-cut": {LentShare: 0.7, WaitOverBaseline: 2.5, ProbeAnswers: 1},
	})
	if c.Current() != "cores" || !strings.HasSuffix(c.Reason(), "left out, online wait more than 1.20x that under cores: quota-on-cut") {
		t.Errorf("chose %s: %s", c.Current(), c.Reason())
	}
}

// An SLO missed in most answers under every candidate alike (a target under what the service
// answers with nothing lent) does not tell them apart: the wait decides, as without a probe.
// One missed unevenly still leaves out the candidate that misses it more.
func TestAnSLOMissedAlikeLeavesTheChoiceToTheWait(t *testing.T) {
	cfg := Config{Candidates: []string{"cores", "quota-on-cut"}, Trial: 10 * time.Second, Rounds: 3, Tie: 0.05, WaitTolerance: 0.2, SLOTolerance: 0.05}
	c := New(cfg)
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.2, WaitOverBaseline: 1.1, ProbeAnswers: 2, ProbeOverTarget: 2},
		"quota-on-cut": {LentShare: 0.7, WaitOverBaseline: 2.5, ProbeAnswers: 2, ProbeOverTarget: 2},
	})
	want := "chose cores: cores lent 0.20 of the ceiling, online wait 1.10x its baseline, SLO probes over target in 100% of answers; " +
		"quota-on-cut lent 0.70 of the ceiling, online wait 2.50x its baseline, SLO probes over target in 100% of answers; " +
		"SLO probes over target in more than 50% of answers under every candidate alike, so they do not tell the candidates apart; " +
		"left out, online wait more than 1.20x that under cores: quota-on-cut"
	if c.Current() != "cores" || c.Reason() != want {
		t.Errorf("missed alike: chose %s\n got %s\nwant %s", c.Current(), c.Reason(), want)
	}

	// Missed alike without a wait baseline: the lent share alone decides.
	c = New(cfg)
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.2, ProbeAnswers: 4, ProbeOverTarget: 3},
		"quota-on-cut": {LentShare: 0.7, ProbeAnswers: 4, ProbeOverTarget: 3},
	})
	if c.Current() != "quota-on-cut" || !strings.HasSuffix(c.Reason(), "do not tell the candidates apart; the lent share alone decided (no baseline of online work's wait under every candidate)") {
		t.Errorf("missed alike, no wait: chose %s: %s", c.Current(), c.Reason())
	}

	// Missed by most answers under both, but far more under one: the SLO still decides.
	c = New(cfg)
	runReadings(c, time.Unix(1000, 0), map[string]Reading{
		"cores":        {LentShare: 0.2, WaitOverBaseline: 2.5, ProbeAnswers: 5, ProbeOverTarget: 3},
		"quota-on-cut": {LentShare: 0.7, WaitOverBaseline: 1.1, ProbeAnswers: 5, ProbeOverTarget: 5},
	})
	if c.Current() != "cores" || !strings.HasSuffix(c.Reason(), "; left out, SLO probes over target in more than 65% of answers (60% under cores): quota-on-cut") {
		t.Errorf("missed unevenly: chose %s: %s", c.Current(), c.Reason())
	}
}
