package demo

import (
	"strings"
	"time"

	"github.com/tidalqos/tidal/reporter"
)

// actionLog collects the agent's actions newer than the demo's start, across status reads
// (the agent keeps only a bounded history).
type actionLog struct {
	last time.Time
	seen []reporter.Action
}

// add records the actions newer than any seen so far and returns them.
func (l *actionLog) add(acts []reporter.Action) []reporter.Action {
	n := len(l.seen)
	for _, a := range acts {
		if a.Time.After(l.last) {
			l.seen = append(l.seen, a)
			l.last = a.Time
		}
	}
	return l.seen[n:]
}

// actionRank orders action kinds by how much they tell about the demo: CPU taken back first.
var actionRank = map[string]int{"throttle": 0, "evict": 1, "shrink": 2, "reset": 3, "grow": 4}

// mostTelling picks the action to show for a second: the highest-ranked kind, the latest of
// those; CPU decisions before memory ones of the same kind.
func mostTelling(acts []reporter.Action) (reporter.Action, bool) {
	rank := func(a reporter.Action) int {
		r, ok := actionRank[a.Kind]
		if !ok {
			r = len(actionRank)
		}
		r *= 2
		if !strings.Contains(a.Reason, "CPU") {
			r++
		}
		return r
	}
	best, found := reporter.Action{}, false
	for _, a := range acts {
		if !found || rank(a) <= rank(best) {
			best, found = a, true
		}
	}
	return best, found
}
