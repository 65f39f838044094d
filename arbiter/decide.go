package arbiter

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// DecideInput is everything a decision depends on. Decide reads no clock and no other state.
type DecideInput struct {
	// Now is the arbiter's time of the decision.
	Now time.Time
	// Report is the node's validated report.
	Report *arbiterapi.Report
	// TTL is how long the lease lasts without a new report.
	TTL time.Duration
	// Previous is the node's current lease, or nil. Its GPUs stay with the same rules when
	// they can (so a renewal never shuffles GPUs), and its generation is kept when nothing
	// changes.
	Previous *arbiterapi.Lease
	// LentElsewhere returns what a queue is lent by other nodes now, for guarantees; nil
	// means nothing.
	LentElsewhere func(queue string) arbiterapi.Resources
}

// Decide computes a node's lease. For each rule that
//
//   - selects the node (its node selector matches the node's labels),
//   - does not lend to the queue that owns the node (the policy's owner label),
//   - has its window open at Now (in the rule's time zone), and
//   - finds the node's online utilization under its threshold,
//
// the rule's queue is granted the rule's amounts, as far as what the node can lend now
// allows. When the active rules ask for more than the node can lend, each resource is divided:
// first to rules whose queue is short of its guarantee (up to the shortfall), then to all in
// proportion to their queues' weights, never more than a rule asks for. What remains lendable
// goes to the shared queue. Each grant lasts until its window closes or the lease expires,
// whichever is first.
func (p *Policy) Decide(in DecideInput) arbiterapi.Lease {
	r := in.Report
	expires := in.Now.Add(in.TTL)
	lease := arbiterapi.Lease{Node: r.Node, Issued: in.Now, Expires: expires, Grants: []arbiterapi.Grant{}}

	type claim struct {
		rule  *Rule
		queue Queue
		until time.Time
	}
	var claims []claim
	for i := range p.Rules {
		rule := &p.Rules[i]
		if !rule.Selects(r.Labels) {
			continue
		}
		skip := func(format string, args ...any) {
			lease.Skipped = append(lease.Skipped, arbiterapi.Skip{Rule: rule.Name, Reason: fmt.Sprintf(format, args...)})
		}
		if owner := r.Labels[p.OwnerLabel]; owner != "" && owner == rule.Queue {
			skip("the node is owned by queue %s (label %s)", owner, p.OwnerLabel)
			continue
		}
		if !rule.Window.Contains(in.Now) {
			skip("outside its window %s %s", rule.Window, rule.Window.Zone())
			continue
		}
		if m := rule.MaxOnlineUtilization; m > 0 && r.Online.Utilization >= m {
			skip("online utilization %.2f is not under %.2f", r.Online.Utilization, m)
			continue
		}
		until := expires
		if end := rule.Window.NextChange(in.Now); !end.IsZero() && end.Before(until) {
			until = end
		}
		q, _ := p.Queue(rule.Queue)
		claims = append(claims, claim{rule: rule, queue: q, until: until})
	}

	// Divide each resource between the claims.
	n := len(claims)
	weights := make([]int64, n)
	for i, c := range claims {
		weights[i] = int64(c.queue.Weight)
	}
	want := func(res func(arbiterapi.Resources) int64) []int64 {
		out := make([]int64, n)
		for i, c := range claims {
			out[i] = res(c.rule.Lend)
		}
		return out
	}
	shortfall := func(res func(arbiterapi.Resources) int64) []int64 {
		out := make([]int64, n)
		left := map[string]int64{}
		for i, c := range claims {
			q := c.queue.Name
			if _, ok := left[q]; !ok {
				var elsewhere arbiterapi.Resources
				if in.LentElsewhere != nil {
					elsewhere = in.LentElsewhere(q)
				}
				left[q] = max(res(c.queue.Guaranteed)-res(elsewhere), 0)
			}
			out[i] = min(res(c.rule.Lend), left[q])
			left[q] -= out[i]
		}
		return out
	}
	lendable := r.Lendable.Resources()
	cpuOf := func(x arbiterapi.Resources) int64 { return x.MilliCPU }
	memOf := func(x arbiterapi.Resources) int64 { return x.MemoryBytes }
	gpuOf := func(x arbiterapi.Resources) int64 { return int64(x.GPUs) }
	cpu := divide(lendable.MilliCPU, shortfall(cpuOf), want(cpuOf), weights)
	mem := divide(lendable.MemoryBytes, shortfall(memOf), want(memOf), weights)
	gpus := divide(int64(lendable.GPUs), shortfall(gpuOf), want(gpuOf), weights)

	// Pick GPUs: a rule keeps the GPUs it had when it still may, then takes free ones in the
	// order the node reported them.
	uuids := pickGPUs(r.Lendable.GPUUUIDs, gpus, func(i int) []string {
		if in.Previous == nil {
			return nil
		}
		for _, g := range in.Previous.Grants {
			if g.Rule == claims[i].rule.Name && g.Queue == claims[i].queue.Name {
				return g.GPUs
			}
		}
		return nil
	})

	var lent arbiterapi.Resources
	for i, c := range claims {
		g := arbiterapi.Grant{Queue: c.queue.Name, Rule: c.rule.Name, MilliCPU: cpu[i], MemoryBytes: mem[i], GPUs: uuids[i], Until: c.until}
		if g.Resources().IsZero() {
			lease.Skipped = append(lease.Skipped, arbiterapi.Skip{Rule: c.rule.Name, Reason: "the node has nothing left to lend that the rule asks for"})
			continue
		}
		lease.Grants = append(lease.Grants, g)
		lent = lent.Add(g.Resources())
	}
	rest := arbiterapi.Grant{
		Queue:       p.SharedQueue,
		MilliCPU:    lendable.MilliCPU - lent.MilliCPU,
		MemoryBytes: lendable.MemoryBytes - lent.MemoryBytes,
		GPUs:        uuids[n],
		Until:       expires,
	}
	if !rest.Resources().IsZero() {
		lease.Grants = append(lease.Grants, rest)
	}
	for i := range lease.Grants {
		if lease.Grants[i].GPUs == nil {
			lease.Grants[i].GPUs = []string{}
		}
	}

	lease.Generation = uint64(max(in.Now.UnixMilli(), 1))
	if prev := in.Previous; prev != nil {
		if sameGrants(prev.Grants, lease.Grants) {
			lease.Generation = prev.Generation
		} else {
			lease.Generation = max(lease.Generation, prev.Generation+1)
		}
	}
	return lease
}

// divide splits avail between claims: first up to each claim's priority amount, then up to its
// full want, each round in proportion to weights (see waterfill).
func divide(avail int64, priority, want, weights []int64) []int64 {
	first := waterfill(avail, priority, weights)
	rest := make([]int64, len(want))
	for i := range want {
		avail -= first[i]
		rest[i] = want[i] - first[i]
	}
	second := waterfill(avail, rest, weights)
	for i := range first {
		first[i] += second[i]
	}
	return first
}

// waterfill divides avail between claimants in proportion to their weights without giving any
// more than its cap (weighted max-min fairness): a claimant whose cap fits in its share gets
// its cap and leaves the rest of its share to the others. Units that proportional shares leave
// over when they round down go one each to the first claimants still short. Amounts are at
// most 2^50 and weights at most 1000, so avail*weight fits in an int64.
func waterfill(avail int64, caps, weights []int64) []int64 {
	out := make([]int64, len(caps))
	var active []int
	var total int64
	for i, c := range caps {
		if c > 0 && weights[i] > 0 {
			active = append(active, i)
			if total <= avail { // past avail the sum only needs to stay there, not overflow
				total += c
			}
		}
	}
	if total <= avail { // enough for everyone
		for _, i := range active {
			out[i] = caps[i]
		}
		return out
	}
	for avail > 0 && len(active) > 0 {
		var wsum int64
		for _, i := range active {
			wsum += weights[i]
		}
		// Everyone whose remaining cap fits in its share at this round's figures is satisfied.
		round := avail
		still := active[:0:0]
		for _, i := range active {
			if need := caps[i] - out[i]; mulLE(need, wsum, round, weights[i]) {
				out[i] += need
				avail -= need
			} else {
				still = append(still, i)
			}
		}
		if len(still) == len(active) {
			// Nobody fits: everyone gets its proportional share, rounded down, and the units
			// left over go one each in order.
			given := int64(0)
			for _, i := range active {
				share := avail * weights[i] / wsum
				out[i] += share
				given += share
			}
			left := avail - given
			for _, i := range active {
				if left == 0 {
					break
				}
				if out[i] < caps[i] {
					out[i]++
					left--
				}
			}
			return out
		}
		active = still
	}
	return out
}

// mulLE reports whether a*b <= c*d for non-negative a, b, c, d, without overflow.
func mulLE(a, b, c, d int64) bool {
	hi1, lo1 := bits.Mul64(uint64(a), uint64(b))
	hi2, lo2 := bits.Mul64(uint64(c), uint64(d))
	return hi1 < hi2 || hi1 == hi2 && lo1 <= lo2
}

// pickGPUs assigns counts[i] of the lendable UUIDs to each claim i, preferring the ones
// previous(i) returns, and returns one list per claim plus, last, the UUIDs left over.
func pickGPUs(lendable []string, counts []int64, previous func(i int) []string) [][]string {
	out := make([][]string, len(counts)+1)
	taken := make(map[string]bool, len(lendable))
	free := make(map[string]bool, len(lendable))
	for _, u := range lendable {
		free[u] = true
	}
	for i, c := range counts {
		for _, u := range previous(i) {
			if int64(len(out[i])) == c {
				break
			}
			if free[u] && !taken[u] {
				out[i] = append(out[i], u)
				taken[u] = true
			}
		}
	}
	next := 0
	for i, c := range counts {
		for int64(len(out[i])) < c && next < len(lendable) {
			if u := lendable[next]; !taken[u] {
				out[i] = append(out[i], u)
				taken[u] = true
			}
			next++
		}
		slices.Sort(out[i])
	}
	for _, u := range lendable {
		if !taken[u] {
			out[len(counts)] = append(out[len(counts)], u)
		}
	}
	return out
}

// sameGrants reports whether a and b lend the same things (Until aside).
func sameGrants(a, b []arbiterapi.Grant) bool {
	return slices.EqualFunc(a, b, func(x, y arbiterapi.Grant) bool {
		return x.Queue == y.Queue && x.Rule == y.Rule && x.MilliCPU == y.MilliCPU &&
			x.MemoryBytes == y.MemoryBytes && slices.Equal(x.GPUs, y.GPUs)
	})
}
