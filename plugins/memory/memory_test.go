package memory

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func TestFillLimits(t *testing.T) {
	tree := plugins.NewTree("t", nil, nil)
	Resource{}.Fill(tree, plugins.Node{LentMemory: 4 << 30})
	rec := tree.Tier(qos.Reclaimed)
	if rec.MemoryLimit != 4<<30 {
		t.Errorf("reclaimed tier limit = %d, want the lent 4Gi", rec.MemoryLimit)
	}
	if rec.MemoryHigh != 4<<30-DefaultThrottleMarginBytes {
		t.Errorf("reclaimed tier throttle point = %d, want the default margin below the limit", rec.MemoryHigh)
	}
	if rec.MemoryOOMWait != plugins.On || rec.MemoryLow != 0 || rec.MemoryMin != 0 {
		t.Errorf("reclaimed tier: oom-wait %v, low %d, min %d; want on, untouched protection", rec.MemoryOOMWait, rec.MemoryLow, rec.MemoryMin)
	}
	for _, tier := range []qos.Tier{qos.System, qos.Dedicated, qos.Shared} {
		s := tree.Tier(tier)
		if s.MemoryLimit != plugins.Unlimited || s.MemoryHigh != plugins.Unlimited {
			t.Errorf("%s tier limited to %d, throttled at %d", tier, s.MemoryLimit, s.MemoryHigh)
		}
		// Children's protection counts only up to the parent's.
		if s.MemoryLow != plugins.Unlimited || s.MemoryMin != plugins.Unlimited || s.MemoryOOMWait != plugins.Off {
			t.Errorf("%s tier: low %d, min %d, oom-wait %v; want max, max, off", tier, s.MemoryLow, s.MemoryMin, s.MemoryOOMWait)
		}
	}
	if r := tree.Root(); r.MemoryLow != plugins.Unlimited || r.MemoryMin != plugins.Unlimited || r.MemoryLimit != 0 {
		t.Errorf("root: low %d, min %d, limit %d; want max, max and its limit left alone", r.MemoryLow, r.MemoryMin, r.MemoryLimit)
	}
	tree = plugins.NewTree("t", nil, nil)
	Resource{NoOOMWait: true}.Fill(tree, plugins.Node{LentMemory: 4 << 30})
	if got := tree.Tier(qos.Reclaimed).MemoryOOMWait; got != plugins.Off {
		t.Errorf("NoOOMWait: reclaimed oom-wait %v, want off", got)
	}
}

func TestThrottle(t *testing.T) {
	for _, c := range []struct {
		margin, limit, want int64
	}{
		{0, 4 << 30, 4<<30 - DefaultThrottleMarginBytes},
		{1 << 30, 4 << 30, 3 << 30},
		{0, 256 << 20, 128 << 20},         // at least half the limit
		{-1, 4 << 30, 4 << 30},            // no margin
		{0, 4<<30 + 123, 4<<30 - 256<<20}, // on a page boundary
		{0, plugins.Unlimited, plugins.Unlimited},
		{0, 0, 0},
	} {
		if got := (Resource{ThrottleMarginBytes: c.margin}).Throttle(c.limit); got != c.want {
			t.Errorf("margin %d: Throttle(%d) = %d, want %d", c.margin, c.limit, got, c.want)
		}
	}
}

func TestLimitAbove(t *testing.T) {
	for _, c := range []struct {
		margin, held, want int64
	}{
		{0, 5 << 30, 5<<30 + DefaultThrottleMarginBytes},
		{0, 100 << 20, 200 << 20}, // half the limit is the throttle point there
		{1 << 30, 4 << 30, 5 << 30},
		{-1, 4 << 30, 4 << 30},                                      // no margin
		{0, 4<<30 + 123, 4<<30 + 4096 + DefaultThrottleMarginBytes}, // a page boundary
		{0, 0, 0},
	} {
		r := Resource{ThrottleMarginBytes: c.margin}
		got := r.LimitAbove(c.held)
		if got != c.want {
			t.Errorf("margin %d: LimitAbove(%d) = %d, want %d", c.margin, c.held, got, c.want)
		}
		if c.held > 0 && r.Throttle(got) < c.held {
			t.Errorf("margin %d: the throttle point of LimitAbove(%d) = %d is under it: %d", c.margin, c.held, got, r.Throttle(got))
		}
	}
}

func TestDecide(t *testing.T) {
	n := plugins.Node{LentMemory: 8 << 30}
	decide := func(w plugins.Workload) plugins.Decision {
		var d plugins.Decision
		Resource{}.Decide(w, n, &d)
		return d
	}
	// Online work is protected by its observed working set: low for shared, min for
	// dedicated, rounded down so a moving working set does not rewrite it each sample.
	d := decide(plugins.Workload{Tier: qos.Shared, MemoryUsage: 1<<30 + 5<<20})
	if d.Settings.MemoryLow != 1<<30 || d.Settings.MemoryMin != 0 || d.Settings.MemoryHigh != 0 {
		t.Errorf("shared: low %d, min %d, high %d; want 1Gi, untouched, untouched", d.Settings.MemoryLow, d.Settings.MemoryMin, d.Settings.MemoryHigh)
	}
	d = decide(plugins.Workload{Tier: qos.Dedicated, MemoryUsage: 2 << 30})
	if d.Settings.MemoryMin != 2<<30 || d.Settings.MemoryLow != 0 {
		t.Errorf("dedicated: min %d, low %d; want 2Gi and untouched", d.Settings.MemoryMin, d.Settings.MemoryLow)
	}
	// An online pod's memory is the kubelet's.
	d = decide(plugins.Workload{Tier: qos.Shared, MemoryUsage: 2 << 30, Owner: plugins.OwnerKubelet})
	if s := d.Settings; s.MemoryLimit != 0 || s.MemoryLow != 0 || s.MemoryMin != 0 {
		t.Errorf("online pod: %+v, want its memory left alone", s)
	}
	// A reclaimed pod is capped by what is lent and throttled below it; its own smaller
	// limit is throttled below that.
	d = decide(plugins.Workload{Tier: qos.Reclaimed, Owner: plugins.OwnerKubelet})
	if s := d.Settings; s.MemoryLimit != 8<<30 || s.MemoryHigh != 8<<30-DefaultThrottleMarginBytes || s.MemoryOOMWait != plugins.On {
		t.Errorf("reclaimed pod: limit %d, high %d, oom-wait %v", s.MemoryLimit, s.MemoryHigh, s.MemoryOOMWait)
	}
	d = decide(plugins.Workload{Tier: qos.Reclaimed, MemoryLimit: 1 << 30})
	if s := d.Settings; s.MemoryLimit != 1<<30 || s.MemoryHigh != 1<<30-DefaultThrottleMarginBytes || d.OOMScoreAdj != ReclaimedOOMScoreAdj {
		t.Errorf("reclaimed with its own limit: limit %d, high %d, oom score %d", s.MemoryLimit, s.MemoryHigh, d.OOMScoreAdj)
	}
	// At its own limit lending growing would not free it: the kernel kills rather than hold
	// it waiting for ever. A limit of its own above what is lent waits like any other.
	if d.Settings.MemoryOOMWait != plugins.Off {
		t.Errorf("reclaimed with its own limit under what is lent: oom-wait %v, want off", d.Settings.MemoryOOMWait)
	}
	d = decide(plugins.Workload{Tier: qos.Reclaimed, MemoryLimit: 16 << 30})
	if s := d.Settings; s.MemoryLimit != 8<<30 || s.MemoryOOMWait != plugins.On {
		t.Errorf("reclaimed with its own limit over what is lent: limit %d, oom-wait %v; want what is lent, on", s.MemoryLimit, s.MemoryOOMWait)
	}
	// Inside tidal's tier the tier caps it: no limit of its own, no throttle of its own.
	d = decide(plugins.Workload{Tier: qos.Reclaimed})
	if s := d.Settings; s.MemoryLimit != plugins.Unlimited || s.MemoryHigh != plugins.Unlimited {
		t.Errorf("reclaimed in tidal's tier: limit %d, high %d; want both lifted", s.MemoryLimit, s.MemoryHigh)
	}
}
