package io_test

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/io"
	"github.com/tidalqos/tidal/qos"
)

func lent() []plugins.IOLimit {
	return []plugins.IOLimit{{Device: "254:0", ReadBps: 50 << 20, WriteBps: 20 << 20, ReadIOPS: 500, WriteIOPS: 200}}
}

func TestFillThrottlesOnlyReclaimed(t *testing.T) {
	tree := plugins.NewTree("tidal", nil, nil)
	io.Resource{}.Fill(tree, plugins.Node{LentIO: lent(), IOWeightWorks: true})
	for _, tier := range qos.AllTiers() {
		s := tree.Tier(tier)
		if len(s.IOLimits) != 1 || s.IOLimits[0].Device != "254:0" {
			t.Fatalf("%s: limits %+v, want one entry for 254:0", tier, s.IOLimits)
		}
		if tier == qos.Reclaimed {
			if s.IOLimits[0] != lent()[0] || s.IOWeight != io.ReclaimedWeight {
				t.Errorf("reclaimed: %+v weight %d", s.IOLimits[0], s.IOWeight)
			}
			continue
		}
		if !s.IOLimits[0].Unlimited() || s.IOWeight != io.OnlineWeight {
			t.Errorf("%s is throttled: %+v weight %d", tier, s.IOLimits[0], s.IOWeight)
		}
	}
	if r := tree.Root(); r.IOLimits != nil || r.IOWeight != 0 {
		t.Errorf("root touched: %+v", r)
	}
}

func TestNoWeightWhereTheSchedulerIgnoresIt(t *testing.T) {
	tree := plugins.NewTree("tidal", nil, nil)
	io.Resource{}.Fill(tree, plugins.Node{LentIO: lent()})
	if w := tree.Tier(qos.Reclaimed).IOWeight; w != 0 {
		t.Errorf("weight %d written though no disk honours it", w)
	}
}

func TestNothingLentLeavesFilesAlone(t *testing.T) {
	tree := plugins.NewTree("tidal", nil, nil)
	io.Resource{}.Fill(tree, plugins.Node{})
	if s := tree.Tier(qos.Reclaimed); s.IOLimits != nil || s.IOWeight != 0 {
		t.Errorf("IO knobs set with IO isolation off: %+v", s)
	}
}

// With IO isolation off on a node whose IO controller is there, a throttle an earlier run
// wrote is cleared: the tiers and the reclaimed workloads that carry throttles of their own get
// none (an empty list clears every device's), and no weight is touched.
func TestOffClearsWhatAnEarlierRunLeft(t *testing.T) {
	tree := plugins.NewTree("tidal", nil, nil)
	n := plugins.Node{IOClear: true, IOFlat: true}
	io.Resource{}.Fill(tree, n)
	for _, tier := range qos.AllTiers() {
		if s := tree.Tier(tier); s.IOLimits == nil || len(s.IOLimits) != 0 || s.IOWeight != 0 {
			t.Errorf("%s: limits %#v weight %d; want an empty list (clear) and no weight", tier, s.IOLimits, s.IOWeight)
		}
	}
	var d plugins.Decision
	io.Resource{}.Decide(plugins.Workload{Tier: qos.Reclaimed}, n, &d)
	if d.Settings.IOLimits == nil || len(d.Settings.IOLimits) != 0 {
		t.Errorf("reclaimed workload on v1: limits %#v, want cleared", d.Settings.IOLimits)
	}
	d = plugins.Decision{}
	io.Resource{}.Decide(plugins.Workload{Tier: qos.Shared}, n, &d)
	if d.Settings.IOLimits != nil {
		t.Errorf("shared workload: limits %#v, want left alone", d.Settings.IOLimits)
	}
}

func TestDecide(t *testing.T) {
	n := plugins.Node{LentIO: lent(), IOWeightWorks: true}
	cases := []struct {
		name     string
		w        plugins.Workload
		throttle bool
	}{
		{"reclaimed pod", plugins.Workload{Tier: qos.Reclaimed, Owner: plugins.OwnerKubelet}, true},
		{"reclaimed in the tier", plugins.Workload{Tier: qos.Reclaimed, Owner: plugins.OwnerTidal}, false},
		{"online pod", plugins.Workload{Tier: qos.Shared, Owner: plugins.OwnerKubelet}, false},
	}
	for _, c := range cases {
		var d plugins.Decision
		io.Resource{}.Decide(c.w, n, &d)
		if got := d.Settings.IOLimits != nil; got != c.throttle {
			t.Errorf("%s: throttled %v, want %v", c.name, got, c.throttle)
		}
	}
}

// cgroup v1's blkio throttling is flat: every reclaimed workload gets its share of what is
// lent, so together they stay within it; online work still gets none.
func TestFlatThrottlingSharesWhatIsLent(t *testing.T) {
	n := plugins.Node{LentIO: lent(), IOFlat: true, ReclaimedWorkloads: 2}
	var d plugins.Decision
	io.Resource{}.Decide(plugins.Workload{Tier: qos.Reclaimed, Owner: plugins.OwnerTidal}, n, &d)
	want := plugins.IOLimit{Device: "254:0", ReadBps: 25 << 20, WriteBps: 10 << 20, ReadIOPS: 250, WriteIOPS: 100}
	if len(d.Settings.IOLimits) != 1 || d.Settings.IOLimits[0] != want {
		t.Errorf("share %+v, want %+v", d.Settings.IOLimits, want)
	}
	var online plugins.Decision
	io.Resource{}.Decide(plugins.Workload{Tier: qos.Shared, Owner: plugins.OwnerTidal}, n, &online)
	if online.Settings.IOLimits != nil {
		t.Errorf("online workload throttled: %+v", online.Settings.IOLimits)
	}
	if s := io.Share([]plugins.IOLimit{{Device: "1:1", WriteBps: 3}}, 5); s[0].WriteBps != 1 || s[0].ReadBps != 0 {
		t.Errorf("a share must stay a limit (>= 1) and no limit stays none: %+v", s[0])
	}
}
