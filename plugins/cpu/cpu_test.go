package cpu

import (
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// twoNodes: 2 NUMA nodes x 2 cores x 2 threads; CPU i and i+4 are siblings, node 0 has 0,1,4,5.
func twoNodes() *topology.Topology {
	t := &topology.Topology{}
	for id := 0; id < 8; id++ {
		core := id % 4
		node := core / 2
		t.CPUs = append(t.CPUs, topology.CPU{ID: id, Core: core, Socket: node, NUMANode: node})
	}
	t.NUMANodes = []topology.NUMANode{
		{ID: 0, CPUs: cpuset.New(0, 1, 4, 5), MemoryBytes: 8 << 30},
		{ID: 1, CPUs: cpuset.New(2, 3, 6, 7), MemoryBytes: 8 << 30},
	}
	return t
}

func TestPoolsAreDisjointAndReclaimedInsideShared(t *testing.T) {
	topo := twoNodes()
	pools := ComputePools(topo, cpuset.New(0), cpuset.New(3, 7), map[int]int64{0: 1500, 1: 400})
	if got := pools.System(); !got.Equals(cpuset.New(0)) {
		t.Errorf("system = %s", got)
	}
	if got := pools.Shared(); !got.Equals(cpuset.New(1, 2, 4, 5, 6)) {
		t.Errorf("shared = %s", got)
	}
	// Node 0 lends 1500m -> 2 CPUs, the highest core (1: CPUs 1,5) first.
	if got := pools[0].Reclaimed; !got.Equals(cpuset.New(1, 5)) {
		t.Errorf("node 0 reclaimed = %s, want 1,5", got)
	}
	if got := pools[1].Reclaimed; got.Size() != 1 || !got.IsSubsetOf(pools[1].Shared) {
		t.Errorf("node 1 reclaimed = %s", got)
	}
	if !pools.Reclaimed().Intersection(pools.Dedicated()).IsEmpty() || !pools.Reclaimed().Intersection(pools.System()).IsEmpty() {
		t.Error("reclaimed overlaps dedicated or system")
	}
	if m := pools.PoolMilliCPU(); m[0] != 3000 || m[1] != 2000 {
		t.Errorf("pool millicores = %v", m)
	}
}

func TestAllocateWholeCores(t *testing.T) {
	topo := twoNodes()
	got, node, err := Allocate(topo, cpuset.New(0, 4), cpuset.New(), 2, true)
	if err != nil {
		t.Fatal(err)
	}
	// Best fit with binding: node 0 has one whole free core (1,5), node 1 has two.
	if !got.Equals(cpuset.New(1, 5)) || node != 0 {
		t.Errorf("allocated %s on node %d, want 1,5 on node 0", got, node)
	}
	if _, _, err := Allocate(topo, cpuset.New(), cpuset.New(), 3, false); err == nil || !strings.Contains(err.Error(), "multiple of 2") {
		t.Errorf("3 CPUs on 2-thread cores: err = %v", err)
	}
	if _, _, err := Allocate(topo, cpuset.New(), cpuset.New(), 8, false); err == nil || !strings.Contains(err.Error(), "shared pool") {
		t.Errorf("every CPU: err = %v", err)
	}
	if _, _, err := Allocate(topo, cpuset.New(), cpuset.New(0, 2), 4, true); err == nil || !strings.Contains(err.Error(), "one NUMA node") {
		t.Errorf("4 CPUs bound with one core broken on each node: err = %v", err)
	}
	spread, _, err := Allocate(topo, cpuset.New(), cpuset.New(0, 4), 6, false)
	if err == nil {
		t.Errorf("6 of 6 free CPUs allowed: %s", spread)
	}
}

func TestFillSettings(t *testing.T) {
	topo := twoNodes()
	pools := ComputePools(topo, cpuset.New(), cpuset.New(3, 7), map[int]int64{0: 1000, 1: 1000})
	fill := func(idle bool, m plugins.CPUMechanism) (*plugins.Tree, plugins.Settings) {
		tree := plugins.NewTree("tidal", nil, nil)
		Resource{}.Fill(tree, plugins.Node{CPUs: topo.AllCPUs(), Pools: pools, LentMilliCPU: 2000, Idle: idle, ReclaimedCPU: m})
		return tree, *tree.Tier(qos.Reclaimed)
	}
	tree, r := fill(true, plugins.MechanismQuota)
	if r.CPUQuota != 2000 || r.CPUIdle != plugins.On || !r.CPUs.Equals(pools.Reclaimed()) {
		t.Errorf("reclaimed tier, quota mechanism: %+v", r)
	}
	if s := *tree.Tier(qos.Shared); s.CPUs.Contains(3) || s.CPUs.Contains(7) || s.CPUs.Size() != 6 || s.CPUShares != sharesOnline {
		t.Errorf("shared tier %+v includes dedicated cores or misses shared ones", s)
	}
	if d := *tree.Tier(qos.Dedicated); !d.CPUs.Equals(topo.AllCPUs()) {
		t.Errorf("dedicated tier cpus %s, want every CPU (its children own disjoint cores)", d.CPUs)
	}
	if cg := tree.Cgroups(); cg[0].Path != "tidal" || len(cg) != 1+4 {
		t.Errorf("tree = %+v", cg)
	}
	// The idle mechanism: the idle class on the reclaimed pool, no quota.
	if _, r := fill(true, plugins.MechanismIdle); r.CPUQuota != plugins.Unlimited || r.CPUIdle != plugins.On || !r.CPUs.Equals(pools.Reclaimed()) {
		t.Errorf("reclaimed tier, idle mechanism: %+v", r)
	}
	// Shares: shares 2, and idle turned off where the kernel has it (shares are refused on an
	// idle group).
	if _, r := fill(true, plugins.MechanismShares); r.CPUQuota != plugins.Unlimited || r.CPUIdle != plugins.Off || r.CPUShares != SharesReclaimed {
		t.Errorf("reclaimed tier, shares mechanism: %+v", r)
	}
	// Without cpu.idle every mechanism falls back to shares 2 and leaves cpu.idle alone.
	for _, m := range plugins.CPUMechanisms() {
		if _, r := fill(false, m); r.CPUShares != SharesReclaimed || r.CPUIdle != plugins.Unset {
			t.Errorf("reclaimed tier without idle, %s mechanism: %+v", m, r)
		}
	}
}

// A reclaimed workload's quota: what is lent only under the quota mechanism (and for a pod,
// which sits outside the tier that caps the others), its own cap always.
func TestReclaimedQuota(t *testing.T) {
	for _, c := range []struct {
		m        plugins.CPUMechanism
		owner    plugins.Owner
		own      int64
		want     int64
		workload string
	}{
		{plugins.MechanismQuota, plugins.OwnerTidal, 0, plugins.Unlimited, "tidal run, capped by the tier"},
		{plugins.MechanismQuota, plugins.OwnerKubelet, 0, 1500, "pod, capped by what is lent"},
		{plugins.MechanismQuota, plugins.OwnerKubelet, 500, 500, "pod with a smaller cap of its own"},
		{plugins.MechanismQuota, plugins.OwnerTidal, 3000, 1500, "own cap above what is lent"},
		{plugins.MechanismIdle, plugins.OwnerKubelet, 0, plugins.Unlimited, "pod, idle mechanism"},
		{plugins.MechanismIdle, plugins.OwnerTidal, 700, 700, "own cap, idle mechanism"},
		{plugins.MechanismShares, plugins.OwnerKubelet, 0, plugins.Unlimited, "pod, shares mechanism"},
	} {
		w := plugins.Workload{Name: "w", Tier: qos.Reclaimed, Owner: c.owner, MilliCPU: c.own}
		n := plugins.Node{LentMilliCPU: 1500, Idle: true, ReclaimedCPU: c.m}
		var d plugins.Decision
		Resource{}.Decide(w, n, &d)
		if d.Settings.CPUQuota != c.want {
			t.Errorf("%s: quota %d, want %d", c.workload, d.Settings.CPUQuota, c.want)
		}
	}
}

// A memoryless NUMA node (some vNUMA VMs, POWER and ARM boxes) is left out of cpuset.mems,
// which cgroup v1 refuses it in; a workload bound to its cores takes every node's memory.
func TestMemorylessNodeIsNoMemoryNode(t *testing.T) {
	topo := twoNodes()
	topo.NUMANodes[1].MemoryBytes = 0
	pools := ComputePools(topo, cpuset.New(), cpuset.New(3, 7), map[int]int64{0: 1000})
	if got := pools.Mems(); !got.Equals(cpuset.New(0)) {
		t.Errorf("mems %s, want 0 (node 1 has no memory)", got)
	}
	n := plugins.Node{CPUs: topo.AllCPUs(), Pools: pools}
	var d plugins.Decision
	Resource{}.Decide(plugins.Workload{Tier: qos.Dedicated, NUMABinding: true, DedicatedCPUs: cpuset.New(3, 7)}, n, &d)
	if !d.Settings.Mems.Equals(cpuset.New(0)) {
		t.Errorf("bound to a memoryless node's cores: mems %s, want the node with memory, 0", d.Settings.Mems)
	}
	// A topology that could not tell any node's memory keeps every node.
	topo.NUMANodes[0].MemoryBytes = 0
	if got := ComputePools(topo, cpuset.New(), cpuset.New(), nil).Mems(); !got.Equals(cpuset.New(0, 1)) {
		t.Errorf("mems %s with no node's memory known, want 0-1", got)
	}
}

// Under the cores mechanism a node that lends a whole core or more gets whole cores of its
// own, taken out of where online work runs, never the last one; a node that lends less keeps
// a pool shared with online work, held by the quota.
func TestExclusiveCores(t *testing.T) {
	topo := twoNodes()
	if got := CoreMilliCPU(topo); got != 2000 {
		t.Fatalf("a core of two threads is %dm, want 2000m", got)
	}
	lent := map[int]int64{0: 2500, 1: 3900}
	pools := ExclusiveCores(topo, ComputePools(topo, cpuset.New(0), cpuset.New(), lent), lent)
	// Node 0: CPU 0 reserved, shared 1,4,5; its one whole core (1,5) would leave online work
	// less than a core, so the pool is shared.
	if np := pools[0]; np.Exclusive || !np.OnlineCPUs().Equals(np.Shared) {
		t.Errorf("node 0 pool %+v exclusive, want shared (one whole core left)", np)
	}
	// Node 1: 3900m fits one core of two threads (the highest, 3,7), and online keeps 2,6.
	if np := pools[1]; !np.Exclusive || !np.Reclaimed.Equals(cpuset.New(3, 7)) || !np.OnlineCPUs().Equals(cpuset.New(2, 6)) {
		t.Errorf("node 1 pool reclaimed %s (exclusive %v), online %s; want 3,7 exclusive, online 2,6", np.Reclaimed, np.Exclusive, np.OnlineCPUs())
	}
	if got := pools.Online(); !got.Equals(cpuset.New(1, 2, 4, 5, 6)) {
		t.Errorf("online CPUs %s, want 1-2,4-6", got)
	}

	// Settings: shared work runs where online work does; the quota holds reclaimed work
	// while some node's pool is shared, and is lifted once every pool is exclusive.
	n := plugins.Node{CPUs: topo.AllCPUs(), Pools: pools, LentMilliCPU: 6400, ReclaimedCPU: plugins.MechanismCores, Idle: true}
	var d plugins.Decision
	Resource{}.Decide(plugins.Workload{Name: "web", Tier: qos.Shared}, n, &d)
	if !d.Settings.CPUs.Equals(pools.Online()) {
		t.Errorf("shared workload on %s, want %s", d.Settings.CPUs, pools.Online())
	}
	tree := plugins.NewTree("tidal", nil, nil)
	Resource{}.Fill(tree, n)
	if q := tree.Tier(qos.Reclaimed).CPUQuota; q != 6400 {
		t.Errorf("reclaimed tier quota %dm with a shared pool on node 0, want 6400m", q)
	}
	lent = map[int]int64{0: 0, 1: 2000}
	pools = ExclusiveCores(topo, ComputePools(topo, cpuset.New(), cpuset.New(0, 4), lent), lent)
	if pools.ReclaimedSharesCPUs() {
		t.Fatalf("pools %+v share CPUs with online work", pools)
	}
	n.Pools, n.LentMilliCPU = pools, 2000
	tree = plugins.NewTree("tidal", nil, nil)
	Resource{}.Fill(tree, n)
	if q, idle := tree.Tier(qos.Reclaimed).CPUQuota, tree.Tier(qos.Reclaimed).CPUIdle; q != plugins.Unlimited || idle != plugins.On {
		t.Errorf("reclaimed tier quota %d, idle %v with every pool exclusive; want no quota, idle", q, idle)
	}
	if got := tree.Tier(qos.Shared).CPUs; !got.Equals(cpuset.New(1, 2, 5, 6)) {
		t.Errorf("shared tier on %s, want 1-2,5-6 (node 1's core 3,7 lent)", got)
	}
}
