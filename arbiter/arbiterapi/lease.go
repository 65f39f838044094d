package arbiterapi

import "time"

// Lease is the arbiter's answer to a report: what the node lends to which queue, how much and
// until when. An agent lends only what a lease it holds grants, and nothing once the lease has
// expired (the safe default when it cannot reach the arbiter).
type Lease struct {
	Node string `json:"node"`
	// Generation changes whenever what is lent changes (queues, rules, amounts, GPUs) and stays
	// the same when a report only renews the lease. It is derived from the arbiter's clock in
	// milliseconds, so a restarted arbiter never reuses one; compare it for equality only.
	Generation uint64 `json:"generation"`
	// Issued is the arbiter's time when it decided; Expires = Issued + the lease TTL. An agent
	// whose clock may differ should use Expires-Issued as a duration on its own clock.
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
	// Grants are what is lent, at most one per rule plus one for the shared queue.
	Grants []Grant `json:"grants"`
	// Skipped says why rules that select this node grant nothing now.
	Skipped []Skip `json:"skipped,omitempty"`
}

// Grant is capacity a node lends to one queue.
type Grant struct {
	Queue string `json:"queue"`
	// Rule is the lending rule behind the grant; "" for the shared queue, which gets what the
	// node can lend and no rule lends.
	Rule        string `json:"rule,omitempty"`
	MilliCPU    int64  `json:"milliCPU"`
	MemoryBytes int64  `json:"memoryBytes"`
	// GPUs are the UUIDs of the GPUs lent.
	GPUs []string `json:"gpus"`
	// Until is when the grant ends: the end of the rule's window or the lease's expiry,
	// whichever comes first.
	Until time.Time `json:"until"`
}

// Resources returns the grant's amounts (GPUs as a count).
func (g Grant) Resources() Resources {
	return Resources{MilliCPU: g.MilliCPU, MemoryBytes: g.MemoryBytes, GPUs: len(g.GPUs)}
}

// Skip says why a rule that selects a node grants it nothing.
type Skip struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Active returns the grants in effect at now: none once the lease has expired, and none whose
// Until has passed.
func (l Lease) Active(now time.Time) []Grant {
	if !now.Before(l.Expires) {
		return nil
	}
	var out []Grant
	for _, g := range l.Grants {
		if now.Before(g.Until) {
			out = append(out, g)
		}
	}
	return out
}

// Total returns the sum of the grants in effect at now.
func (l Lease) Total(now time.Time) Resources {
	var sum Resources
	for _, g := range l.Active(now) {
		sum = sum.Add(g.Resources())
	}
	return sum
}
