package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// set steps the clock to t (forward or back).
func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// The arbiter's clock stepped forward and back across the reference policy's night window
// (22:00-08:00 Berlin): a lease grants the window's queue only while the clock reads inside
// the window, a grant never outlasts the window's end, every lease lasts its TTL from the
// clock's now, the lease generation never goes back, and the views answer throughout (a
// node's last report may be in the clock's future). tests/cgroupv2
// TestV2ClockJumpsAcrossLendingWindow steps a real clock under the real binaries.
func TestServerClockSteps(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a")
	berlin := mustZone(t, "Europe/Berlin")
	clock := &fakeClock{t: night(t)}
	a := startArbiter(t, dir, clock, nil)
	at := func(day, h, m int) time.Time { return time.Date(2026, time.June, day, h, m, 0, 0, berlin) }

	var last arbiterapi.Lease
	steps := []struct {
		what    string
		now     time.Time
		inside  bool
		closing time.Time // the window's end, when inside
	}{
		{"inside the window", at(10, 23, 0), true, at(11, 8, 0)},
		{"back out of it", at(10, 20, 0), false, time.Time{}},
		{"forward into it", at(11, 7, 59), true, at(11, 8, 0)},
		{"forward past its end", at(11, 9, 0), false, time.Time{}},
		{"back a day, into the previous night", at(9, 23, 30), true, at(10, 8, 0)},
		{"forward a week, outside", at(17, 12, 0), false, time.Time{}},
		{"back a week, inside", at(10, 1, 0), true, at(10, 8, 0)},
	}
	for _, s := range steps {
		clock.set(s.now)
		lease, err := a.client("node-a").Report(context.Background(), a.nodeReport("node-a"))
		if err != nil {
			t.Fatalf("%s: report: %v", s.what, err)
		}
		g, ok := grantFor(lease, "queue-1")
		switch {
		case ok != s.inside:
			t.Errorf("%s (%s): queue-1 granted %v, want %v: %+v", s.what, s.now, ok, s.inside, lease)
		case ok && (g.Until.After(s.closing) || !g.Until.After(s.now)):
			t.Errorf("%s (%s): queue-1 granted until %s, want within (now, %s]", s.what, s.now, g.Until, s.closing)
		}
		if !lease.Issued.Equal(s.now) || lease.Expires.Sub(lease.Issued) != 30*time.Second {
			t.Errorf("%s: lease issued %s expires %s, want now and now+TTL", s.what, lease.Issued, lease.Expires)
		}
		if lease.Generation < last.Generation || (lease.Generation == last.Generation && !sameGrants(lease.Grants, last.Grants)) {
			t.Errorf("%s: generation %d after %d, with other grants", s.what, lease.Generation, last.Generation)
		}
		last = lease
		var node NodeView
		if code := a.get("/v1/nodes/node-a", "node-a", &node); code != 200 || node.LeaseExpired {
			t.Errorf("%s: GET /v1/nodes/node-a: %d, expired %v", s.what, code, node.LeaseExpired)
		}
		// The views with the node's report in the clock's future, as after a step back.
		clock.set(s.now.Add(-time.Hour))
		var nodes struct{ Nodes []NodeView }
		if code := a.get("/v1/nodes", "node-a", &nodes); code != 200 || len(nodes.Nodes) != 1 {
			t.Errorf("%s, then an hour back: GET /v1/nodes: %d %+v", s.what, code, nodes)
		}
	}
}
