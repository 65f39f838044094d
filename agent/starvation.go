package agent

import (
	"context"
	"time"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins/eviction"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// schedReading is one workload's threads' scheduler counters at one slow pass.
type schedReading struct {
	at      time.Time
	threads map[int]metrics.SchedTime
}

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

// sampleStarvation reads every reclaimed workload's threads' run and wait time and turns the
// change since the previous pass into a sample. Only threads seen both times count, so a
// thread that came or went moves nothing; a workload read for the first time, or not
// readable, is Unknown.
func (a *Agent) sampleStarvation(now time.Time, snap state.Snapshot) []eviction.CPUSample {
	var out []eviction.CPUSample
	seen := map[string]bool{}
	for _, r := range snap.Workloads {
		if r.Tier != qos.Reclaimed {
			continue
		}
		seen[r.Name] = true
		// What it asked for: its own cap (tidal run --cpus, a pod's reclaimed-millicpu).
		sample := eviction.CPUSample{Workload: r.Workload, AskedMilli: r.Workload.MilliCPU, Unknown: true}
		tids, err := a.layout.Threads(r.Cgroup, r.Owner.Foreign())
		if err != nil {
			delete(a.schedPrev, r.Name)
			out = append(out, sample)
			continue
		}
		cur := schedReading{at: now, threads: make(map[int]metrics.SchedTime, len(tids))}
		for _, tid := range tids {
			if st, err := metrics.ReadSchedTime(a.procDir, tid); err == nil {
				cur.threads[tid] = st
			}
		}
		prev, ok := a.schedPrev[r.Name]
		a.schedPrev[r.Name] = cur
		if elapsed := now.Sub(prev.at); ok && elapsed > 0 {
			var run, wait time.Duration
			for tid, st := range cur.threads {
				if p, ok := prev.threads[tid]; ok && st.Run >= p.Run && st.Wait >= p.Wait {
					run, wait = run+st.Run-p.Run, wait+st.Wait-p.Wait
				}
			}
			sample.GotMilli = state.Milli(run, elapsed)
			sample.ReadyMilli = state.Milli(run+wait, elapsed)
			sample.Unknown = false
		}
		out = append(out, sample)
	}
	for name := range a.schedPrev {
		if !seen[name] {
			delete(a.schedPrev, name)
		}
	}
	return out
}
