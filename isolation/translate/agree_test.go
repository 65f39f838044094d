package translate_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/policy"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// kernel is what a container's cgroup ends up with, whichever path wrote it.
type kernel struct {
	cpus, mems string
	idle       bool
	weight     uint64 // v1: cpu.shares; v2: cpu.weight
	quota      int64  // µs per period, -1 unlimited, 0 not written
	period     uint64
	memory     int64
	burst      int64 // µs per period; 0 not written, -1 cleared
	// Memory QoS: v2's memory.high, memory.low and memory.min ("high=..;low=..;min=.."),
	// v1's oom_kill_disable. v1's soft limit has no runtime field: the agent writes it.
	memQoS  string
	oomWait bool
}

func memQoS(high, low, min string) string {
	return "high=" + high + ";low=" + low + ";min=" + min
}

func unifiedQoS(u map[string]string) string {
	return memQoS(u["memory.high"], u["memory.low"], u["memory.min"])
}

func fileOrEmpty(n int64) string {
	if n == 0 {
		return ""
	}
	return translate.MemoryFile(n)
}

func fromCgroup(c translate.Cgroup, v2 bool) kernel {
	k := kernel{cpus: c.CPUs, mems: c.Mems, idle: c.Idle == plugins.On, weight: c.Shares, quota: c.Quota, memory: c.Memory, burst: c.Burst}
	if v2 {
		k.weight = translate.Weight(c.Shares)
		k.memQoS = memQoS(fileOrEmpty(c.MemoryHigh), fileOrEmpty(c.MemoryLow), fileOrEmpty(c.MemoryMin))
	} else {
		k.memQoS, k.oomWait = memQoS("", "", ""), c.OOMWait == plugins.On
	}
	if c.Quota != 0 {
		k.period = translate.PeriodMicros // the writer's fixed period
	}
	return k
}

// The runtime writes CRI and NRI shares as cpu.shares on v1 and converts them on v2.
func runtimeWeight(shares uint64, v2 bool) uint64 {
	if v2 {
		return translate.Weight(shares)
	}
	return shares
}

// unifiedBurst is the cpu.max.burst a runtime writes from unified resources (0: none).
func unifiedBurst(u map[string]string) int64 {
	n, _ := strconv.ParseInt(u["cpu.max.burst"], 10, 64)
	return n
}

func fromCRI(r *runtimeapi.LinuxContainerResources, v2 bool) kernel {
	return kernel{cpus: r.CpusetCpus, mems: r.CpusetMems, idle: r.Unified["cpu.idle"] == "1",
		weight: runtimeWeight(uint64(r.CpuShares), v2), quota: r.CpuQuota, period: uint64(r.CpuPeriod), memory: r.MemoryLimitInBytes,
		burst: unifiedBurst(r.Unified), memQoS: unifiedQoS(r.Unified)}
}

func fromNRI(r *api.LinuxResources, v2 bool) kernel {
	var k kernel
	if r == nil {
		return k
	}
	if c := r.Cpu; c != nil {
		k.cpus, k.mems = c.Cpus, c.Mems
		k.weight = runtimeWeight(c.Shares.GetValue(), v2)
		k.quota, k.period = c.Quota.GetValue(), c.Period.GetValue()
	}
	k.memory = r.Memory.GetLimit().GetValue()
	k.oomWait = r.Memory.GetDisableOomKiller().GetValue()
	k.idle = r.Unified["cpu.idle"] == "1"
	k.burst = unifiedBurst(r.Unified)
	k.memQoS = unifiedQoS(r.Unified)
	return k
}

func node(idle bool) plugins.Node {
	topo := &topology.Topology{}
	for id := 0; id < 8; id++ {
		topo.CPUs = append(topo.CPUs, topology.CPU{ID: id, Core: id % 4, Socket: id % 4 / 2, NUMANode: id % 4 / 2})
	}
	topo.NUMANodes = []topology.NUMANode{{ID: 0, CPUs: cpuset.New(0, 1, 4, 5)}, {ID: 1, CPUs: cpuset.New(2, 3, 6, 7)}}
	pools := cpu.ComputePools(topo, cpuset.New(0), cpuset.New(3, 7), map[int]int64{0: 1000, 1: 1000})
	return plugins.Node{CPUs: topo.AllCPUs(), Pools: pools, LentMilliCPU: 2000, LentMemory: 4 << 30, Idle: idle}
}

// The cgroup writer, the CRI proxy and the NRI plugin put the same values in a container's
// cgroup for every tier's decision: cpusets, shares or weight, quota and period, memory
// limit. The one difference is cpu.idle on cgroup v1, which no runtime can pass: there the
// pod's cgroup carries it (the agent writes it) and the container gets the smallest share.
// CPU burst goes through the hooks only on v2 beside a quota the decision sets itself; else
// the pod's cgroup carries it, and a cleared one is the kernel's default.
func TestCgroupCRIAndNRIAgree(t *testing.T) {
	pol := policy.Default().With(cpu.Resource{Burst: cpu.Burst{System: 50, Dedicated: 50, Shared: 50}})
	for _, tier := range qos.AllTiers() {
		for _, idle := range []bool{false, true} {
			for _, v2 := range []bool{false, true} {
				for _, capped := range []bool{false, true} {
					for _, owner := range []plugins.Owner{plugins.OwnerTidal, plugins.OwnerKubelet} {
						w := plugins.Workload{Name: "w", Tier: tier, Owner: owner}
						if tier == qos.Dedicated {
							w.DedicatedCPUs, w.NUMABinding = cpuset.New(3, 7), true
						}
						if capped {
							w.MilliCPU, w.MemoryLimit = 5, 1<<30 // 5m: under the kernel's 1 ms floor
						}
						name := fmt.Sprintf("%s/idle=%v/v2=%v/capped=%v/owner=%v", tier, idle, v2, capped, owner)
						t.Run(name, func(t *testing.T) {
							s := pol.Decide(w, node(idle)).Settings
							cg := fromCgroup(translate.ToCgroup(s), v2)
							r := &runtimeapi.LinuxContainerResources{}
							translate.ToContainer(s, v2).CRI(r)
							viaCRI := fromCRI(r, v2)
							viaNRI := fromNRI(translate.ToContainer(s, v2).NRI(), v2)
							want := cg
							if cg.idle && !v2 {
								want.idle, want.weight = false, translate.MinShares
							}
							if !v2 || cg.burst < 0 || cg.quota <= 0 {
								want.burst = 0
							}
							if cg.burst > 0 && cg.quota > 0 && cg.burst > cg.quota {
								t.Errorf("burst %dus above the quota %dus: the kernel refuses it", cg.burst, cg.quota)
							}
							// CRI has no oom_kill_disable: on v1 the agent writes the pod's.
							wantCRI := want
							wantCRI.oomWait = false
							if viaCRI != wantCRI || viaNRI != want {
								t.Errorf("cgroup %+v\nwant from hooks %+v\nCRI   %+v\nNRI   %+v", cg, want, viaCRI, viaNRI)
							}
							// On v1 the throttle is waiting at the limit lending sets; at a limit of
							// the pod's own under what is lent (capped) the kernel kills instead.
							if tier == qos.Reclaimed && owner.Foreign() && (cg.memQoS == memQoS("", "", "") && v2 || !v2 && cg.oomWait == capped) {
								t.Errorf("a reclaimed pod (capped %v) gets the wrong throttle: %+v", capped, cg)
							}
							if cg.quota > 0 && cg.quota < translate.MinQuotaMicros {
								t.Errorf("quota %dus under the kernel's floor", cg.quota)
							}
							if cg.cpus == "" && !s.CPUs.IsEmpty() {
								t.Errorf("cpuset %s lost", s.CPUs)
							}
						})
					}
				}
			}
		}
	}
}

// A decision that sets nothing changes nothing on either runtime path.
func TestEmptyDecisionLeavesTheRuntimeAlone(t *testing.T) {
	c := translate.ToContainer(plugins.Settings{}, true)
	if !c.IsZero() || c.NRI() != nil {
		t.Errorf("empty settings became %+v", c)
	}
	r := &runtimeapi.LinuxContainerResources{CpuShares: 512, CpusetCpus: "0-1"}
	c.CRI(r)
	if r.CpuShares != 512 || r.CpusetCpus != "0-1" || r.Unified != nil {
		t.Errorf("CRI resources changed: %+v", r)
	}
}
