package eviction

import (
	"fmt"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// MinDemandMilliCPU is the least CPU a workload must have been ready to run (run plus waited
// for) to be judged: one that wants next to nothing (asleep, waiting on I/O) is idle, not
// starved.
const MinDemandMilliCPU = 20

// CPUSample is what one reclaimed workload got of the CPU over the last interval: the CPU
// time it ran, the time it was ready to run (ran or waited on a run queue) and the CPU it
// asked for (its own cap or request; 0: none), as millicores. Satisfaction is measured
// against the smaller of what it was ready to run and what it asked for, so work held back
// by its own cap is not starved; work held back by lending that stays small (an online
// burner taking the node) is: that is what the trigger is for.
type CPUSample struct {
	Workload                         plugins.Workload
	GotMilli, ReadyMilli, AskedMilli int64
	// Unknown: no reading this time (a failed read, threads that came and went); its
	// clock is neither started nor reset.
	Unknown bool
}

// Satisfaction is the CPU it got over the CPU it wanted (at most what it asked for), in [0, 1].
func (s CPUSample) Satisfaction() float64 {
	want := s.ReadyMilli
	if s.AskedMilli > 0 {
		want = min(want, s.AskedMilli)
	}
	if want <= 0 {
		return 1
	}
	return min(float64(s.GotMilli)/float64(want), 1)
}

// Starved is a reclaimed workload whose CPU satisfaction stayed under the floor.
type Starved struct {
	Workload plugins.Workload
	// Sample is its latest reading; Since when it has been under the floor.
	Sample CPUSample
	Since  time.Time
}

// Reason names the figures, for the action log, the Event and the log line.
func (s Starved) Reason(floor float64, now time.Time) string {
	asked := "no cap"
	if s.Sample.AskedMilli > 0 {
		asked = fmt.Sprintf("asked %dm", s.Sample.AskedMilli)
	}
	return fmt.Sprintf("%s (priority %d): CPU satisfaction %.2f (got %dm; ready to run %dm, %s) below %.2f for %s",
		s.Workload.Name, s.Workload.ReclaimPriority, s.Sample.Satisfaction(), s.Sample.GotMilli, s.Sample.ReadyMilli,
		asked, floor, now.Sub(s.Since).Round(time.Second))
}

// Starvation finds reclaimed work starved of CPU for too long, so it can be evicted and run
// elsewhere rather than hang. It keeps when each workload went under the floor; it is owned
// by one goroutine (the slow loop) and not safe for concurrent use.
type Starvation struct {
	// Floor: a satisfaction under it is starved (0 turns the trigger off).
	Floor float64
	// Window: starved this long without a break, it is due for eviction.
	Window time.Duration

	since map[string]time.Time
}

// Observe records one interval's samples at now. It returns the workloads starved for at
// least Window, in eviction order (Rank), and how many are under the floor now. A workload
// that is not sampled any more is forgotten; online work is never a candidate.
func (s *Starvation) Observe(now time.Time, samples []CPUSample) (due []Starved, below int) {
	if s.since == nil {
		s.since = map[string]time.Time{}
	}
	seen := map[string]bool{}
	latest := map[string]CPUSample{}
	var candidates []plugins.Workload
	for _, c := range samples {
		name := c.Workload.Name
		if c.Workload.Tier != qos.Reclaimed || s.Floor <= 0 {
			continue
		}
		seen[name] = true
		if c.Unknown {
			continue
		}
		if c.ReadyMilli < MinDemandMilliCPU || c.Satisfaction() >= s.Floor {
			delete(s.since, name)
			continue
		}
		below++
		if _, ok := s.since[name]; !ok {
			s.since[name] = now
		}
		latest[name] = c
		if now.Sub(s.since[name]) >= s.Window {
			candidates = append(candidates, c.Workload)
		}
	}
	for name := range s.since {
		if !seen[name] {
			delete(s.since, name)
		}
	}
	for _, w := range Rank(candidates) {
		due = append(due, Starved{Workload: w, Sample: latest[w.Name], Since: s.since[w.Name]})
	}
	return due, below
}
