package workload

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Phase is one stretch of a load schedule: Duration at RPS requests/s, or,
// when EndRPS > 0, a linear ramp from RPS to EndRPS. An RPS of 0 with EndRPS
// 0 is a pause (no requests). A ramp down to zero is not representable: ramp
// to a small rate and add a pause.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	RPS      float64       `json:"rps"`
	EndRPS   float64       `json:"end_rps,omitempty"`
}

// rateAt returns the scheduled rate at offset t into the phase.
func (p Phase) rateAt(t time.Duration) float64 {
	if p.EndRPS <= 0 || p.Duration <= 0 {
		return p.RPS
	}
	f := float64(t) / float64(p.Duration)
	return p.RPS + (p.EndRPS-p.RPS)*f
}

// expected returns the number of requests the phase schedules.
func (p Phase) expected() float64 {
	end := p.RPS
	if p.EndRPS > 0 {
		end = p.EndRPS
	}
	return (p.RPS + end) / 2 * p.Duration.Seconds()
}

// sendOffset returns the offset into the phase of its i-th request (i from
// 0), and false once that falls at or past the end of the phase. Requests are
// evenly spaced in the integral of the rate: for a ramp r(t) = r0 + k t the
// i-th request is at the t where r0 t + k t^2/2 = i.
func (p Phase) sendOffset(i int64) (time.Duration, bool) {
	r0 := p.RPS
	D := p.Duration.Seconds()
	var t float64
	if p.EndRPS <= 0 || p.EndRPS == r0 {
		if r0 <= 0 {
			return 0, false
		}
		t = float64(i) / r0
	} else {
		k := (p.EndRPS - r0) / D
		disc := r0*r0 + 2*k*float64(i)
		if disc < 0 {
			return 0, false
		}
		t = (math.Sqrt(disc) - r0) / k
	}
	if t >= D || math.IsNaN(t) {
		return 0, false
	}
	return time.Duration(t * 1e9), true
}

// ParsePhases parses a comma-separated schedule such as
//
//	low:10s@200,ramp:5s@200-800,peak:10s@800,spike:3s@1500,low:10s@200
//
// Each part is [name:]duration@rate or [name:]duration@start-end (a linear
// ramp); durations use time.ParseDuration syntax; rates are requests/s. A part
// without a name is named "phaseN" (N from 1). Errors name the bad part.
func ParsePhases(spec string) ([]Phase, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("empty phase spec (want e.g. \"low:10s@200,ramp:5s@200-800\")")
	}
	parts := strings.Split(spec, ",")
	phases := make([]Phase, 0, len(parts))
	for i, part := range parts {
		p, err := parsePhase(strings.TrimSpace(part), i+1)
		if err != nil {
			return nil, fmt.Errorf("phase %d %q: %w", i+1, strings.TrimSpace(part), err)
		}
		phases = append(phases, p)
	}
	return phases, nil
}

func parsePhase(s string, n int) (Phase, error) {
	if s == "" {
		return Phase{}, errors.New("empty part (stray comma?)")
	}
	p := Phase{Name: "phase" + strconv.Itoa(n)}
	if name, rest, ok := strings.Cut(s, ":"); ok {
		name = strings.TrimSpace(name)
		if name == "" {
			return Phase{}, errors.New("empty name before ':'")
		}
		if strings.ContainsAny(name, "@") {
			return Phase{}, fmt.Errorf("bad name %q", name)
		}
		p.Name, s = name, rest
	}
	durS, rateS, ok := strings.Cut(s, "@")
	if !ok {
		return Phase{}, errors.New("missing '@rate' (want [name:]duration@rps or duration@start-end)")
	}
	d, err := time.ParseDuration(strings.TrimSpace(durS))
	if err != nil {
		return Phase{}, fmt.Errorf("bad duration %q: %v", strings.TrimSpace(durS), err)
	}
	if d <= 0 {
		return Phase{}, fmt.Errorf("duration %v must be positive", d)
	}
	p.Duration = d
	startS, endS, ramp := strings.Cut(rateS, "-")
	if p.RPS, err = parseRate(startS); err != nil {
		return Phase{}, fmt.Errorf("bad rate %q: %v", strings.TrimSpace(startS), err)
	}
	if ramp {
		if p.EndRPS, err = parseRate(endS); err != nil {
			return Phase{}, fmt.Errorf("bad ramp end rate %q: %v", strings.TrimSpace(endS), err)
		}
		if p.EndRPS == 0 {
			return Phase{}, errors.New("ramp end rate must be > 0 (ramp to a small rate, then add a @0 pause)")
		}
		if p.EndRPS == p.RPS {
			p.EndRPS = 0
		}
	}
	return p, nil
}

func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, errors.New("must be a finite number >= 0")
	}
	if v > 1e6 {
		return 0, errors.New("above 1e6 requests/s")
	}
	return v, nil
}
