package policy_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/plugins/policy"
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

func testNode(idle bool) plugins.Node {
	pools := cpu.ComputePools(twoNodes(), cpuset.New(), cpuset.New(3, 7), map[int]int64{0: 1000, 1: 1000})
	return plugins.Node{CPUs: twoNodes().AllCPUs(), Pools: pools, LentMilliCPU: 2000, LentMemory: 4 << 30, Idle: idle,
		ReclaimedCPU: plugins.MechanismQuota}
}

var pol = policy.Default()

// Standalone workloads (tidal's own cgroups) by tier.
func TestDecideByTier(t *testing.T) {
	n := testNode(true)
	db := pol.Decide(plugins.Workload{Name: "db", Tier: qos.Dedicated, DedicatedCPUs: cpuset.New(3, 7), NUMABinding: true}, n).Settings
	if !db.CPUs.Equals(cpuset.New(3, 7)) || !db.Mems.Equals(cpuset.New(1)) || db.MemoryLimit != plugins.Unlimited {
		t.Errorf("dedicated with NUMA binding: %+v", db)
	}
	web := pol.Decide(plugins.Workload{Name: "web", Tier: qos.Shared, MemoryLimit: 2 << 30}, n).Settings
	if web.CPUs.Contains(3) || web.CPUs.Size() != 6 || web.CPUQuota != plugins.Unlimited || web.MemoryLimit != 2<<30 {
		t.Errorf("shared: %+v", web)
	}
	batch := pol.Decide(plugins.Workload{Name: "batch", Tier: qos.Reclaimed, MilliCPU: 500, MemoryLimit: 8 << 30}, n)
	s := batch.Settings
	if s.CPUIdle != plugins.On || s.CPUQuota != 500 || !s.CPUs.Equals(n.Pools.Reclaimed()) || s.MemoryLimit != 4<<30 {
		t.Errorf("reclaimed with its own caps: %+v (want quota 500, memory capped at the lent 4Gi)", s)
	}
	if batch.OOMScoreAdj != memory.ReclaimedOOMScoreAdj || batch.Env["NVIDIA_VISIBLE_DEVICES"] != "void" {
		t.Errorf("reclaimed: oom %d env %v", batch.OOMScoreAdj, batch.Env)
	}
	free := pol.Decide(plugins.Workload{Name: "free", Tier: qos.Reclaimed}, n).Settings
	if free.CPUQuota != plugins.Unlimited || free.MemoryLimit != plugins.Unlimited {
		t.Errorf("reclaimed without caps inside tidal's tier (the tier caps it): %+v", free)
	}
	if s := pol.Decide(plugins.Workload{Name: "b", Tier: qos.Reclaimed}, testNode(false)).Settings; s.CPUShares != cpu.SharesReclaimed || s.CPUIdle != plugins.Unset {
		t.Errorf("reclaimed without cpu.idle: %+v", s)
	}
	n.GPUMinors = []int{0, 1, 2}
	gpu := pol.Decide(plugins.Workload{Name: "g", Tier: qos.Reclaimed, GPUs: []string{"GPU-a", "GPU-b"}, GPUMinors: []int{0, 2}}, n)
	if gpu.Env["NVIDIA_VISIBLE_DEVICES"] != "GPU-a,GPU-b" {
		t.Errorf("lent GPUs: env %v", gpu.Env)
	}
	if d := gpu.Settings.Devices; !slices.Contains(d, "deny c 195:1 rwm") || slices.Contains(d, "deny c 195:0 rwm") {
		t.Errorf("device rules with GPUs 0 and 2 lent: %v", d)
	}
	if d := pol.Decide(plugins.Workload{Name: "b", Tier: qos.Reclaimed}, n).Settings.Devices; !slices.Contains(d, "deny c 195:* rwm") {
		t.Errorf("device rules with no GPU lent: %v", d)
	}
	if d := pol.Decide(plugins.Workload{Name: "w", Tier: qos.Shared}, n).Settings.Devices; d != nil {
		t.Errorf("online work's devices touched: %v", d)
	}
	if d := pol.Decide(plugins.Workload{Name: "p", Tier: qos.Reclaimed, Owner: plugins.OwnerKubelet}, n).Settings.Devices; d != nil {
		t.Errorf("a pod's device cgroup is its runtime's: %v", d)
	}
}

// Pods (kubelet-owned cgroups): tidal writes its pools and the reclaimed caps, never an online
// pod's limits, never a cpuset the kubelet's CPU manager owns, and narrows every container.
func TestDecideKubeletOwnedPods(t *testing.T) {
	n := testNode(true)
	web := plugins.Workload{Name: "ns/web", Tier: qos.Shared, Cgroup: "kubepods/burstable/podw", Owner: plugins.OwnerKubelet}
	batch := plugins.Workload{Name: "ns/batch", Tier: qos.Reclaimed, Cgroup: "kubepods/besteffort/podb", Owner: plugins.OwnerKubelet}
	pinned := plugins.Workload{Name: "ns/pinned", Tier: qos.Shared, Cgroup: "kubepods/podp", Owner: plugins.OwnerKubeletCPUManager,
		DedicatedCPUs: cpuset.New(3, 7)}
	if s := pol.Decide(web, n).Settings; s.CPUQuota != 0 || s.MemoryLimit != 0 || s.CPUs.Contains(3) {
		t.Errorf("online pod: %+v (want quota and memory left to the kubelet)", s)
	}
	if s := pol.Decide(batch, n).Settings; s.CPUQuota != 2000 || s.MemoryLimit != 4<<30 || s.CPUIdle != plugins.On {
		t.Errorf("reclaimed pod: %+v (want capped at what is lent)", s)
	}
	if s := pol.Decide(pinned, n).Settings; !s.CPUs.IsEmpty() || !s.Mems.IsEmpty() {
		t.Errorf("a cpuset the CPU manager owns is decided: %+v", s)
	}
	ws := []plugins.Workload{web, batch, pinned}
	tree := plugins.NewTree("tidal", ws, map[string][]string{
		"kubepods/burstable/podw":  {"kubepods/burstable/podw/c1"},
		"kubepods/besteffort/podb": {"kubepods/besteffort/podb/c1", "kubepods/besteffort/podb/c2"},
		"kubepods/podp":            {"kubepods/podp/c1"},
	})
	for _, w := range ws {
		*tree.Workload(w) = pol.Decide(w, n).Settings
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
	if c := containers["kubepods/besteffort/podb/c2"]; !c.Settings.CPUs.Equals(n.Pools.Reclaimed()) || c.Settings.CPUQuota != 0 {
		t.Errorf("container of a reclaimed pod: %+v, want the pod's cpuset only", c.Settings)
	}
	if len(containers) != 7 {
		t.Errorf("got %d pod and container cgroups, want 7", len(containers))
	}
}

// io stands in for a new dimension: one type and one entry in the list.
type io struct{}

func (io) Name() string                         { return "io" }
func (io) Fill(t *plugins.Tree, _ plugins.Node) { t.Root().Devices = []string{"io-root"} }
func (io) Decide(_ plugins.Workload, _ plugins.Node, d *plugins.Decision) {
	d.AddEnv(map[string]string{"IO": "1"})
}

func TestPolicyRunsEveryResourceInOrder(t *testing.T) {
	p := policy.New(cpu.Resource{}, memory.Resource{}, io{})
	if got := p.Names(); !slices.Equal(got, []string{"cpu", "memory", "io"}) {
		t.Errorf("names %v", got)
	}
	n := testNode(true)
	d := p.Decide(plugins.Workload{Name: "b", Tier: qos.Reclaimed}, n)
	if d.Env["IO"] != "1" || d.OOMScoreAdj != memory.ReclaimedOOMScoreAdj || !d.Settings.CPUs.Equals(n.Pools.Reclaimed()) {
		t.Errorf("decision %+v", d)
	}
	if d.Env["NVIDIA_VISIBLE_DEVICES"] != "" {
		t.Errorf("the gpu dimension ran though it is not listed: %v", d.Env)
	}
	tree := plugins.NewTree("tidal", nil, nil)
	p.Fill(tree, n)
	if r := tree.Root(); !r.CPUs.Equals(n.CPUs) || len(r.Devices) != 1 {
		t.Errorf("root %+v", r)
	}
	if !slices.Equal(policy.Default().Names(), []string{"cpu", "memory", "gpu", "io"}) {
		t.Errorf("default %v", policy.Default().Names())
	}
	defer func() {
		if recover() == nil {
			t.Error("a resource listed twice did not panic")
		}
	}()
	policy.New(cpu.Resource{}, cpu.Resource{})
}
