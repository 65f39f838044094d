package main

import (
	"math"
	"sort"
	"time"
)

// point is one reading of a counter.
type point struct {
	t time.Time
	v float64
}

// cumulative is a counter read at ascending times (CPU time used, units of work done).
type cumulative []point

// at is the counter at t, interpolated linearly between the readings around it and held at
// the first or last reading outside them.
func (c cumulative) at(t time.Time) float64 {
	if len(c) == 0 {
		return 0
	}
	i := sort.Search(len(c), func(i int) bool { return !c[i].t.Before(t) })
	switch {
	case i == 0:
		return c[0].v
	case i == len(c):
		return c[len(c)-1].v
	}
	a, b := c[i-1], c[i]
	f := float64(t.Sub(a.t)) / float64(b.t.Sub(a.t))
	return a.v + f*(b.v-a.v)
}

// delta is how much the counter grew from a to b.
func (c cumulative) delta(a, b time.Time) float64 { return c.at(b) - c.at(a) }

// stat is a figure over rounds: the median with the min and max, of N values.
type stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// statOf summarizes values; NaN values (a figure a run could not produce) are left out.
func statOf(values []float64) stat {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return stat{}
	}
	sort.Float64s(v)
	s := stat{Min: v[0], Max: v[len(v)-1], N: len(v)}
	if n := len(v); n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
	return s
}

// percentile is the nearest-rank q-quantile (q in (0, 1]) of values; NaN when empty.
func percentile(values []float64, q float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := append([]float64(nil), values...)
	sort.Float64s(v)
	rank := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(rank, 0), len(v)-1)]
}
