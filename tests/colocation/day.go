package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
)

// The compressed tidal day, as shares of -day: a valley, a ramp up to the peak, the peak, a
// sudden spike above it, and a valley again (the rest).
const (
	valleyShare = 0.20
	rampShare   = 0.15
	peakShare   = 0.25
	spikeShare  = 0.10
)

// spikePhase names the phase whose start the spike-to-shrink reaction is measured from.
const spikePhase = "spike"

// dayPhases is the day as the load generator's schedule.
func dayPhases(o options) []workload.Phase {
	part := func(share float64) time.Duration {
		return time.Duration(float64(o.day) * share).Round(time.Millisecond)
	}
	ps := []workload.Phase{
		{Name: "valley", Duration: part(valleyShare), RPS: o.valleyRPS},
		{Name: "ramp", Duration: part(rampShare), RPS: o.valleyRPS, EndRPS: o.peakRPS},
		{Name: "peak", Duration: part(peakShare), RPS: o.peakRPS},
		{Name: spikePhase, Duration: part(spikeShare), RPS: o.spikeRPS},
	}
	var used time.Duration
	for _, p := range ps {
		used += p.Duration
	}
	return append(ps, workload.Phase{Name: "valley2", Duration: o.day - used, RPS: o.valleyRPS})
}

// phaseSpec writes phases in the load generator's --phases syntax.
func phaseSpec(ps []workload.Phase) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		rate := strconv.FormatFloat(p.RPS, 'f', -1, 64)
		if p.EndRPS > 0 {
			rate += "-" + strconv.FormatFloat(p.EndRPS, 'f', -1, 64)
		}
		parts[i] = fmt.Sprintf("%s:%s@%s", p.Name, p.Duration, rate)
	}
	return strings.Join(parts, ",")
}

// phaseWindow is when the named phase runs, as offsets from the start of the day.
func phaseWindow(ps []workload.Phase, name string) (from, to time.Duration, ok bool) {
	for _, p := range ps {
		if p.Name == name {
			return from, from + p.Duration, true
		}
		from += p.Duration
	}
	return 0, 0, false
}
