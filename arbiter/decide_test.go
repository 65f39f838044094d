package arbiter

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

const gi = int64(1) << 30

// gpuNode is a node that can lend 16 cores, 64 GiB and 8 GPUs.
func gpuNode(name string, labels map[string]string) arbiterapi.Report {
	uuids := []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7"}
	return arbiterapi.Report{
		Node:     name,
		Labels:   labels,
		Capacity: arbiterapi.Resources{MilliCPU: 64000, MemoryBytes: 256 * gi, GPUs: 8},
		Online: arbiterapi.Online{
			Used:        arbiterapi.Usage{MilliCPU: 20000, MemoryBytes: 100 * gi},
			Predicted:   arbiterapi.Usage{MilliCPU: 30000, MemoryBytes: 120 * gi},
			Utilization: 0.3,
		},
		Lendable: arbiterapi.Lendable{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 8, GPUUUIDs: uuids},
	}
}

func decide(p *Policy, now time.Time, r arbiterapi.Report, prev *arbiterapi.Lease) arbiterapi.Lease {
	return p.Decide(DecideInput{Now: now, Report: &r, TTL: 30 * time.Second, Previous: prev})
}

func grantFor(l arbiterapi.Lease, queue string) (arbiterapi.Grant, bool) {
	for _, g := range l.Grants {
		if g.Queue == queue {
			return g, true
		}
	}
	return arbiterapi.Grant{}, false
}

// The reference case, with an injected clock at the window's edges.
func TestDecideReferenceWindow(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	berlin := mustZone(t, "Europe/Berlin")
	node := gpuNode("gpu-1", map[string]string{"pool": "gpu"})
	d := func(day, h, m int) time.Time { return time.Date(2026, time.June, day, h, m, 0, 0, berlin) }
	for _, tc := range []struct {
		name  string
		now   time.Time
		lends bool
		until time.Time
	}{
		{"21:59", d(10, 21, 59), false, time.Time{}},
		{"22:00", d(10, 22, 0), true, d(10, 22, 0).Add(30 * time.Second)}, // capped by the lease TTL
		{"03:00", d(11, 3, 0), true, d(11, 3, 0).Add(30 * time.Second)},
		{"07:59", d(11, 7, 59), true, d(11, 7, 59).Add(30 * time.Second)},
		{"07:59:45", d(11, 7, 59).Add(45 * time.Second), true, d(11, 8, 0)}, // capped by the window
		{"08:00", d(11, 8, 0), false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := decide(p, tc.now, node, nil)
			if !l.Expires.Equal(tc.now.Add(30*time.Second)) || !l.Issued.Equal(tc.now) || l.Node != "gpu-1" {
				t.Errorf("lease header = %+v", l)
			}
			g, ok := grantFor(l, "queue-1")
			shared, _ := grantFor(l, "best-effort")
			if !tc.lends {
				if ok {
					t.Fatalf("lends to queue-1 outside the window: %+v", g)
				}
				if shared.Resources() != node.Lendable.Resources() {
					t.Errorf("shared queue gets %+v, want everything lendable", shared.Resources())
				}
				if len(l.Skipped) == 0 || !strings.Contains(l.Skipped[0].Reason, "outside its window 22:00-08:00 Europe/Berlin") {
					t.Errorf("skipped = %+v", l.Skipped)
				}
				return
			}
			if !ok {
				t.Fatalf("no grant to queue-1: %+v", l)
			}
			want := arbiterapi.Grant{Queue: "queue-1", Rule: "night-gpu", MilliCPU: 8000, MemoryBytes: 32 * gi,
				GPUs: []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, Until: tc.until}
			if g.Queue != want.Queue || g.Rule != want.Rule || g.Resources() != want.Resources() ||
				!slices.Equal(g.GPUs, want.GPUs) || !g.Until.Equal(want.Until) {
				t.Errorf("grant = %+v\nwant    %+v", g, want)
			}
			if shared.MilliCPU != 8000 || shared.MemoryBytes != 32*gi || shared.Rule != "" || !shared.Until.Equal(l.Expires) ||
				!slices.Equal(shared.GPUs, []string{"GPU-4", "GPU-5", "GPU-6", "GPU-7"}) {
				t.Errorf("shared grant = %+v", shared)
			}
		})
	}
}

func TestDecideLendsNoMoreThanLendable(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	night := time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
	node := gpuNode("gpu-1", map[string]string{"pool": "gpu"})
	node.Lendable = arbiterapi.Lendable{MilliCPU: 3000, MemoryBytes: 8 * gi, GPUs: 1, GPUUUIDs: []string{"GPU-7"}}
	l := decide(p, night, node, nil)
	g, _ := grantFor(l, "queue-1")
	if g.Resources() != (arbiterapi.Resources{MilliCPU: 3000, MemoryBytes: 8 * gi, GPUs: 1}) || len(l.Grants) != 1 {
		t.Errorf("grants = %+v, want all of the little lendable to queue-1 and nothing shared", l.Grants)
	}
	// Nothing lendable: no grants at all.
	node.Lendable = arbiterapi.Lendable{}
	if l := decide(p, night, node, nil); len(l.Grants) != 0 || l.Grants == nil {
		t.Errorf("grants = %#v, want an empty list", l.Grants)
	}
}

func TestDecideOwnedNodeNotLentToItsQueue(t *testing.T) {
	p := mustPolicy(t, `sharedQueue: be
queues: [{name: queue-1}, {name: queue-2}]
rules:
  - {name: to-1, queue: queue-1, lend: {milliCPU: 4000}, window: "00:00-24:00", timeZone: UTC}
  - {name: to-2, queue: queue-2, lend: {milliCPU: 4000}, window: "00:00-24:00", timeZone: UTC}
`)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	owned := gpuNode("n1", map[string]string{DefaultOwnerLabel: "queue-1"})
	l := decide(p, now, owned, nil)
	if _, ok := grantFor(l, "queue-1"); ok {
		t.Errorf("a node owned by queue-1 lends to queue-1: %+v", l.Grants)
	}
	if g, ok := grantFor(l, "queue-2"); !ok || g.MilliCPU != 4000 {
		t.Errorf("queue-2 grant = %+v", g)
	}
	if len(l.Skipped) != 1 || l.Skipped[0].Rule != "to-1" || !strings.Contains(l.Skipped[0].Reason, "owned by queue queue-1") {
		t.Errorf("skipped = %+v", l.Skipped)
	}
	// An unowned node lends to both.
	if l := decide(p, now, gpuNode("n2", nil), nil); len(l.Grants) != 3 {
		t.Errorf("grants = %+v", l.Grants)
	}
	// A custom owner label.
	p2 := mustPolicy(t, "ownerLabel: team\n"+strings.SplitN(string(p.Raw), "\n", 2)[0]+"\nqueues: [{name: queue-1}]\nrules:\n  - {name: to-1, queue: queue-1, lend: {milliCPU: 1}, window: \"00:00-24:00\", timeZone: UTC}\n")
	if l := decide(p2, now, gpuNode("n3", map[string]string{"team": "queue-1"}), nil); len(l.Skipped) != 1 {
		t.Errorf("custom owner label ignored: %+v", l)
	}
}

func TestDecideUtilizationThreshold(t *testing.T) {
	p := mustPolicy(t, referencePolicy) // night-gpu: maxOnlineUtilization 0.6
	night := time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
	for _, tc := range []struct {
		util  float64
		lends bool
	}{{0, true}, {0.59, true}, {0.6, false}, {0.95, false}} {
		node := gpuNode("gpu-1", map[string]string{"pool": "gpu"})
		node.Online.Utilization = tc.util
		l := decide(p, night, node, nil)
		if _, ok := grantFor(l, "queue-1"); ok != tc.lends {
			t.Errorf("utilization %v: lends = %v, want %v (%+v)", tc.util, ok, tc.lends, l.Skipped)
		}
		if !tc.lends && (len(l.Skipped) == 0 || !strings.Contains(l.Skipped[0].Reason, "is not under 0.60")) {
			t.Errorf("utilization %v: skipped = %+v", tc.util, l.Skipped)
		}
	}
}

func TestDecideSelector(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	night := time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
	for _, labels := range []map[string]string{nil, {"pool": "gpus"}, {"Pool": "gpu"}} {
		if l := decide(p, night, gpuNode("n", labels), nil); len(l.Grants) != 1 || l.Grants[0].Queue != "best-effort" || len(l.Skipped) != 0 {
			t.Errorf("labels %v: %+v", labels, l)
		}
	}
	// day-cpu selects pool=cpu; at 23:00 in Berlin it is 21:00 in UTC, inside its window.
	l := decide(p, night, gpuNode("n", map[string]string{"pool": "cpu", "zone": "a"}), nil)
	if g, ok := grantFor(l, "queue-2"); !ok || g.MilliCPU != 2000 || g.Rule != "day-cpu" || !g.Until.Equal(l.Expires) {
		t.Errorf("pool=cpu: %+v", l.Grants)
	}
}

// Two rules compete for more than the node can lend: weights divide it.
func TestDecideWeightsAndGuarantees(t *testing.T) {
	p := mustPolicy(t, `sharedQueue: be
queues:
  - {name: heavy, weight: 3}
  - {name: light, weight: 1, guaranteed: {milliCPU: 4000}}
rules:
  - {name: a, queue: heavy, lend: {milliCPU: 16000, gpus: 8}, window: "00:00-24:00", timeZone: UTC}
  - {name: b, queue: light, lend: {milliCPU: 16000, gpus: 8}, window: "00:00-24:00", timeZone: UTC}
`)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node := gpuNode("n", nil) // 16000m, 8 GPUs lendable
	lentElsewhere := arbiterapi.Resources{}
	in := DecideInput{Now: now, Report: &node, TTL: time.Minute, LentElsewhere: func(q string) arbiterapi.Resources {
		if q == "light" {
			return lentElsewhere
		}
		return arbiterapi.Resources{}
	}}
	// light is 4000m short of its guarantee: it gets that first, then a quarter of the rest.
	l := p.Decide(in)
	heavy, _ := grantFor(l, "heavy")
	light, _ := grantFor(l, "light")
	if heavy.MilliCPU != 9000 || light.MilliCPU != 7000 {
		t.Errorf("with a shortfall: heavy %d light %d, want 9000 and 7000", heavy.MilliCPU, light.MilliCPU)
	}
	if len(heavy.GPUs) != 6 || len(light.GPUs) != 2 {
		t.Errorf("GPUs: heavy %v light %v, want 6 and 2", heavy.GPUs, light.GPUs)
	}
	// Once light is lent its guarantee elsewhere, weights alone divide: 3:1.
	lentElsewhere = arbiterapi.Resources{MilliCPU: 4000}
	l = p.Decide(in)
	heavy, _ = grantFor(l, "heavy")
	light, _ = grantFor(l, "light")
	if heavy.MilliCPU != 12000 || light.MilliCPU != 4000 {
		t.Errorf("without a shortfall: heavy %d light %d, want 12000 and 4000", heavy.MilliCPU, light.MilliCPU)
	}
	if be, _ := grantFor(l, "be"); be.Resources() != (arbiterapi.Resources{MemoryBytes: 64 * gi}) {
		t.Errorf("the shared queue got %+v, want only the memory no rule asks for", be.Resources())
	}
}

// A renewal keeps the GPUs where they were and the generation as it was.
func TestDecideStickyGPUsAndGeneration(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	berlin := mustZone(t, "Europe/Berlin")
	night := time.Date(2026, time.June, 10, 23, 0, 0, 0, berlin)
	node := gpuNode("gpu-1", map[string]string{"pool": "gpu"})
	prev := arbiterapi.Lease{Generation: 7, Grants: []arbiterapi.Grant{{Queue: "queue-1", Rule: "night-gpu", MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: []string{"GPU-2", "GPU-5", "GPU-6", "GPU-7"}}}}
	l := decide(p, night, node, &prev)
	g, _ := grantFor(l, "queue-1")
	if !slices.Equal(g.GPUs, []string{"GPU-2", "GPU-5", "GPU-6", "GPU-7"}) {
		t.Errorf("GPUs moved: %v", g.GPUs)
	}
	if l.Generation == 7 {
		t.Error("generation kept although the shared grant is new")
	}
	again := decide(p, night.Add(10*time.Second), node, &l)
	if again.Generation != l.Generation {
		t.Errorf("renewal changed the generation: %d -> %d", l.Generation, again.Generation)
	}
	// A change makes a larger generation, even if the clock went back.
	node.Lendable.MilliCPU = 10000
	changed := decide(p, night.Add(-time.Hour), node, &again)
	if changed.Generation <= again.Generation {
		t.Errorf("generation %d after %d", changed.Generation, again.Generation)
	}
	// A lost GPU is replaced by another.
	node.Lendable.GPUUUIDs = slices.DeleteFunc(slices.Clone(node.Lendable.GPUUUIDs), func(u string) bool { return u == "GPU-5" })
	node.Lendable.GPUs = 7
	l = decide(p, night, node, &prev)
	g, _ = grantFor(l, "queue-1")
	if !slices.Equal(g.GPUs, []string{"GPU-0", "GPU-2", "GPU-6", "GPU-7"}) {
		t.Errorf("GPUs = %v", g.GPUs)
	}
}

func TestWaterfill(t *testing.T) {
	for _, tc := range []struct {
		avail         int64
		caps, weights []int64
		want          []int64
	}{
		{10, []int64{3, 3}, []int64{1, 1}, []int64{3, 3}},
		{10, []int64{8, 8}, []int64{1, 1}, []int64{5, 5}},
		{10, []int64{8, 8}, []int64{3, 1}, []int64{8, 2}},
		{10, []int64{1, 8, 8}, []int64{1, 1, 1}, []int64{1, 5, 4}}, // leftover unit to the first short claimant
		{7, []int64{7, 7, 7}, []int64{1, 1, 1}, []int64{3, 2, 2}},
		{3, []int64{5, 0, 5}, []int64{1, 1, 1}, []int64{2, 0, 1}},
		{0, []int64{5}, []int64{1}, []int64{0}},
		// Caps whose sum passes int64 (thousands of rules at the most a rule may lend).
		{100, []int64{1 << 62, 1 << 62, 1 << 62}, []int64{1, 1, 1}, []int64{34, 33, 33}},
	} {
		if got := waterfill(tc.avail, tc.caps, tc.weights); !slices.Equal(got, tc.want) {
			t.Errorf("waterfill(%d, %v, %v) = %v, want %v", tc.avail, tc.caps, tc.weights, got, tc.want)
		}
	}
	// Properties on random input: never above a cap, never more than avail, and all of
	// avail used when the caps add up to more.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 1 + rng.IntN(6)
		caps, weights := make([]int64, n), make([]int64, n)
		var total int64
		for i := range n {
			caps[i] = rng.Int64N(arbiterapi.MaxMemoryBytes)
			weights[i] = 1 + rng.Int64N(maxWeight)
			total += caps[i]
		}
		avail := rng.Int64N(arbiterapi.MaxMemoryBytes)
		got := waterfill(avail, caps, weights)
		var sum int64
		for i := range n {
			if got[i] < 0 || got[i] > caps[i] {
				t.Fatalf("waterfill(%d, %v, %v) = %v: out of bounds", avail, caps, weights, got)
			}
			sum += got[i]
		}
		if sum > avail || sum != min(avail, total) {
			t.Fatalf("waterfill(%d, %v, %v) = %v: sum %d", avail, caps, weights, got, sum)
		}
	}
}
