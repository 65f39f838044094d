package demo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/reporter"
)

// reading is what the summary's closing paragraph is made of.
type reading struct {
	lowRPS, spikeRPS float64
	lowP99, spikeP99 float64
	haveP99          bool
	lentBefore       float64 // last second before the spike
	lentLow          float64 // lowest during the spike
	lentAfter        float64 // highest in the last phase
	haveLent         bool
	throttleAfter    time.Duration // first throttle action after the scheduled spike start
	throttles        int           // throttle actions during the spike
	cutFrom, cutTo   int64         // millicores, from the first throttle's reason
	haveCut          bool
	firstRule        string // what the first throttle crossed, from its reason ("" if unknown)
	shrinks          int    // slow-loop CPU shrink actions during the spike
	offLow, offSpike float64
	haveOff          bool
	limitWindow      time.Duration // 0: unknown
}

func readingFromRun(sched []demoPhase, rows []phaseRow, samples []sample, acts []reporter.Action, start time.Time, limitWindow time.Duration) reading {
	first, spike, last := sched[0], sched[1], sched[len(sched)-1]
	r := reading{lowRPS: first.rps, spikeRPS: spike.rps, limitWindow: limitWindow}
	byName := map[string]phaseRow{}
	for _, row := range rows {
		byName[row.Name] = row
	}
	lowRow, okLow := byName[first.name]
	spikeRow, okSpike := byName[spike.name]
	if okLow && okSpike {
		r.lowP99, r.spikeP99, r.haveP99 = lowRow.P99Ms, spikeRow.P99Ms, true
		r.offLow, r.offSpike, r.haveOff = lowRow.offline, spikeRow.offline, lowRow.haveOff && spikeRow.haveOff
	}
	var haveBefore, haveDuring bool
	r.lentLow = -1
	for _, s := range samples {
		switch s.phase {
		case first.name:
			r.lentBefore, haveBefore = s.lentCores, true
		case spike.name:
			if !haveDuring || s.lentCores < r.lentLow {
				r.lentLow = s.lentCores
			}
			haveDuring = true
		case last.name:
			r.lentAfter = max(r.lentAfter, s.lentCores)
		}
	}
	r.haveLent = haveBefore && haveDuring
	spikeFrom := start.Add(phaseStart(sched, spike.name))
	spikeTo := spikeFrom.Add(spike.dur)
	r.throttleAfter = -1
	for _, a := range acts {
		if a.Time.Before(spikeFrom) || !a.Time.Before(spikeTo) {
			continue
		}
		switch a.Kind {
		case "throttle":
			if r.throttles == 0 {
				r.throttleAfter = a.Time.Sub(spikeFrom)
				r.firstRule, r.cutFrom, r.cutTo, r.haveCut = parseCut(a.Reason)
			}
			r.throttles++
		case "shrink":
			if strings.Contains(a.Reason, "CPU") {
				r.shrinks++
			}
		}
	}
	return r
}

func (r reading) text() string {
	var b strings.Builder
	b.WriteString("Reading: ")
	if r.haveP99 {
		fmt.Fprintf(&b, "at %g rps the online p99 was %.1f ms; during the spike to %g rps it was %.1f ms. ", r.lowRPS, r.lowP99, r.spikeRPS, r.spikeP99)
	}
	switch {
	case r.throttles > 0:
		b.WriteString("During the spike tidal throttled the reclaimed pool " + times(r.throttles) + ". ")
		b.WriteString("The first throttle")
		if r.firstRule != "" {
			fmt.Fprintf(&b, " (%s)", r.firstRule)
		}
		if r.haveCut {
			fmt.Fprintf(&b, " cut it from %.2f to %.2f cores, ", float64(r.cutFrom)/1000, float64(r.cutTo)/1000)
		} else {
			b.WriteString(" came ")
		}
		fmt.Fprintf(&b, "%d ms after the spike was scheduled to begin. That delay is an upper bound on tidal's reaction time: "+
			"the spike start is counted from the launch of the load generator, a little before its first request, "+
			"and includes the time the extra requests took to raise online CPU use. ", r.throttleAfter.Milliseconds())
		if r.haveLent {
			fmt.Fprintf(&b, "Sampled once a second, lending was %.2f cores just before the spike and %.2f at its lowest during it. ", r.lentBefore, r.lentLow)
		}
	case r.haveLent && r.lentLow < r.lentBefore:
		fmt.Fprintf(&b, "Tidal took no throttle action during the spike; its slow loop shrank lending %s, "+
			"and the reclaimed pool went from %.2f cores before the spike to %.2f at its lowest. ", times(r.shrinks), r.lentBefore, r.lentLow)
	case r.haveLent:
		fmt.Fprintf(&b, "Tidal took no throttle action during the spike: lending was already down to %.2f cores "+
			"before it and went no lower. ", r.lentBefore)
	default:
		b.WriteString("Tidal took no throttle action during the spike. ")
	}
	if r.haveOff {
		fmt.Fprintf(&b, "Offline work ran at %.0f units/s during the spike against %.0f before it. ", r.offSpike, r.offLow)
	}
	switch {
	case !r.haveLent:
	case r.lentAfter <= r.lentLow:
		fmt.Fprintf(&b, "Lending did not grow back in the last phase (at most %.2f cores).", r.lentAfter)
	case r.limitWindow > 0:
		fmt.Fprintf(&b, "Once the spike left the agent's %s limit window, lending grew back, to %.2f cores in the last phase.", r.limitWindow, r.lentAfter)
	default:
		fmt.Fprintf(&b, "In the last phase lending grew back to %.2f cores.", r.lentAfter)
	}
	return strings.TrimSpace(b.String())
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// cutPattern reads an advisor's throttle reason, "numa 0: online spike 900m > 80% of the 700m
// it kept: reclaimed CPU 1300m -> 300m": what it crossed (between the NUMA node and the
// change; absent from reasons of another shape) and the millicores before and after.
var cutPattern = regexp.MustCompile(`(?:^numa \d+: (.*): )?reclaimed CPU (\d+)m -> (\d+)m`)

// parseCut reads a throttle's reason. The rule tells the fast path's burst rule, an
// interference target and a baseline measurement apart, so the reading names which one acted;
// it is "" where the reason names none. ok is false where the reason has no change in it.
func parseCut(reason string) (rule string, from, to int64, ok bool) {
	m := cutPattern.FindStringSubmatch(reason)
	if m == nil {
		return "", 0, 0, false
	}
	from, err1 := strconv.ParseInt(m[2], 10, 64)
	to, err2 := strconv.ParseInt(m[3], 10, 64)
	return m[1], from, to, err1 == nil && err2 == nil
}

// wrap breaks text into lines of at most width columns at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
