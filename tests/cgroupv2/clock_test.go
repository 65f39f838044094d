package cgroupv2

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/tests/testutil"
)

// setClock steps the VM's wall clock (CLOCK_REALTIME) to at. Only inside the VM: the host's
// clock is shared with every other process on it.
func setClock(t *testing.T, at time.Time) {
	t.Helper()
	if !inVM() {
		t.Fatal("setClock outside the VM")
	}
	tv := syscall.NsecToTimeval(at.UnixNano())
	if err := syscall.Settimeofday(&tv); err != nil {
		t.Fatalf("settimeofday %s: %v", at, err)
	}
}

// TestV2ClockJumpsAcrossLendingWindow runs a real arbiter (lending window 22:00-08:00 UTC,
// lease TTL 3s) and a real agent reporting every second in the VM, and steps the VM's wall
// clock forward and back across the window's edges. What must hold: neither process
// crashes; the node lends queue-1 only while the arbiter's clock is inside the window
// (outside it queue-1 has no grant, the documented safe state; the shared queue still gets
// what the node can lend, and the node never lends beyond its grants); a jump out of the window ends the grant within the lease's TTL plus one report;
// a jump back into it grants again. The lease's lifetime is measured on the agent's
// monotonic clock, so a jump back never stretches a lease.
//
// Its first run hung with no output for 13 minutes while two TCG VMs loaded the machine
// (testutil.Get had no timeout then); since, it passes in about 16 s in the VM.
func TestV2ClockJumpsAcrossLendingWindow(t *testing.T) {
	if !inVM() {
		t.Skip("steps the clock: runs inside the cgroup v2 VM (TestInVM boots it)")
	}
	o := testutil.Record(t, "clock stepped forward and back across a 22:00-08:00 lending window (agent and arbiter in a VM)")
	realStart, mono := time.Now(), time.Now()
	t.Cleanup(func() { setClock(t, realStart.Add(time.Since(mono))) })
	day := time.Date(2030, 3, 14, 0, 0, 0, 0, time.UTC)
	setClock(t, day.Add(21*time.Hour+58*time.Minute)) // two minutes before the window opens

	arb := testutil.NewArbiterWindow(t, tidalBin(t), "22:00-08:00", "node-a")
	n := newNode(t, arb.AgentConfig("node-a")+"loops:\n  slowInterval: 500ms\n")
	n.start()

	alive := func() {
		t.Helper()
		for what, p := range map[string]int{"agent": n.agent.Process.Pid, "arbiter": arb.Cmd.Process.Pid} {
			if syscall.Kill(p, 0) != nil {
				t.Fatalf("%s died; agent log:\n%s\narbiter log:\n%s", what, testutil.Tail(n.log.String(), 40), testutil.Tail(arb.Log.String(), 40))
			}
		}
	}
	// lent is the active grants and what the node lends: the window's queue-1 grant, and the
	// shared queue's (what the node can lend beyond the rules, in or out of any window).
	lent := func(s reporter.Status) (grants []string, window *reporter.Grant, sum, lendable int64) {
		if s.Lease != nil && s.Lease.Active {
			for i, g := range s.Lease.Grants {
				grants = append(grants, fmt.Sprintf("%s %dm until %s", g.Queue, g.MilliCPU, g.Until.Format(time.DateTime)))
				sum += g.MilliCPU
				if g.Queue == "queue-1" {
					window = &s.Lease.Grants[i]
				}
			}
		}
		return grants, window, sum, s.Lendable.MilliCPU
	}
	// capped: the node never lends more than its active grants.
	capped := func(s reporter.Status) error {
		if g, _, sum, cpu := lent(s); cpu > sum {
			return fmt.Errorf("lendable %dm beyond the %dm granted (%v)", cpu, sum, g)
		}
		return nil
	}
	// nothingLent: the arbiter answers, and queue-1 is lent nothing outside its window.
	nothingLent := func() error {
		s := n.status()
		if s.Lease == nil || s.Lease.Received.IsZero() {
			return errors.New("no lease received yet")
		}
		if g, w, _, _ := lent(s); w != nil {
			return fmt.Errorf("queue-1 lent outside its window: %v", g)
		}
		return capped(s)
	}
	// granted: queue-1 lent at most its rule's 400m, until no later than the window's end.
	granted := func(end time.Time) func() error {
		return func() error {
			s := n.status()
			g, w, _, _ := lent(s)
			if w == nil || w.MilliCPU <= 0 || w.MilliCPU > 400 {
				return fmt.Errorf("no queue-1 grant of at most 400m: %v", g)
			}
			if w.Until.After(end) {
				return fmt.Errorf("queue-1 granted until %s, past the window's end %s", w.Until, end)
			}
			return capped(s)
		}
	}
	// jump steps the clock and waits for want; it returns how long that took.
	jump := func(what string, to time.Time, want func() error) time.Duration {
		t.Helper()
		setClock(t, to)
		start := time.Now()
		n.eventually(30*time.Second, what, want)
		took := time.Since(start)
		alive()
		g, _, _, cpu := lent(n.status())
		o.Add(t, "%s (clock %s): after %s grants %v, lendable %dm", what, to.Format(time.DateTime), took.Round(100*time.Millisecond), g, cpu)
		return took
	}

	n.eventually(60*time.Second, "a lease with nothing lent before the window", nothingLent)
	n.waitPasses(4)
	if err := nothingLent(); err != nil {
		t.Fatalf("before the window: %v", err)
	}
	alive()

	end := day.Add(32 * time.Hour) // 08:00 the next morning
	jump("forward into the window", day.Add(23*time.Hour), granted(end))
	out := jump("back out of the window", day.Add(21*time.Hour), nothingLent)
	n.waitPasses(4)
	if err := nothingLent(); err != nil {
		t.Fatalf("after the jump back out of the window: %v", err)
	}
	jump("forward into the window again", day.Add(23*time.Hour+30*time.Minute), granted(end))
	// With the arbiter gone, a jump back does not stretch the lease the agent holds: it
	// expires on the agent's monotonic clock, TTL after it was received (a lease kept on the
	// wall clock would last another hour).
	arb.Kill9()
	setClock(t, day.Add(22*time.Hour+30*time.Minute))
	killed := time.Now()
	n.eventually(30*time.Second, "the lease expired with the arbiter gone", func() error {
		if s := n.status(); s.Lease.Active || s.Lendable.MilliCPU != 0 {
			return fmt.Errorf("lease active %v, lendable %dm", s.Lease.Active, s.Lendable.MilliCPU)
		}
		return nil
	})
	stretched := time.Since(killed)
	if syscall.Kill(n.agent.Process.Pid, 0) != nil {
		t.Fatalf("the agent died; log:\n%s", testutil.Tail(n.log.String(), 40))
	}
	o.Add(t, "arbiter killed, clock back an hour inside the window: the lease expired after %s, lendable 0", stretched.Round(100*time.Millisecond))
	if stretched > 15*time.Second {
		t.Errorf("the lease outlived its 3s TTL by %s after the clock went back", stretched)
	}
	arb.Start()
	n.eventually(30*time.Second, "granted again once the arbiter is back", granted(end))
	past := jump("forward past the window's end", day.Add(24*time.Hour+8*time.Hour+30*time.Minute), nothingLent)
	jump("back a day, into the previous night's window", day.Add(-time.Hour), granted(day.Add(8*time.Hour)))
	jump("back an hour before the window", day.Add(-3*time.Hour), nothingLent)
	n.waitPasses(4)
	if err := nothingLent(); err != nil {
		t.Fatalf("at the end, outside the window: %v", err)
	}
	alive()
	for what, log := range map[string]string{"agent": n.log.String(), "arbiter": arb.Log.String()} {
		if strings.Contains(log, "panic") {
			t.Errorf("%s log has a panic:\n%s", what, testutil.Tail(log, 40))
		}
	}
	o.Add(t, "a jump out of the window ended the grant after %s (back) and %s (forward past its end); with the arbiter killed, a jump back ended the lease after %s; lease TTL 3s, reports every 1s",
		out.Round(100*time.Millisecond), past.Round(100*time.Millisecond), stretched.Round(100*time.Millisecond))
}
