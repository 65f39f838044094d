// Package mechanism chooses, on the running node, how reclaimed work is held to the CPU it is
// lent (cpu.mechanism: the idle class, shares, or a CFS quota). Which protects online work
// best differs between machines and workloads: on one machine of the same kind a quota kept a
// web server's tail at alone's, on another it hurt a database's 4.45x. So the agent does not
// assume: with cpu.mechanism auto it tries each candidate in turn, while the interference
// feedback sizes lending as always, and keeps the one under which the feedback let the node
// lend the largest share of its usage ceiling. A mechanism that hurts online work draws cuts
// and lends less; one that does not lends up to the ceiling. The share, not the amount, is
// scored, so online load moving between trials does not decide the choice.
//
// It is pure logic; the interference loop owns a Chooser and feeds it readings.
package mechanism

import (
	"fmt"
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
	// Tie: a candidate must beat the earlier one's score by more than this to be chosen.
	Tie float64
}

// Chooser tries the candidates and keeps the best. Not safe for concurrent use.
type Chooser struct {
	cfg Config

	current    int       // index into Candidates
	exploring  bool      // trying candidates in turn; false once chosen
	trialStart time.Time // zero before the first Step
	trials     int       // trials finished in this exploration
	chosenAt   time.Time

	sum []float64 // per candidate: the sum and count of its lent shares in this exploration
	n   []int
	// Scores of the last finished exploration (absent: no reading had anything to lend).
	scores map[string]float64
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
	c.sum, c.n = make([]float64, len(c.cfg.Candidates)), make([]int, len(c.cfg.Candidates))
	c.reason = fmt.Sprintf("trying %s (trial 1 of %d)", c.cfg.Candidates[0], c.total())
}

func (c *Chooser) total() int { return c.cfg.Rounds * len(c.cfg.Candidates) }

// Current is the mechanism to use now.
func (c *Chooser) Current() string { return c.cfg.Candidates[c.current] }

// Reason says what the chooser is doing and why, with its figures, for status.
func (c *Chooser) Reason() string { return c.reason }

// Scores are each candidate's mean lent share in the last finished exploration.
func (c *Chooser) Scores() map[string]float64 { return c.scores }

// Observe records one reading under the current mechanism: the node lent lentShare (0..1)
// of what its usage ceiling allowed. Call it only when the ceiling was above the minimum
// (there was something to lend) and lending was not held down for another reason (a baseline
// measurement, stale metrics). After the choice readings count for nothing.
func (c *Chooser) Observe(lentShare float64) {
	if !c.exploring {
		return
	}
	c.sum[c.current] += min(max(lentShare, 0), 1)
	c.n[c.current]++
}

// Step moves to the next trial when the current one is over, to the choice after the last
// one, and back to exploring when the choice is older than Every. It returns the mechanism to
// use now and whether it changed.
func (c *Chooser) Step(now time.Time) (mechanism string, changed bool) {
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
	case !c.exploring && c.cfg.Every > 0 && now.Sub(c.chosenAt) >= c.cfg.Every:
		c.explore()
		c.trialStart = now
	}
	return c.Current(), c.Current() != before
}

// choose keeps the candidate with the highest mean lent share; an earlier candidate wins
// unless a later one beats it by more than Tie. With no reading at all (nothing to lend the
// whole time) the first candidate stays.
func (c *Chooser) choose(now time.Time) {
	c.exploring, c.chosenAt = false, now
	c.scores = map[string]float64{}
	best := -1
	for i, name := range c.cfg.Candidates {
		if c.n[i] == 0 {
			continue
		}
		c.scores[name] = c.sum[i] / float64(c.n[i])
		if best < 0 || c.scores[name] > c.scores[c.cfg.Candidates[best]]+c.cfg.Tie {
			best = i
		}
	}
	if best < 0 {
		c.current = 0
		c.reason = fmt.Sprintf("kept %s: no reading had anything to lend in %d trials", c.Current(), c.total())
		return
	}
	c.current = best
	c.reason = fmt.Sprintf("chose %s: mean share of the usage ceiling lent %s", c.Current(), c.describe())
}

func (c *Chooser) describe() string {
	var parts []string
	for _, name := range c.cfg.Candidates {
		if s, ok := c.scores[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, s))
		} else {
			parts = append(parts, name+" -")
		}
	}
	return strings.Join(parts, ", ")
}
