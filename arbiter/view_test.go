package arbiter

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// A node that stops reporting lends nothing once its lease expires, and leaves the view after
// the node timeout.
func TestViewNodeStopsReporting(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	v := NewView()
	const ttl, timeout = 30 * time.Second, 2 * time.Minute
	t0 := time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
	v.Accept(p, t0, gpuNode("gpu-1", map[string]string{"pool": "gpu"}), ttl)
	v.Accept(p, t0, gpuNode("gpu-2", map[string]string{"pool": "gpu"}), ttl)

	lent := func(now time.Time) arbiterapi.Resources { return v.Summarize(now).Lent["queue-1"] }
	if got := lent(t0.Add(29 * time.Second)); got != (arbiterapi.Resources{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 8}) {
		t.Fatalf("queue-1 lent %+v at t0+29s", got)
	}
	// gpu-2 keeps reporting, gpu-1 does not.
	for s := 10; s <= 40; s += 10 {
		v.Accept(p, t0.Add(time.Duration(s)*time.Second), gpuNode("gpu-2", map[string]string{"pool": "gpu"}), ttl)
		v.Sweep(t0.Add(time.Duration(s)*time.Second), timeout)
	}
	now := t0.Add(30 * time.Second)
	if got := lent(now); got != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) {
		t.Errorf("queue-1 lent %+v at t0+30s, want only gpu-2's", got)
	}
	n, ok := v.Node("gpu-1", now)
	if !ok || !n.LeaseExpired || !n.Lent.IsZero() {
		t.Errorf("gpu-1 at t0+30s: %+v", n)
	}
	if s := v.Summarize(now); s.Nodes != 2 || s.ExpiredNodes != 1 {
		t.Errorf("summary %+v", s)
	}
	for _, q := range v.Queues(p, now, true) {
		for _, g := range q.Nodes {
			if g.Node == "gpu-1" {
				t.Errorf("queue %s still lists gpu-1: %+v", q.Name, g)
			}
		}
	}
	// After the node timeout it is gone.
	if dropped := v.Sweep(t0.Add(timeout+time.Second), timeout); !reflect.DeepEqual(dropped, []string{"gpu-1"}) {
		t.Errorf("dropped %v", dropped)
	}
	if _, ok := v.Node("gpu-1", now); ok || v.Len() != 1 {
		t.Error("gpu-1 still in the view")
	}
}

func TestViewQueuesAndRules(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	v := NewView()
	berlin := mustZone(t, "Europe/Berlin")
	now := time.Date(2026, time.June, 10, 23, 0, 0, 0, berlin)
	v.Accept(p, now, gpuNode("gpu-1", map[string]string{"pool": "gpu"}), time.Minute)
	v.Accept(p, now, gpuNode("gpu-2", map[string]string{"pool": "gpu", DefaultOwnerLabel: "queue-1"}), time.Minute)
	qs := v.Queues(p, now, true)
	if len(qs) != 3 || qs[0].Name != "best-effort" || !qs[0].Shared || qs[1].Name != "queue-1" || qs[2].Name != "queue-2" {
		t.Fatalf("queues %+v", qs)
	}
	q1 := qs[1]
	if q1.Lent != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) || len(q1.Nodes) != 1 || q1.Nodes[0].Node != "gpu-1" ||
		q1.Nodes[0].Rule != "night-gpu" || !q1.Nodes[0].Until.Equal(now.Add(time.Minute)) {
		t.Errorf("queue-1 %+v", q1)
	}
	if q1.Shortfall != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) || q1.Guaranteed != (arbiterapi.Resources{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 8}) || q1.Weight != 3 {
		t.Errorf("queue-1 guarantee %+v shortfall %+v", q1.Guaranteed, q1.Shortfall)
	}
	if be := qs[0]; be.Lent != (arbiterapi.Resources{MilliCPU: 8000 + 16000, MemoryBytes: 32*gi + 64*gi, GPUs: 12}) || len(be.Nodes) != 2 {
		t.Errorf("shared %+v", be)
	}
	if qs := v.Queues(p, now, false); len(qs[1].Nodes) != 0 || qs[1].Lent.IsZero() {
		t.Errorf("without nodes: %+v", qs[1])
	}

	rules := v.Rules(p, now)
	if len(rules) != 2 || !rules[0].Open || rules[0].Nodes != 1 || rules[0].Lent != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) ||
		rules[0].NextChange == nil || !rules[0].NextChange.Equal(time.Date(2026, time.June, 11, 8, 0, 0, 0, berlin)) {
		t.Errorf("rules %+v", rules)
	}

	// After a policy change that drops queue-1, its live grants still show, marked.
	p2 := mustPolicy(t, "sharedQueue: best-effort\n")
	qs = v.Queues(p2, now, true)
	if len(qs) != 2 || qs[1].Name != "queue-1" || qs[1].InPolicy || qs[1].Lent.IsZero() {
		t.Errorf("after the policy change: %+v", qs)
	}
}

// Snapshot and Restore through a FileStore: leases within their expiry count again.
func TestStoreRoundTrip(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	v := NewView()
	now := time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
	v.Accept(p, now, gpuNode("gpu-1", map[string]string{"pool": "gpu"}), time.Minute)
	v.Accept(p, now.Add(-50*time.Second), gpuNode("gpu-2", map[string]string{"pool": "gpu"}), time.Minute)
	v.Accept(p, now.Add(-time.Hour), gpuNode("gone", nil), time.Minute)
	leases, _ := v.Snapshot()

	dir := t.TempDir()
	store, err := NewFileStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := store.Load(); st != nil || err != nil {
		t.Fatalf("empty store: %v %v", st, err)
	}
	if err := store.Save(&State{Version: StateVersion, SavedAt: now, Policy: &SavedPolicy{Source: "p", YAML: referencePolicy}, Leases: leases}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "state"))
	if len(entries) != 1 || entries[0].Name() != StateFileName {
		t.Errorf("state dir holds %v, want only the state file", entries)
	}
	st, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy.YAML != referencePolicy {
		t.Error("policy not kept")
	}

	restored := NewView()
	later := now.Add(20 * time.Second)
	if len(st.Leases) != 3 || !sameGrants(st.Leases[0].Lease.Grants, leases[0].Lease.Grants) {
		t.Errorf("leases after a round trip: %+v", st.Leases)
	}
	restored.Restore(st.Leases, later, 10*time.Minute)
	if restored.Len() != 2 {
		t.Errorf("restored %d nodes, want 2 (the one silent for an hour is past the timeout)", restored.Len())
	}
	n, ok := restored.Node("gpu-1", later)
	if !ok || n.LeaseExpired || !n.Restored || n.Lent != (arbiterapi.Resources{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 8}) || !n.Lease.Expires.Equal(now.Add(time.Minute)) {
		t.Errorf("gpu-1 after restore: %+v", n)
	}
	if n, _ := restored.Node("gpu-2", later); !n.LeaseExpired {
		t.Error("gpu-2's lease expired before the restart but counts again")
	}
	if got := restored.Summarize(later).Lent["queue-1"]; got != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) {
		t.Errorf("queue-1 lent %+v after restore", got)
	}

	// Leases no arbiter could have issued are not counted: in Kubernetes mode they come back
	// from Node annotations, which a node's kubelet can write too.
	gpu1 := slices.IndexFunc(leases, func(l SavedLease) bool { return l.Lease.Node == "gpu-1" })
	forged := func(node string, f func(*arbiterapi.Lease)) SavedLease {
		l := leases[gpu1]
		l.Lease.Node = node
		l.Lease.Grants = slices.Clone(l.Lease.Grants)
		f(&l.Lease)
		return l
	}
	restored.Restore([]SavedLease{
		forged("huge", func(l *arbiterapi.Lease) { l.Grants[0].MilliCPU = 1 << 40 }),
		forged("negative", func(l *arbiterapi.Lease) { l.Grants[0].MemoryBytes = -1 }),
		forged("forever", func(l *arbiterapi.Lease) { l.Expires = now.Add(24 * 365 * time.Hour) }),
		forged("gpu-1", func(*arbiterapi.Lease) {}),
		forged("gpu-1", func(l *arbiterapi.Lease) { l.Grants[0].MilliCPU *= 2 }),
	}, later, 10*time.Minute)
	if restored.Len() != 1 {
		t.Errorf("restored %d nodes from forged leases, want only gpu-1's first", restored.Len())
	}
	if got := restored.Summarize(later).Lent["queue-1"]; got != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) {
		t.Errorf("queue-1 lent %+v after restoring forged leases, want gpu-1's first lease alone", got)
	}

	// A damaged file is an error, not a silent fresh start.
	os.WriteFile(store.Path, []byte("{not json"), 0o600)
	if _, err := store.Load(); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Errorf("damaged file: %v", err)
	}
}

// A grant stops counting as lent the moment its window closes, not when its lease expires: at
// 08:00:05 a queue whose night grant ended at 08:00 is short of its guarantee again, and is
// served first on the next node to report.
func TestEndedGrantNoLongerCountsAsLent(t *testing.T) {
	p := mustPolicy(t, `sharedQueue: best-effort
queues:
  - name: queue-1
    guaranteed: {milliCPU: 8000}
  - name: queue-2
rules:
  - {name: a-night, queue: queue-1, nodeSelector: {pool: a}, lend: {milliCPU: 8000}, window: "22:00-08:00", timeZone: UTC}
  - {name: b-day,   queue: queue-1, nodeSelector: {pool: b}, lend: {milliCPU: 8000}, window: "08:00-22:00", timeZone: UTC}
  - {name: b-q2,    queue: queue-2, nodeSelector: {pool: b}, lend: {milliCPU: 8000}, window: "00:00-24:00", timeZone: UTC}
`)
	v := NewView()
	const ttl = 30 * time.Second
	at := func(h, m, s int) time.Time { return time.Date(2026, 6, 11, h, m, s, 0, time.UTC) }
	node := func(name, pool string) arbiterapi.Report {
		r := gpuNode(name, map[string]string{"pool": pool})
		r.Lendable = arbiterapi.Lendable{MilliCPU: 8000}
		return r
	}
	la, _ := v.Accept(p, at(7, 59, 50), node("a", "a"), ttl)
	if g, ok := grantFor(la, "queue-1"); !ok || g.MilliCPU != 8000 || !g.Until.Equal(at(8, 0, 0)) {
		t.Fatalf("node a at 07:59:50: %+v, want queue-1 8000m until 08:00", la)
	}
	// Before 08:00 the night grant still counts: node b's day rule is not open yet, and
	// queue-2 takes what b lends.
	lb, _ := v.Accept(p, at(7, 59, 55), node("b", "b"), ttl)
	if g, _ := grantFor(lb, "queue-2"); g.MilliCPU != 8000 {
		t.Fatalf("node b at 07:59:55: %+v, want queue-2 8000m", lb)
	}
	lb, _ = v.Accept(p, at(8, 0, 5), node("b", "b"), ttl)
	g1, _ := grantFor(lb, "queue-1")
	g2, _ := grantFor(lb, "queue-2")
	if g1.MilliCPU != 8000 || g2.MilliCPU != 0 {
		t.Errorf("node b at 08:00:05: queue-1 %dm, queue-2 %dm; want queue-1, lent nothing since 08:00 and short of its 8000m guarantee, served first: 8000m and 0m", g1.MilliCPU, g2.MilliCPU)
	}
}

// A restored lease whose grant says it lasts past the lease's own expiry (a Node annotation
// more than the arbiter writes) stops counting as lent when the lease expires.
func TestRestoredGrantEndsWithItsLease(t *testing.T) {
	t0 := time.Date(2026, 6, 11, 12, 0, 0, 0, time.UTC)
	v := NewView()
	v.Restore([]SavedLease{{Received: t0, Lease: arbiterapi.Lease{
		Node: "a", Generation: 1, Issued: t0, Expires: t0.Add(30 * time.Second),
		Grants: []arbiterapi.Grant{{Queue: "queue-1", MilliCPU: 8000, Until: t0.Add(time.Hour)}},
	}}}, t0, 2*time.Minute)
	if got := v.lent["queue-1"]; got.MilliCPU != 8000 {
		t.Fatalf("restored: queue-1 lent %+v, want 8000m", got)
	}
	v.Sweep(t0.Add(31*time.Second), 2*time.Minute)
	if got := v.lent["queue-1"]; !got.IsZero() {
		t.Errorf("after the lease expired queue-1 still counts %+v as lent", got)
	}
}
