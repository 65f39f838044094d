package agent

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/arbiter/arbiterapi"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/eviction"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
)

// leasing is the agent's side of the arbiter: it reports what the node can lend and holds
// the lease it gets back. With an arbiter configured the node lends only what an active
// lease grants: nothing before the first lease, and nothing once the lease has expired
// (the arbiter unreachable), the safe default.
type leasing struct {
	client *arbiterapi.Client
	// tokenFile is read again when it changes: a projected ServiceAccount token rotates.
	tokenFile string
	tokenMod  time.Time
	labels    map[string]string
	lease     arbiterapi.Lease
	// expires is the lease's end on the agent's own clock (received + the lease's TTL), so a
	// skew between the two clocks does not stretch it.
	expires  time.Time
	received time.Time
	lastErr  error
}

func newLeasing(cfg config.Config) (*leasing, error) {
	if cfg.Arbiter.URL == "" {
		return nil, nil
	}
	labels, err := config.ParseLabels(cfg.Arbiter.NodeLabels)
	if err != nil {
		return nil, config.KeyErrorf("arbiter.nodeLabels", "%v", err)
	}
	l := &leasing{
		client:    &arbiterapi.Client{URL: cfg.Arbiter.URL, NodeName: cfg.NodeName},
		tokenFile: cfg.Arbiter.TokenFile,
		labels:    labels,
	}
	if err := l.refreshToken(); err != nil {
		return nil, err
	}
	return l, nil
}

// refreshToken reads the token file again if it changed since it was last read.
func (l *leasing) refreshToken() error {
	st, err := os.Stat(l.tokenFile)
	if err != nil {
		return config.KeyErrorf("arbiter.tokenFile", "%v", err)
	}
	if st.ModTime().Equal(l.tokenMod) && l.client.Token != "" {
		return nil
	}
	token, err := os.ReadFile(l.tokenFile)
	if err != nil {
		return config.KeyErrorf("arbiter.tokenFile", "%v", err)
	}
	if t := strings.TrimSpace(string(token)); t != "" {
		l.client.Token, l.tokenMod = t, st.ModTime()
	}
	return nil
}

// active returns the grants in effect now, by the agent's clock.
func (l *leasing) active(now time.Time) []arbiterapi.Grant {
	if !now.Before(l.expires) {
		return nil
	}
	var out []arbiterapi.Grant
	for _, g := range l.lease.Grants {
		// Until is on the arbiter's clock: shift it by the same offset as the expiry.
		if now.Before(g.Until.Add(l.expires.Sub(l.lease.Expires))) {
			out = append(out, g)
		}
	}
	return out
}

// granted sums the active grants.
func (l *leasing) granted(now time.Time) arbiterapi.Resources {
	var sum arbiterapi.Resources
	for _, g := range l.active(now) {
		sum = sum.Add(g.Resources())
	}
	return sum
}

// reportLoop reports every interval (and once at start) until ctx is done.
func (a *Agent) reportLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Arbiter.ReportInterval)
	defer t.Stop()
	for {
		a.reportOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reportOnce sends one report and applies the lease that comes back. The network call runs
// without the agent's lock.
func (a *Agent) reportOnce(ctx context.Context) {
	snap := a.store.Snapshot()
	// The token file is read outside the agent's lock, which the fast path needs; only this
	// goroutine touches the token and the client.
	if err := a.lease.refreshToken(); err != nil {
		a.log.Warn("cannot read the arbiter token again; using the last one", "err", err)
	}
	a.mu.Lock()
	r := a.reportLocked(time.Now(), snap)
	a.mu.Unlock()

	lease, err := a.lease.client.Report(ctx, r)
	now := time.Now()
	a.mu.Lock()
	if err != nil {
		if a.lease.lastErr == nil {
			a.log.Warn("cannot report to the arbiter; lending only until the lease expires", "err", err, "expires", a.lease.expires)
		}
		a.lease.lastErr = err
		a.mu.Unlock()
		_ = a.reconcile()
		return
	}
	if err := checkLease(lease, a.cfg.Arbiter.ReportInterval); err != nil {
		a.lease.lastErr = err
		a.mu.Unlock()
		a.log.Warn("ignoring a lease the agent cannot trust; keeping the one it holds", "err", err)
		return
	}
	if lease.Generation != a.lease.lease.Generation {
		a.actionLocked("lease", "arbiter", describeLease(lease))
	}
	a.lease.lease, a.lease.received, a.lease.lastErr = lease, now, nil
	a.lease.expires = now.Add(lease.Expires.Sub(lease.Issued))
	leased := leasedGPUs(a.lease.active(now))
	a.mu.Unlock()
	a.store.Allocator().GPUs().SetLeased(now, leased)
	_ = a.reconcile()
}

// reportLocked describes the node for the arbiter: capacity, online use and prediction, what
// it could lend by its own advisor (the arbiter caps it), per NUMA node.
func (a *Agent) reportLocked(now time.Time, snap state.Snapshot) arbiterapi.Report {
	plan := a.advisor.Vouched()
	demand := a.advisor.Demand()
	var lendableGPUs []string
	gpus := a.gpuStatus()
	for _, g := range gpus {
		if g.Lendable {
			lendableGPUs = append(lendableGPUs, g.UUID)
		}
	}
	sort.Strings(lendableGPUs)
	r := arbiterapi.Report{
		Node: a.cfg.NodeName, Labels: a.lease.labels, Time: now,
		Capacity: arbiterapi.Resources{MilliCPU: int64(a.topo.AllCPUs().Size()) * 1000, MemoryBytes: a.memTotal, GPUs: len(gpus)},
		Lendable: arbiterapi.Lendable{GPUs: len(lendableGPUs), GPUUUIDs: lendableGPUs},
	}
	if r.Lendable.GPUUUIDs == nil {
		r.Lendable.GPUUUIDs = []string{}
	}
	if a.advisor.Primed() && a.applyErr == nil {
		r.Lendable.MilliCPU = plan.TotalMilliCPU()
		r.Lendable.MemoryBytes = min(plan.ReclaimedMemory, a.memTotal)
	}
	var pool, used int64
	for _, np := range a.pools {
		nodePool := int64(np.Shared.Size()) * 1000
		n := arbiterapi.NUMANode{ID: np.Node,
			Capacity: arbiterapi.Resources{MilliCPU: int64(a.topo.CPUsOfNUMA(np.Node).Size()) * 1000},
			Online: arbiterapi.Online{
				Used:        arbiterapi.Usage{MilliCPU: min(a.online[np.Node], nodePool)},
				Predicted:   arbiterapi.Usage{MilliCPU: min(demand[np.Node], nodePool)},
				Utilization: ratio(a.online[np.Node], nodePool),
			},
			Lendable: arbiterapi.Lendable{GPUUUIDs: []string{}},
		}
		if r.Lendable.MilliCPU > 0 {
			n.Lendable.MilliCPU = plan.ReclaimedMilliCPU[np.Node]
		}
		pool += nodePool
		used += n.Online.Used.MilliCPU
		r.Online.Predicted.MilliCPU += n.Online.Predicted.MilliCPU
		r.NUMA = append(r.NUMA, n)
	}
	r.Online.Used = arbiterapi.Usage{MilliCPU: used, MemoryBytes: min(a.memOnline, a.memTotal)}
	r.Online.Predicted.MemoryBytes = min(a.advisor.MemoryDemand(), a.memTotal)
	r.Online.Utilization = ratio(used, pool)
	return r
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return min(float64(a)/float64(b), 1)
}

// leaseCapLocked caps a plan at what the active lease grants: with an arbiter, the node lends
// only what it was granted (the minimum keeps reclaimed processes schedulable; lendable
// capacity reports the cap itself).
func (a *Agent) leaseCapLocked(plan advisor.Plan, now time.Time) advisor.Plan {
	if a.lease == nil {
		return plan
	}
	g := a.lease.granted(now)
	total := plan.TotalMilliCPU()
	if total > g.MilliCPU {
		// Scale every NUMA node down alike.
		for node, v := range plan.ReclaimedMilliCPU {
			if total > 0 {
				plan.ReclaimedMilliCPU[node] = v * g.MilliCPU / total
			}
		}
	}
	plan.ReclaimedMemory = min(plan.ReclaimedMemory, g.MemoryBytes)
	return plan
}

// enforceLease takes back what the lease no longer grants: reclaimed work of a queue without
// an active grant is evicted after the grace period, lowest priority first, one at a time.
// Work of no queue (the shared low-SLA queue) is only throttled by the cap.
func (a *Agent) enforceLease(ctx context.Context, now time.Time) {
	if a.lease == nil {
		return
	}
	snap := a.store.Snapshot()
	a.mu.Lock()
	grantedQueues := map[string]bool{}
	for _, g := range a.lease.active(now) {
		grantedQueues[g.Queue] = true
	}
	var victims []plugins.Workload
	for _, r := range snap.Workloads {
		if r.Tier != qos.Reclaimed || r.Queue == "" {
			continue
		}
		if grantedQueues[r.Queue] {
			delete(a.ungranted, r.Queue)
			continue
		}
		if r.Evicting {
			continue
		}
		since, ok := a.ungranted[r.Queue]
		if !ok {
			a.ungranted[r.Queue] = now
			a.actionLocked("throttle", "lease-ended", fmt.Sprintf("queue %s has no grant (lease %s); its work is evicted after %s", r.Queue, leaseState(a.lease, now), a.cfg.Eviction.GracePeriod))
			continue
		}
		// Like the other evictions: one whose eviction was just refused (a disruption
		// budget) waits, and the next victim is tried meanwhile.
		if now.Sub(since) >= a.cfg.Eviction.GracePeriod && len(r.PIDs) > 0 && !now.Before(r.RefusedUntil) {
			victims = append(victims, r.Workload)
		}
	}
	cooling := time.Since(a.lastEvict) < a.cfg.Eviction.CoolDown
	a.mu.Unlock()
	if len(victims) == 0 || cooling || evicting(snap) {
		return
	}
	r, _ := snap.Get(eviction.Rank(victims)[0].Name)
	a.mu.Lock()
	since := a.ungranted[r.Queue]
	a.mu.Unlock()
	a.evict(ctx, r, "lease-ended", fmt.Sprintf("%s (queue %s, priority %d): no grant for its queue since %s", r.Name, r.Queue, r.ReclaimPriority, since.Format(time.TimeOnly)))
}

// maxLeaseReports bounds a lease's lifetime in report intervals: a lease that claims to last
// much longer than the agent reports would keep lending long after the arbiter is gone.
const maxLeaseReports = 10

// checkLease refuses a lease with negative amounts or a lifetime the agent will not honour.
func checkLease(l arbiterapi.Lease, interval time.Duration) error {
	if ttl := l.Expires.Sub(l.Issued); ttl <= 0 || ttl > maxLeaseReports*interval {
		return fmt.Errorf("lease generation %d lasts %v: want (0, %v]", l.Generation, ttl, maxLeaseReports*interval)
	}
	for _, g := range l.Grants {
		if g.MilliCPU < 0 || g.MemoryBytes < 0 {
			return fmt.Errorf("lease generation %d: grant to %s has negative amounts", l.Generation, g.Queue)
		}
	}
	return nil
}

func leaseState(l *leasing, now time.Time) string {
	switch {
	case l.received.IsZero():
		return "none received yet"
	case !now.Before(l.expires):
		return "expired at " + l.expires.Format(time.TimeOnly)
	default:
		return fmt.Sprintf("generation %d", l.lease.Generation)
	}
}

func leasedGPUs(grants []arbiterapi.Grant) []string {
	var out []string
	for _, g := range grants {
		out = append(out, g.GPUs...)
	}
	return out
}

func describeLease(l arbiterapi.Lease) string {
	if len(l.Grants) == 0 {
		return fmt.Sprintf("generation %d: nothing lent", l.Generation)
	}
	var parts []string
	for _, g := range l.Grants {
		parts = append(parts, fmt.Sprintf("%s %dm/%s/%d GPUs until %s", g.Queue, g.MilliCPU, humanBytes(g.MemoryBytes), len(g.GPUs), g.Until.Format(time.TimeOnly)))
	}
	return fmt.Sprintf("generation %d: %s", l.Generation, strings.Join(parts, ", "))
}

func humanBytes(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }

// leaseStatusLocked is the lease for `tidal status`.
func (a *Agent) leaseStatusLocked(now time.Time) *reporter.Lease {
	if a.lease == nil {
		return nil
	}
	s := &reporter.Lease{Arbiter: a.cfg.Arbiter.URL, Generation: a.lease.lease.Generation, Received: a.lease.received,
		Expires: a.lease.expires, Active: now.Before(a.lease.expires), Grants: []reporter.Grant{}}
	if a.lease.lastErr != nil {
		s.LastError = a.lease.lastErr.Error()
	}
	for _, g := range a.lease.active(now) {
		s.Grants = append(s.Grants, reporter.Grant{Queue: g.Queue, Rule: g.Rule, MilliCPU: g.MilliCPU, MemoryBytes: g.MemoryBytes, GPUs: g.GPUs, Until: g.Until})
	}
	return s
}
