package demo

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

type demoPhase struct {
	name string
	dur  time.Duration
	rps  float64
}

// demoSchedule splits total into low (35%), spike (30%) and low again (the rest).
func demoSchedule(total time.Duration, lowRPS, spikeRPS float64) []demoPhase {
	low := time.Duration(float64(total) * lowShare).Round(time.Millisecond)
	spike := time.Duration(float64(total) * spikeShare).Round(time.Millisecond)
	return []demoPhase{{"low", low, lowRPS}, {"spike", spike, spikeRPS}, {"low2", total - low - spike, lowRPS}}
}

// phaseSpec writes the schedule in the load generator's --phases syntax.
func phaseSpec(ps []demoPhase) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s:%s@%s", p.name, p.dur, strconv.FormatFloat(p.rps, 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}

// phaseAt names the phase scheduled at offset t, or "" outside the schedule.
func phaseAt(ps []demoPhase, t time.Duration) string {
	if t < 0 {
		return ""
	}
	for _, p := range ps {
		if t < p.dur {
			return p.name
		}
		t -= p.dur
	}
	return ""
}

// phaseStart is the offset at which the named phase begins.
func phaseStart(ps []demoPhase, name string) time.Duration {
	var t time.Duration
	for _, p := range ps {
		if p.name == name {
			break
		}
		t += p.dur
	}
	return t
}

func scheduleLength(ps []demoPhase) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.dur
	}
	return t
}
