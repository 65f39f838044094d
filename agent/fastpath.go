package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/threadtick"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/sysadvisor/rate"
)

// idleFastTicks: while every NUMA node lends only its minimum, the fast path has nothing to
// cut, and samples this many times less often (it only keeps its window warm). The first
// tick after lending grows is at most this many fast intervals away.
const idleFastTicks = 10

// fastLoop samples online work's CPU counters every fast interval and shrinks lending at
// once when online work spikes; the slow loop grows it back later. It sleeps on its own
// thread (threadtick), the cheapest wake-up on a VM; it notices ctx within one interval.
func (a *Agent) fastLoop(ctx context.Context) {
	pace := threadtick.Start()
	defer pace.Stop()
	c := onlineCounters{layout: a.layout, open: map[string]*cgroupfs.CPUCounter{}}
	defer c.close()
	observe := a.metrics.LoopObserver("fast")
	next := a.cfg.Loops.FastInterval
	for ticks := 0; ; ticks++ {
		late := pace.Sleep(next)
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		// Which cgroups hold online work changes as pods come and go: look again about once
		// a second. A changed set makes the cumulative sum jump, so the window starts over.
		if ticks%onlineRefreshTicks == 0 {
			plus, minus := a.onlineCgroups()
			if c.set(plus, minus) {
				a.fast = rate.NewWindow(a.cfg.Loops.FastWindow)
			}
		}
		next = a.cfg.Loops.FastInterval
		if used, ok := c.read(); ok {
			// Stamp the reading when it was taken: a rate over a window it does not cover
			// would be overstated.
			now := time.Now()
			milli, full := a.fast.Add(now, used)
			cuttable := true
			if full {
				var burst int64
				if d := a.cfg.Loops.FastBurstWindow; d > 0 {
					burst, _ = a.fast.Over(d)
				}
				cuttable = a.spike(now, milli, burst)
			}
			if !cuttable {
				next *= idleFastTicks
			}
			observe(late + time.Since(start))
		}
	}
}

// onlineRefreshTicks fast ticks pass between two looks at which cgroups hold online work.
const onlineRefreshTicks = 100

// onlineCounters sums the CPU time of the plus cgroups less that of the minus ones, keeping
// each counter open (a pread per tick, no open or path walk).
type onlineCounters struct {
	layout      *cgroupfs.Layout
	plus, minus []string
	open        map[string]*cgroupfs.CPUCounter
}

// set changes the cgroups counted and reports whether they changed.
func (c *onlineCounters) set(plus, minus []string) bool {
	if slices.Equal(plus, c.plus) && slices.Equal(minus, c.minus) {
		return false
	}
	c.plus, c.minus = plus, minus
	keep := map[string]bool{}
	for _, p := range append(append([]string(nil), plus...), minus...) {
		keep[p] = true
	}
	for p, ctr := range c.open {
		if !keep[p] {
			ctr.Close()
			delete(c.open, p)
		}
	}
	return true
}

// read sums the counters, reopening one that fails (a tier cgroup re-created after someone
// removed it). A plus cgroup that cannot be read fails the reading; a minus one (a pod that
// just ended) counts as zero.
func (c *onlineCounters) read() (time.Duration, bool) {
	var used time.Duration
	for i, group := range [][]string{c.plus, c.minus} {
		for _, p := range group {
			u, err := c.readOne(p)
			if err != nil {
				if i == 0 {
					return 0, false
				}
				continue
			}
			if i == 0 {
				used += u
			} else {
				used -= u
			}
		}
	}
	return max(used, 0), true
}

func (c *onlineCounters) readOne(p string) (time.Duration, error) {
	ctr := c.open[p]
	if ctr == nil {
		var err error
		if ctr, err = c.layout.OpenCPUCounter(p); err != nil {
			return 0, err
		}
		c.open[p] = ctr
	}
	u, err := ctr.Read()
	if err != nil {
		ctr.Close()
		delete(c.open, p)
	}
	return u, err
}

func (c *onlineCounters) close() {
	for _, ctr := range c.open {
		ctr.Close()
	}
}

// spike hands the online rates (over the fast window and the burst window), split over NUMA
// nodes by pool size, to the advisor and, if that shrank lending, writes the reclaimed limits
// at once. It reports whether any node still lends more than its minimum (something a spike
// could cut).
func (a *Agent) spike(now time.Time, onlineMilli, burstMilli int64) (cuttable bool) {
	a.mu.Lock()
	var total int64
	for _, np := range a.pools {
		total += int64(np.Shared.Size())
	}
	changed := false
	for _, np := range a.pools {
		if total == 0 {
			break
		}
		size := int64(np.Shared.Size())
		r := advisor.SpikeRates{WindowMilli: onlineMilli * size / total, BurstMilli: burstMilli * size / total,
			Window: a.cfg.Loops.FastWindow, Burst: a.cfg.Loops.FastBurstWindow}
		if c := a.advisor.Spike(now, np.Node, r); c != nil {
			a.actionLocked("throttle", "online-spike", c.Reason)
			changed = true
		}
	}
	if changed {
		a.planGeneration++
	}
	cuttable = a.advisor.LendsAboveMinimum()
	a.mu.Unlock()
	if changed {
		a.writeReclaimedLimits()
	}
	return cuttable
}

// writeReclaimedLimits is the fast path's narrow write: only the reclaimed cgroups' CPU limits
// (tidal's tier and everything under it, reclaimed pods and their containers), from the
// current plan, without the full pass's other writes and without waiting for it (a pass
// writing meanwhile stops at its next cgroup and hands over the writer): the reclaimed pool's
// cpuset and, with the quota mechanism, the CFS quotas.
func (a *Agent) writeReclaimedLimits() {
	snap := a.store.Snapshot()
	a.mu.Lock()
	plan := a.writtenPlanLocked(time.Now(), snap)
	old := a.pools
	a.pools = cpu.ComputePools(a.topo, a.cfg.CPU.ReservedSystemCPUs, snap.Dedicated, plan.ReclaimedMilliCPU)
	node := a.nodeLocked(plan)
	a.mu.Unlock()
	if !samePoolCPUs(old, node.Pools) {
		select {
		case a.poolsChanged <- struct{}{}:
		default:
		}
	}
	reclaimedTier := plugins.TierPath(a.cfg.Cgroup.Root, qos.Reclaimed)
	// The tier's quota before anything else, from the tier settings alone (no decision per
	// workload yet): one write holds all reclaimed work below it at once. Should a reclaimed
	// workload's own cap be above the new quota, the kernel refuses this write (v1 wants
	// children first) and the ordered writes below make it.
	tiers := plugins.NewTree(a.cfg.Cgroup.Root, nil, nil)
	a.policy.Fill(tiers, node)
	if q := tiers.Tier(qos.Reclaimed).CPUQuota; q != 0 {
		_ = a.writer.ApplyUrgent([]plugins.Cgroup{{Path: reclaimedTier, Settings: plugins.Settings{CPUQuota: q}}})
	}
	var reclaimedPods []string
	for _, r := range snap.Workloads {
		if r.Owner.Foreign() && r.Tier == qos.Reclaimed {
			reclaimedPods = append(reclaimedPods, r.Cgroup)
		}
	}
	var quotas, narrow []plugins.Cgroup
	for _, c := range a.desired(snap, node, plan).Cgroups() {
		if !within(c.Path, reclaimedTier) && !slices.ContainsFunc(reclaimedPods, func(p string) bool { return within(c.Path, p) }) {
			continue
		}
		if c.Settings.CPUQuota != 0 {
			quotas = append(quotas, plugins.Cgroup{Path: c.Path, Foreign: c.Foreign, Settings: plugins.Settings{CPUQuota: c.Settings.CPUQuota}})
		}
		if !c.Settings.CPUs.IsEmpty() {
			narrow = append(narrow, plugins.Cgroup{Path: c.Path, Foreign: c.Foreign, Settings: plugins.Settings{CPUs: c.Settings.CPUs}})
		}
	}
	// Quotas first: one write on the tier holds all reclaimed work below it at once, where
	// cpusets on v1 must narrow child by child before their parent may.
	if err := errors.Join(a.writer.ApplyUrgent(quotas), a.writer.ApplyUrgent(narrow)); err != nil {
		a.log.Error("fast path cgroup write failed", "err", err)
	}
	a.mu.Lock()
	a.publishLendingLocked(time.Now(), snap)
	a.mu.Unlock()
}

// within says whether cgroup p is dir or below it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// onlineCgroups are the cgroups whose CPU time the fast path counts as online work (plus)
// once the ones to take out of it (minus) are subtracted: tidal's online tiers and, with a
// pod source, every pod but the reclaimed and dedicated ones.
func (a *Agent) onlineCgroups() (plus, minus []string) {
	plus = []string{plugins.TierPath(a.cfg.Cgroup.Root, qos.Shared)}
	if a.cfg.CPU.ReservedSystemCPUs.IsEmpty() {
		// Without reserved CPUs the system tier runs in the shared pool too.
		plus = append(plus, plugins.TierPath(a.cfg.Cgroup.Root, qos.System))
	}
	if a.pods == nil {
		return plus, nil
	}
	kubepods, ok := a.pods.Kubepods()
	if !ok {
		return plus, nil
	}
	plus = append(plus, kubepods)
	for _, r := range a.store.Snapshot().Workloads {
		if r.Owner.Foreign() && (r.Tier == qos.Reclaimed || r.Tier == qos.Dedicated) {
			minus = append(minus, r.Cgroup)
		}
	}
	slices.Sort(minus)
	return plus, minus
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
		changes := a.advisor.Pressure(time.Now(), fmt.Sprintf("online CPU pressure (PSI: shared tier's tasks stalled over %s in %s)",
			a.cfg.Loops.PSIStallThreshold, a.cfg.Loops.PSIWindow))
		for _, c := range changes {
			a.actionLocked("throttle", "online-pressure", c.Reason)
		}
		if len(changes) > 0 {
			a.planGeneration++
		}
		a.mu.Unlock()
		if len(changes) > 0 {
			a.writeReclaimedLimits()
		}
	})
	if err != nil {
		a.log.Warn("PSI trigger unavailable; the utilization tick drives the fast path", "path", path, "err", err)
	}
}
