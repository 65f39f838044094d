package agent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// fastWindow turns a cumulative CPU counter sampled every tick into a rate over a short window.
type fastWindow struct {
	window time.Duration
	t      []time.Time
	used   []time.Duration
}

func newFastWindow(window time.Duration) fastWindow { return fastWindow{window: window} }

// add records a reading and returns the usage rate in millicores over the window, once the
// window is covered.
func (f *fastWindow) add(now time.Time, used time.Duration) (int64, bool) {
	f.t, f.used = append(f.t, now), append(f.used, used)
	cut := 0
	for cut < len(f.t)-1 && now.Sub(f.t[cut+1]) >= f.window {
		cut++
	}
	f.t, f.used = f.t[cut:], f.used[cut:]
	span := now.Sub(f.t[0])
	if span < f.window || span <= 0 {
		return 0, false
	}
	return milli(used-f.used[0], span), true
}

// fastLoop samples online tiers' CPU counters every fast interval and shrinks lending at once
// when online work spikes; the slow loop grows it back later.
func (a *Agent) fastLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Loops.FastInterval)
	defer t.Stop()
	online := []string{plugins.TierPath(a.cfg.Cgroup.Root, qos.Shared)}
	if a.cfg.CPU.ReservedSystemCPUs.IsEmpty() {
		// Without reserved CPUs the system tier runs in the shared pool too.
		online = append(online, plugins.TierPath(a.cfg.Cgroup.Root, qos.System))
	}
	counters := make([]*cgroupfs.CPUCounter, len(online))
	defer func() {
		for _, c := range counters {
			if c != nil {
				c.Close()
			}
		}
	}()
	// read sums the online tiers' counters, reopening one that fails (a tier cgroup
	// re-created after someone removed it).
	read := func() (time.Duration, bool) {
		var used time.Duration
		for i, p := range online {
			if counters[i] == nil {
				c, err := a.layout.OpenCPUCounter(p)
				if err != nil {
					return 0, false
				}
				counters[i] = c
			}
			u, err := counters[i].Read()
			if err != nil {
				counters[i].Close()
				counters[i] = nil
				return 0, false
			}
			used += u
		}
		return used, true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case tick := <-t.C:
			used, ok := read()
			if !ok {
				continue
			}
			// Stamp the reading when it was taken: a late tick carries its scheduled time, and
			// a rate over a window it does not cover would be overstated.
			now := time.Now()
			if rate, full := a.fast.add(now, used); full {
				a.spike(now, rate)
			}
			a.metrics.ObserveLoop("fast", time.Since(tick))
		}
	}
}

// spike hands the online rate, split over NUMA nodes by pool size, to the advisor and writes
// the cgroups at once if it shrank lending.
func (a *Agent) spike(now time.Time, onlineMilli int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var total int64
	for _, np := range a.pools {
		total += int64(np.Shared.Size())
	}
	if total == 0 {
		return
	}
	changed := false
	for _, np := range a.pools {
		share := onlineMilli * int64(np.Shared.Size()) / total
		if c := a.advisor.Spike(now, np.Node, share); c != nil {
			a.actionLocked("throttle", "online-spike", c.Reason)
			changed = true
		}
	}
	if changed {
		if err := a.applyLocked(); err != nil {
			a.log.Error("fast path cgroup write failed", "err", err)
		}
		a.publishLocked()
	}
}

// watchPressure arms a PSI trigger on the shared tier's cpu.pressure. Only a cgroup v2 tree
// has per-cgroup pressure; the node-wide /proc/pressure/cpu is not used because reclaimed
// work waiting for CPU (as it should, at idle priority) would fire it all the time.
func (a *Agent) watchPressure(ctx context.Context) {
	if a.layout.Version != cgroupfs.V2 {
		a.log.Info("PSI trigger off: per-cgroup cpu.pressure needs cgroup v2; the utilization tick drives the fast path")
		return
	}
	path := filepath.Join(a.layout.Dir("cpu", plugins.TierPath(a.cfg.Cgroup.Root, qos.Shared)), "cpu.pressure")
	err := metrics.WatchPressure(ctx, path, a.cfg.Loops.PSIStallThreshold, a.cfg.Loops.PSIWindow, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		changes := a.advisor.Pressure(time.Now(), "online CPU pressure (PSI)")
		for _, c := range changes {
			a.actionLocked("throttle", "online-pressure", c.Reason)
		}
		if len(changes) > 0 {
			_ = a.applyLocked()
			a.publishLocked()
		}
	})
	if err != nil {
		a.log.Warn("PSI trigger unavailable; the utilization tick drives the fast path", "path", path, "err", err)
	}
}
