package agent

import (
	"context"
	"time"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins/eviction"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/interference"
)

// maybeEvictStarved evicts the lowest-priority reclaimed workload starved of CPU for the
// configured window (eviction.starvationFloor, eviction.starvationWindow), one at a time with
// the cool-down every trigger shares. The threads' counters are read with no lock held.
func (a *Agent) maybeEvictStarved(ctx context.Context, now time.Time) {
	if a.starvation.Floor <= 0 {
		return
	}
	snap := a.store.Snapshot()
	samples := a.sampleStarvation(now, snap)
	due, below := a.starvation.Observe(now, samples)
	a.metrics.SetCPUStarved(below)
	figures := make(map[string]float64, len(samples))
	for _, s := range samples {
		if !s.Unknown {
			figures[s.Workload.Name] = s.Satisfaction()
		}
	}
	a.mu.Lock()
	a.satisfaction = figures
	cooling := time.Since(a.lastEvict) < a.cfg.Eviction.CoolDown
	a.mu.Unlock()
	if len(due) == 0 || cooling || evicting(snap) {
		return
	}
	for _, d := range due {
		r, _ := snap.Get(d.Workload.Name)
		if len(r.PIDs) == 0 || now.Before(r.RefusedUntil) {
			continue
		}
		reason := d.Reason(a.starvation.Floor, now)
		a.log.Warn("evicting reclaimed work starved of CPU", "workload", r.Name, "reason", reason)
		a.evict(ctx, r, "cpu-starved", reason)
		return
	}
}

// sampleStarvation reads every reclaimed workload's threads' run and wait time (the same
// meter as the interference feedback's, owned by the slow loop) and turns the change since
// the previous pass into a sample. Only threads seen both times count, so a thread that came
// or went moves nothing; a workload read for the first time, or not readable, is Unknown.
func (a *Agent) sampleStarvation(now time.Time, snap state.Snapshot) []eviction.CPUSample {
	var groups []interference.Group
	byName := map[string]state.Record{}
	for _, r := range snap.Workloads {
		if r.Tier == qos.Reclaimed {
			groups = append(groups, interference.Group{Name: r.Name, Cgroup: r.Cgroup, Recursive: r.Owner.Foreign()})
			byName[r.Name] = r
		}
	}
	elapsed := now.Sub(a.starvationAt)
	a.starvationAt = now
	out := make([]eviction.CPUSample, 0, len(groups))
	for _, got := range a.starvationMeter.Read(groups, 0) {
		r := byName[got.Name]
		// What it asked for: its own cap (tidal run --cpus, a pod's reclaimed-millicpu).
		sample := eviction.CPUSample{Workload: r.Workload, AskedMilli: r.MilliCPU, Unknown: true}
		if got.Err == nil && !got.First && elapsed > 0 {
			sample.GotMilli = state.Milli(got.Run, elapsed)
			sample.ReadyMilli = state.Milli(got.Run+got.Wait, elapsed)
			sample.Unknown = false
		}
		out = append(out, sample)
	}
	return out
}
