package mechanism

import (
	"strings"
	"testing"
	"time"
)

func testChooser() *Chooser {
	return New(Config{Candidates: []string{"quota", "idle", "shares"}, Trial: 10 * time.Second, Rounds: 2, Every: time.Hour, Tie: 0.05})
}

// run feeds each trial the share its mechanism lends and returns the mechanisms in the order
// they were tried.
func run(c *Chooser, t0 time.Time, share map[string]float64) (tried []string, end time.Time) {
	now := t0
	c.Step(now)
	for i := 0; i < 6; i++ {
		tried = append(tried, c.Current())
		for s := 0; s < 10; s++ {
			c.Observe(share[c.Current()])
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
	if c.Current() != "idle" || !strings.Contains(c.Reason(), "chose idle") || !strings.Contains(c.Reason(), "quota 0.40, idle 0.90, shares 0.70") {
		t.Fatalf("chose %s: %s", c.Current(), c.Reason())
	}
	// Readings after the choice count for nothing, and the choice holds until Every.
	c.Observe(0)
	if m, changed := c.Step(end.Add(59 * time.Minute)); m != "idle" || changed {
		t.Errorf("within Every: %s changed %v", m, changed)
	}
	if m, changed := c.Step(end.Add(time.Hour)); m != "quota" || !changed || !strings.Contains(c.Reason(), "trying quota (trial 1 of 6)") {
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
	c.Observe(7) // a ceiling that fell under what was lent
	c.Step(now.Add(time.Second))
	c.Observe(-1)
	c.Step(now.Add(2 * time.Second))
	if s := c.Scores(); s["quota"] != 1 || s["idle"] != 0 || c.Current() != "quota" {
		t.Errorf("scores %v, chose %s", s, c.Current())
	}
}
