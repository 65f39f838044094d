package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/sysadvisor/spikewatch"
)

// idleFastTicks: while every NUMA node lends only its minimum, the fast path has nothing to
// cut, and samples this many times less often (it only keeps its window warm). The first
// tick after lending grows comes at once (the watch cuts a slow tick short).
const idleFastTicks = 10

// onlineRefresh: which cgroups hold online work changes as pods come and go; the fast path
// looks again this often, and then also reopens a counter that failed (the watch reads no
// sum without all of online work's counters, so a tier cgroup someone removed and the agent
// re-created leaves it blind until then).
const onlineRefresh = time.Second

// startSpikeWatch starts the fast path's watch: online work's CPU counters read every fast
// interval on a thread outside the Go runtime (spikewatch), waking the agent only when their
// rate crosses what some node could cut for.
func (a *Agent) startSpikeWatch() error {
	w, err := spikewatch.Start(spikewatch.Config{Interval: a.cfg.Loops.FastInterval, Window: a.cfg.Loops.FastWindow,
		Burst: a.cfg.Loops.FastBurstWindow, SlowTicks: idleFastTicks})
	if err != nil {
		return fmt.Errorf("fast path: %w", err)
	}
	a.mu.Lock()
	a.watch = w // under mu: a reconcile (an admission) may already read it
	a.spikeLimitsChangedLocked()
	a.mu.Unlock()
	a.watchOnline()
	return nil
}

// fastLoop shrinks lending at once when the watch sees online work spike; the slow loop
// grows it back later. It owns the watch and stops it on ctx's end. Its duration metric is
// how late the watch's tick woke plus how long the agent took to act on the crossing.
func (a *Agent) fastLoop(ctx context.Context) {
	defer a.watch.Stop()
	observe := a.metrics.LoopObserver("fast")
	refresh := time.NewTicker(onlineRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
			a.watchOnline()
		case c := <-a.watch.Crossings():
			start := time.Now()
			a.spike(c.At, c.WindowMilli, c.BurstMilli)
			observe(c.Late + time.Since(start))
		}
	}
}

// watchOnline points the watch at the cgroups that hold online work now, if they changed or
// a counter failed (a changed set starts the watch's window over).
func (a *Agent) watchOnline() {
	plus, minus := a.onlineCgroups()
	files := func(cgroups []string) []string {
		var out []string
		for _, cg := range cgroups {
			out = append(out, a.layout.CPUCounterPath(cg))
		}
		return out
	}
	want := spikewatch.Counters{Plus: files(plus), Minus: files(minus)}
	if slices.Equal(want.Plus, a.watched.Plus) && slices.Equal(want.Minus, a.watched.Minus) && !a.watch.Stale() {
		return
	}
	a.watched = want
	a.watch.SetCounters(want)
}

// spikeLimitsChangedLocked tells the watch the least online rates at which a spike could cut
// something now; call it whenever the plan or the pools change. The advisor's limits are per
// node, and spike splits online use over nodes by pool size, so each node's limit is scaled
// up by the same split (rounded down: the watch may wake the agent for nothing, never miss).
func (a *Agent) spikeLimitsChangedLocked() {
	if a.watch == nil {
		return
	}
	l := spikewatch.Limits{WindowMilli: spikewatch.Never, BurstMilli: spikewatch.Never, Slow: !a.advisor.LendsAboveMinimum()}
	var total int64
	for _, np := range a.pools {
		total += int64(np.Shared.Size())
	}
	for _, np := range a.pools {
		size := int64(np.Shared.Size())
		window, burst, ok := a.advisor.SpikeLimits(np.Node)
		if !ok || size == 0 {
			continue
		}
		l.WindowMilli = min(l.WindowMilli, window*total/size)
		if a.cfg.Loops.FastBurstWindow > 0 {
			l.BurstMilli = min(l.BurstMilli, burst*total/size)
		}
	}
	a.watch.SetLimits(l)
	a.fastPath.WindowLimitMilliCPU, a.fastPath.BurstLimitMilliCPU = shownLimit(l.WindowMilli), shownLimit(l.BurstMilli)
}

// shownLimit is a watch limit as status shows it: 0 for none (nothing a spike could cut).
func shownLimit(milli int64) int64 {
	if milli == spikewatch.Never {
		return 0
	}
	return milli
}

// spike hands the online rates (over the fast window and the burst window), split over NUMA
// nodes by pool size, to the advisor and, if that shrank lending, writes the reclaimed limits
// at once.
func (a *Agent) spike(now time.Time, onlineMilli, burstMilli int64) {
	a.mu.Lock()
	var total int64
	for _, np := range a.pools {
		total += int64(np.Shared.Size())
	}
	var cuts []reporter.Action
	for _, np := range a.pools {
		if total == 0 {
			break
		}
		size := int64(np.Shared.Size())
		r := advisor.SpikeRates{WindowMilli: onlineMilli * size / total, BurstMilli: burstMilli * size / total,
			Window: a.cfg.Loops.FastWindow, Burst: a.cfg.Loops.FastBurstWindow}
		if c := a.advisor.Spike(now, np.Node, r); c != nil {
			cuts = append(cuts, a.recordActionLocked("throttle", "online-spike", c.Reason))
		}
	}
	a.fastPath.Crossings++
	a.fastPath.LastAt, a.fastPath.LastWindowMilliCPU, a.fastPath.LastBurstMilliCPU = now, onlineMilli, burstMilli
	a.metrics.FastCrossing()
	if len(cuts) > 0 {
		a.fastPath.Cuts++
		a.planGeneration++
		a.spikeLimitsChangedLocked()
	}
	a.mu.Unlock()
	a.writeCuts(cuts)
}

// writeCuts follows the fast path's cuts, decided and recorded under mu, once mu is released:
// it writes the reclaimed limits, then logs the cuts (a log that stalls holds neither).
func (a *Agent) writeCuts(cuts []reporter.Action) {
	if len(cuts) == 0 {
		return
	}
	a.writeReclaimedLimits()
	for _, act := range cuts {
		a.logAction(act)
	}
}

// writeReclaimedLimits is the fast path's narrow write: only the reclaimed cgroups' CPU limits
// (tidal's tier and everything under it, reclaimed pods and their containers), from the
// current plan, without the full pass's other writes and without waiting for it (a pass
// writing meanwhile stops at its next cgroup and hands over the writer): the reclaimed pool's
// cpuset and, with the quota mechanism, the CFS quotas. Under the cores mechanism a cut hands
// cores back to online work, so the online cgroups' cpusets follow, after the quota.
func (a *Agent) writeReclaimedLimits() {
	// One at a time, from plan to write: the fast loop, the interference loop, the PSI
	// trigger and a full pass may all call this at once, and a caller that read an older,
	// larger plan must not write it after one that read the newer, smaller one.
	a.limitsWrite.Lock()
	defer a.limitsWrite.Unlock()
	snap := a.store.Snapshot()
	plan, node, _ := a.currentPlan(snap)
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
	var quotas, narrow, online []plugins.Cgroup
	for _, c := range a.desired(snap, node, plan).Cgroups() {
		if !within(c.Path, reclaimedTier) && !slices.ContainsFunc(reclaimedPods, func(p string) bool { return within(c.Path, p) }) {
			if node.ReclaimedCPU == plugins.MechanismCores && !c.Settings.CPUs.IsEmpty() {
				online = append(online, plugins.Cgroup{Path: c.Path, Foreign: c.Foreign, Settings: plugins.Settings{CPUs: c.Settings.CPUs}})
			}
			continue
		}
		if c.Settings.CPUQuota != 0 {
			quotas = append(quotas, plugins.Cgroup{Path: c.Path, Foreign: c.Foreign, Settings: plugins.Settings{CPUQuota: c.Settings.CPUQuota}})
		}
		if !c.Settings.CPUs.IsEmpty() {
			narrow = append(narrow, plugins.Cgroup{Path: c.Path, Foreign: c.Foreign, Settings: plugins.Settings{CPUs: c.Settings.CPUs}})
		}
	}
	busiestFirst(online, snap)
	// Quotas first: one write on the tier holds all reclaimed work below it at once, where
	// cpusets on v1 must narrow child by child before their parent may.
	if err := errors.Join(a.writer.ApplyUrgent(quotas), a.writer.ApplyUrgent(narrow), a.writer.ApplyUrgent(online)); err != nil {
		a.log.Error("fast path cgroup write failed", "err", err)
	}
	a.mu.Lock()
	a.publishLendingLocked(time.Now(), snap)
	a.mu.Unlock()
}

// busiestFirst orders the cgroups by their workload's last sampled CPU use, busiest first.
// The writer keeps this order among cgroups of one depth, so when the fast path hands cores
// back, a busy online server gets its cpuset widened before a hundred idle workloads do (on
// cgroup v1 one write each, some 20-40 µs apiece).
func busiestFirst(cgroups []plugins.Cgroup, snap state.Snapshot) {
	use := make(map[string]int64, len(snap.Workloads))
	for _, r := range snap.Workloads {
		use[r.Cgroup] = r.UsedMilliCPU
	}
	busy := func(p string) int64 {
		for ; p != "." && p != "/" && p != ""; p = path.Dir(p) {
			if u, ok := use[p]; ok {
				return u
			}
		}
		return 0
	}
	slices.SortStableFunc(cgroups, func(x, y plugins.Cgroup) int { return cmp.Compare(busy(y.Path), busy(x.Path)) })
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
	if a.pods != nil {
		// Pods keep the kubelet's cgroups, and no parent of theirs holds online pods alone.
		a.log.Info("PSI trigger on tidal's shared tier only: it sees tidal run workloads, not pods, whose CPU the utilization tick counts")
	}
	err := metrics.WatchPressure(ctx, path, a.cfg.Loops.PSIStallThreshold, a.cfg.Loops.PSIWindow, func() {
		a.mu.Lock()
		changes := a.advisor.Pressure(time.Now(), fmt.Sprintf("online CPU pressure (PSI: shared tier's tasks stalled over %s in %s)",
			a.cfg.Loops.PSIStallThreshold, a.cfg.Loops.PSIWindow))
		var cuts []reporter.Action
		for _, c := range changes {
			cuts = append(cuts, a.recordActionLocked("throttle", "online-pressure", c.Reason))
		}
		if len(cuts) > 0 {
			a.planGeneration++
			a.spikeLimitsChangedLocked()
		}
		a.mu.Unlock()
		a.writeCuts(cuts)
	})
	if err != nil {
		a.log.Warn("PSI trigger unavailable; the utilization tick drives the fast path", "path", path, "err", err)
	}
}
