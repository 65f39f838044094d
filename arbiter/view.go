package arbiter

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// NodeState is what the arbiter knows of one node: its last accepted report, when it arrived
// (arbiter time) and the lease it was answered with.
type NodeState struct {
	Report   arbiterapi.Report `json:"report"`
	Received time.Time         `json:"received"`
	Lease    arbiterapi.Lease  `json:"lease"`
	// Restored: the node has not reported since the arbiter restarted; only its lease is
	// known (Report holds just the node's name).
	Restored bool `json:"restored,omitempty"`
}

// View is the cluster view: every reporting node, its lease, and what each queue is lent. It
// reads no clock (every method takes now) and starts no goroutine; it is safe for concurrent
// use. Leases and reports it holds are never modified, only replaced.
type View struct {
	mu    sync.Mutex
	nodes map[string]*nodeEntry
	// lent is what each queue is lent by the grants counted in it (see nodeEntry.counted);
	// nextEnd is when the first of those ends (zero: none counted), when lent must be settled.
	lent    map[string]arbiterapi.Resources
	nextEnd time.Time
	// changes counts changes, so a persister can tell whether there is anything new to save.
	changes uint64
}

type nodeEntry struct {
	NodeState
	// leaseJSON is Lease's JSON encoding, made once: it is both the answer to the report and
	// what the store persists.
	leaseJSON []byte
	// counted are the lease's grants included in View.lent: those in effect when it was
	// counted. A grant stops counting when it ends (its window closed, or the lease expired)
	// and a lease when it is replaced (Accept).
	counted []arbiterapi.Grant
}

// NewView returns an empty view.
func NewView() *View {
	return &View{nodes: map[string]*nodeEntry{}, lent: map[string]arbiterapi.Resources{}}
}

// Accept records a validated report received at now, decides the node's lease under p and
// returns it with its JSON encoding. Only the reporting node's entry changes (and what the
// view counts as lent drops the grants that have ended by now).
func (v *View) Accept(p *Policy, now time.Time, r arbiterapi.Report, ttl time.Duration) (arbiterapi.Lease, []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.settle(now)
	e := v.nodes[r.Node]
	var prev *arbiterapi.Lease
	if e != nil {
		prev = &e.Lease
	}
	lease := p.Decide(DecideInput{
		Now:      now,
		Report:   &r,
		TTL:      ttl,
		Previous: prev,
		LentElsewhere: func(queue string) arbiterapi.Resources {
			total := v.lent[queue]
			if e != nil {
				for _, g := range e.counted {
					if g.Queue == queue {
						total = total.Sub(g.Resources())
					}
				}
			}
			return total
		},
	})
	if e == nil {
		e = &nodeEntry{}
		v.nodes[r.Node] = e
	}
	v.uncount(e)
	e.NodeState = NodeState{Report: r, Received: now, Lease: lease}
	e.leaseJSON, _ = json.Marshal(lease) // cannot fail: plain data
	v.count(e, now)
	v.changes++
	return lease, e.leaseJSON
}

// count adds the grants of e's lease in effect at now to lent.
func (v *View) count(e *nodeEntry, now time.Time) {
	e.counted = e.Lease.Active(now)
	for _, g := range e.counted {
		v.lent[g.Queue] = v.lent[g.Queue].Add(g.Resources())
		// A grant ends at its Until or with its lease (a restored lease may say later).
		end := g.Until
		if e.Lease.Expires.Before(end) {
			end = e.Lease.Expires
		}
		if v.nextEnd.IsZero() || end.Before(v.nextEnd) {
			v.nextEnd = end
		}
	}
}

func (v *View) uncount(e *nodeEntry) {
	for _, g := range e.counted {
		left := v.lent[g.Queue].Sub(g.Resources())
		if left.IsZero() {
			delete(v.lent, g.Queue)
		} else {
			v.lent[g.Queue] = left
		}
	}
	e.counted = nil
}

// settle drops from lent the grants that have ended by now: a window that closed, a lease that
// expired. lent is counted again from every lease when the first counted grant ends (about
// once a lease TTL, since a replaced lease's grants may have been the first), not on every
// report.
func (v *View) settle(now time.Time) {
	if v.nextEnd.IsZero() || now.Before(v.nextEnd) {
		return
	}
	v.nextEnd = time.Time{}
	for _, e := range v.nodes {
		v.uncount(e)
		v.count(e, now)
	}
	// Not a change: lent is not saved, and the leases are as they were.
}

// Sweep stops counting grants that have ended and drops nodes that have not reported for
// longer than timeout; it returns the dropped nodes' names. Call it every second or so.
func (v *View) Sweep(now time.Time, timeout time.Duration) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.settle(now)
	var dropped []string
	for name, e := range v.nodes {
		if now.Sub(e.Received) > timeout {
			v.uncount(e)
			delete(v.nodes, name)
			dropped = append(dropped, name)
			v.changes++
		}
	}
	slices.Sort(dropped)
	return dropped
}

// Len returns the number of nodes in the view.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.nodes)
}

// Changes returns a counter that grows with every change to the view.
func (v *View) Changes() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changes
}

// Snapshot returns every node's lease, in no particular order, and the change counter it
// reflects.
func (v *View) Snapshot() ([]SavedLease, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]SavedLease, 0, len(v.nodes))
	for _, e := range v.nodes {
		out = append(out, SavedLease{Received: e.Received, Lease: e.Lease, encoded: e.leaseJSON})
	}
	return out, v.changes
}

// Restore replaces the view's content with saved leases (from a Snapshot). Leases that have
// expired by now are kept but not counted; nodes silent for longer than timeout are left out,
// and so are leases no arbiter could have issued (see restorable).
func (v *View) Restore(leases []SavedLease, now time.Time, timeout time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes = make(map[string]*nodeEntry, len(leases))
	v.lent, v.nextEnd = map[string]arbiterapi.Resources{}, time.Time{}
	for _, l := range leases {
		if _, twice := v.nodes[l.Lease.Node]; twice || !restorable(l, now, timeout) {
			continue
		}
		e := &nodeEntry{NodeState: NodeState{Report: arbiterapi.Report{Node: l.Lease.Node}, Received: l.Received, Lease: l.Lease, Restored: true}}
		v.nodes[l.Lease.Node] = e
		v.count(e, now) // what is in effect: nothing of an expired lease
	}
	v.changes++
}

// restorable says whether a saved lease may be counted again. In Kubernetes mode leases come
// back from Node annotations, which more than the arbiter can write: a lease with amounts out
// of range, lasting longer than any lease TTL the configuration allows (at most the node
// timeout), or issued further ahead than that would skew every other node's share until it
// expired. Its length is judged on its own clock (Expires - Issued): the replica that issued
// it may run a little ahead of this one.
func restorable(l SavedLease, now time.Time, timeout time.Duration) bool {
	if arbiterapi.CheckNodeName(l.Lease.Node) != "" || now.Sub(l.Received) > timeout ||
		l.Lease.Expires.Sub(l.Lease.Issued) > timeout || l.Lease.Issued.Sub(now) > timeout {
		return false
	}
	for _, g := range l.Lease.Grants {
		if g.MilliCPU < 0 || g.MilliCPU > arbiterapi.MaxMilliCPU || g.MemoryBytes < 0 || g.MemoryBytes > arbiterapi.MaxMemoryBytes ||
			len(g.GPUs) > arbiterapi.MaxGPUs {
			return false
		}
	}
	return true
}

// NodeView is one node in GET /v1/nodes.
type NodeView struct {
	NodeState
	// LeaseExpired: the node has not reported within the lease TTL; it lends nothing.
	LeaseExpired bool `json:"leaseExpired"`
	// Lent is what the node lends now (its grants in effect).
	Lent arbiterapi.Resources `json:"lent"`
}

// Nodes returns every node, sorted by name.
func (v *View) Nodes(now time.Time) []NodeView {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]NodeView, 0, len(v.nodes))
	for _, e := range v.nodes {
		out = append(out, nodeView(e, now))
	}
	slices.SortFunc(out, func(a, b NodeView) int { return cmp.Compare(a.Report.Node, b.Report.Node) })
	return out
}

// Node returns one node.
func (v *View) Node(name string, now time.Time) (NodeView, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.nodes[name]
	if !ok {
		return NodeView{}, false
	}
	return nodeView(e, now), true
}

func nodeView(e *nodeEntry, now time.Time) NodeView {
	return NodeView{NodeState: e.NodeState, LeaseExpired: !now.Before(e.Lease.Expires), Lent: e.Lease.Total(now)}
}

// QueueView is one queue in GET /v1/queues: what it is promised and what it is lent now, from
// which nodes and until when.
type QueueView struct {
	Name string `json:"name"`
	// Shared marks the policy's shared low-SLA queue.
	Shared bool `json:"shared"`
	// InPolicy is false for a queue the current policy no longer has but that still holds
	// grants from leases issued before the policy changed.
	InPolicy   bool                 `json:"inPolicy"`
	Weight     int                  `json:"weight"`
	Guaranteed arbiterapi.Resources `json:"guaranteed"`
	Lent       arbiterapi.Resources `json:"lent"`
	// Shortfall is Guaranteed less Lent, per resource, never negative.
	Shortfall arbiterapi.Resources `json:"shortfall"`
	Nodes     []QueueGrant         `json:"nodes"`
}

// QueueGrant is one node's grant to a queue.
type QueueGrant struct {
	Node        string    `json:"node"`
	Rule        string    `json:"rule,omitempty"`
	MilliCPU    int64     `json:"milliCPU"`
	MemoryBytes int64     `json:"memoryBytes"`
	GPUs        []string  `json:"gpus"`
	Until       time.Time `json:"until"`
}

// Queues returns the policy's queues (the shared queue first) and any other queue that still
// holds grants, with what each is lent at now. withNodes adds the per-node grants.
func (v *View) Queues(p *Policy, now time.Time, withNodes bool) []QueueView {
	byName := map[string]*QueueView{}
	var order []string
	add := func(q QueueView) {
		byName[q.Name] = &q
		order = append(order, q.Name)
	}
	add(QueueView{Name: p.SharedQueue, Shared: true, InPolicy: true, Nodes: []QueueGrant{}})
	for _, q := range p.Queues {
		add(QueueView{Name: q.Name, InPolicy: true, Weight: q.Weight, Guaranteed: q.Guaranteed, Nodes: []QueueGrant{}})
	}

	v.mu.Lock()
	for _, e := range v.nodes {
		for _, g := range e.Lease.Active(now) {
			q := byName[g.Queue]
			if q == nil {
				add(QueueView{Name: g.Queue, Nodes: []QueueGrant{}})
				q = byName[g.Queue]
			}
			q.Lent = q.Lent.Add(g.Resources())
			if withNodes {
				q.Nodes = append(q.Nodes, QueueGrant{Node: e.Report.Node, Rule: g.Rule, MilliCPU: g.MilliCPU, MemoryBytes: g.MemoryBytes, GPUs: g.GPUs, Until: g.Until})
			}
		}
	}
	v.mu.Unlock()

	out := make([]QueueView, 0, len(order))
	for _, name := range order {
		q := byName[name]
		q.Shortfall = q.Guaranteed.Sub(q.Lent)
		slices.SortFunc(q.Nodes, func(a, b QueueGrant) int {
			return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Rule, b.Rule))
		})
		out = append(out, *q)
	}
	return out
}

// RuleView is one lending rule in GET /v1/rules, with what it lends now.
type RuleView struct {
	Name                 string               `json:"name"`
	Queue                string               `json:"queue"`
	NodeSelector         map[string]string    `json:"nodeSelector"`
	Lend                 arbiterapi.Resources `json:"lend"`
	Window               string               `json:"window"`
	TimeZone             string               `json:"timeZone"`
	MaxOnlineUtilization float64              `json:"maxOnlineUtilization,omitempty"`
	// Open: the window is open now. NextChange is when it next opens or closes (absent for an
	// all-day window).
	Open       bool       `json:"open"`
	NextChange *time.Time `json:"nextChange,omitempty"`
	// Nodes is how many nodes lend through the rule now, and Lent what they lend in all.
	Nodes int                  `json:"nodes"`
	Lent  arbiterapi.Resources `json:"lent"`
}

// Rules returns the policy's rules with what each lends at now.
func (v *View) Rules(p *Policy, now time.Time) []RuleView {
	out := make([]RuleView, len(p.Rules))
	index := make(map[string]int, len(p.Rules))
	for i, r := range p.Rules {
		index[r.Name] = i
		rv := RuleView{
			Name: r.Name, Queue: r.Queue, NodeSelector: r.NodeSelector, Lend: r.Lend,
			Window: r.Window.String(), TimeZone: r.Window.Zone(), MaxOnlineUtilization: r.MaxOnlineUtilization,
			Open: r.Window.Contains(now),
		}
		if next := r.Window.NextChange(now); !next.IsZero() {
			rv.NextChange = &next
		}
		out[i] = rv
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.nodes {
		for _, g := range e.Lease.Active(now) {
			if i, ok := index[g.Rule]; ok && g.Rule != "" && out[i].Queue == g.Queue {
				out[i].Nodes++
				out[i].Lent = out[i].Lent.Add(g.Resources())
			}
		}
	}
	return out
}

// Summary is the view's totals, for metrics and /healthz.
type Summary struct {
	Nodes        int // nodes in the view
	ExpiredNodes int // nodes whose lease has expired (silent for longer than the lease TTL)
	// Lent is what each queue is lent now.
	Lent map[string]arbiterapi.Resources
}

// Summarize returns the view's totals at now.
func (v *View) Summarize(now time.Time) Summary {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := Summary{Nodes: len(v.nodes), Lent: map[string]arbiterapi.Resources{}}
	for _, e := range v.nodes {
		if !now.Before(e.Lease.Expires) {
			s.ExpiredNodes++
			continue
		}
		for _, g := range e.Lease.Active(now) {
			s.Lent[g.Queue] = s.Lent[g.Queue].Add(g.Resources())
		}
	}
	return s
}
