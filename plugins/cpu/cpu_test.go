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
	ws := []plugins.Workload{
		{Name: "db", Tier: qos.Dedicated, Cgroup: "tidal/dedicated/db", DedicatedCPUs: cpuset.New(3, 7), NUMABinding: true},
		{Name: "web", Tier: qos.Shared, Cgroup: "tidal/shared/web"},
		{Name: "batch", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/batch", MilliCPU: 500},
	}
	pools := ComputePools(topo, cpuset.New(), cpuset.New(3, 7), map[int]int64{0: 1000, 1: 1000})
	tree := plugins.NewTree("tidal", ws)
	Fill(tree, topo.AllCPUs(), pools, 2000, ws, true)
	db, web, batch := *tree.Workload(ws[0]), *tree.Workload(ws[1]), *tree.Workload(ws[2])
	if !db.CPUs.Equals(cpuset.New(3, 7)) || !db.Mems.Equals(cpuset.New(1)) {
		t.Errorf("db cpus %s mems %s", db.CPUs, db.Mems)
	}
	if web.CPUs.Contains(3) || web.CPUs.Contains(7) || web.CPUs.Size() != 6 {
		t.Errorf("web cpus %s include dedicated cores or miss shared ones", web.CPUs)
	}
	if batch.CPUIdle != plugins.On || batch.CPUQuota != 500 || !batch.CPUs.IsSubsetOf(pools.Shared()) || batch.CPUs.Size() != 2 {
		t.Errorf("batch settings %+v", batch)
	}
	capped := plugins.Workload{Name: "big", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/big", MilliCPU: 9000}
	uncapped := plugins.Workload{Name: "free", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/free"}
	tree2 := plugins.NewTree("tidal", []plugins.Workload{capped, uncapped})
	Fill(tree2, topo.AllCPUs(), pools, 2000, []plugins.Workload{capped, uncapped}, true)
	if q := tree2.Workload(capped).CPUQuota; q != 2000 {
		t.Errorf("a 9000m cap under 2000m lent: quota %d, want 2000", q)
	}
	if q := tree2.Workload(uncapped).CPUQuota; q != plugins.Unlimited {
		t.Errorf("uncapped reclaimed workload quota %d, want unlimited (the tier caps it)", q)
	}
	if r := *tree.Tier(qos.Reclaimed); r.CPUQuota != 2000 || r.CPUIdle != plugins.On {
		t.Errorf("reclaimed tier %+v", r)
	}
	// Without cpu.idle: shares 2.
	tree = plugins.NewTree("tidal", ws)
	Fill(tree, topo.AllCPUs(), pools, 2000, ws, false)
	if r := *tree.Tier(qos.Reclaimed); r.CPUShares != 2 || r.CPUIdle != plugins.Unset {
		t.Errorf("reclaimed tier without idle %+v", r)
	}
	cg := tree.Cgroups()
	if cg[0].Path != "tidal" || len(cg) != 1+4+3 {
		t.Errorf("tree = %+v", cg)
	}
}

// Pods (kubelet-owned cgroups): tidal writes its pools and the reclaimed caps, never an online
// pod's quota, never a cpuset the kubelet's CPU manager owns, and narrows every container.
func TestFillKubeletOwnedPods(t *testing.T) {
	topo := twoNodes()
	web := plugins.Workload{Name: "ns/web", Tier: qos.Shared, Cgroup: "kubepods/burstable/podw", KubeletOwned: true,
		Containers: []string{"kubepods/burstable/podw/c1"}}
	batch := plugins.Workload{Name: "ns/batch", Tier: qos.Reclaimed, Cgroup: "kubepods/besteffort/podb", KubeletOwned: true,
		Containers: []string{"kubepods/besteffort/podb/c1", "kubepods/besteffort/podb/c2"}}
	pinned := plugins.Workload{Name: "ns/pinned", Tier: qos.Dedicated, Cgroup: "kubepods/podp", KubeletOwned: true,
		DedicatedCPUs: cpuset.New(3, 7), KubeletCPUs: true, Containers: []string{"kubepods/podp/c1"}}
	ws := []plugins.Workload{web, batch, pinned}
	pools := ComputePools(topo, cpuset.New(), cpuset.New(3, 7), map[int]int64{0: 1000, 1: 500})
	tree := plugins.NewTree("tidal", ws)
	Fill(tree, topo.AllCPUs(), pools, 1500, ws, true)
	if s := *tree.Workload(web); s.CPUQuota != 0 || s.CPUs.Contains(3) {
		t.Errorf("online pod: quota %d (want 0: the kubelet's), cpus %s", s.CPUQuota, s.CPUs)
	}
	if s := *tree.Workload(batch); s.CPUQuota != 1500 || s.CPUIdle != plugins.On {
		t.Errorf("reclaimed pod: quota %d (want what is lent), idle %v", s.CPUQuota, s.CPUIdle)
	}
	if s := *tree.Workload(pinned); !s.CPUs.IsEmpty() {
		t.Errorf("a cpuset the CPU manager owns is written: %s", s.CPUs)
	}
	containers := map[string]plugins.Cgroup{}
	for _, c := range tree.Cgroups() {
		if strings.HasPrefix(c.Path, "kubepods") {
			if !c.Foreign {
				t.Errorf("%s is not marked foreign", c.Path)
			}
			containers[c.Path] = c
		}
	}
	if c := containers["kubepods/besteffort/podb/c2"]; !c.Settings.CPUs.Equals(tree.Workload(batch).CPUs) || c.Settings.CPUQuota != 0 {
		t.Errorf("container of a reclaimed pod: %+v, want the pod's cpuset only", c.Settings)
	}
	if len(containers) != 7 {
		t.Errorf("got %d pod and container cgroups, want 7", len(containers))
	}
}
