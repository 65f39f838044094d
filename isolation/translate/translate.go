// Package translate turns a decision's settings into what each write path takes: the cgroup
// writer's kernel values (v1, and v2 through Weight), a CRI LinuxContainerResources and an
// NRI LinuxResources. Units, floors and the hooks' special cases live here only, so the
// reconcile loop and the runtime hooks write the same values.
package translate

import (
	"math"
	"math/bits"
	"strconv"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/plugins"
)

const (
	// PeriodMicros is the CFS period every path writes (the kernel's default).
	PeriodMicros = 100_000
	// MinQuotaMicros is the smallest CFS quota the kernel takes (1 ms); a smaller one is
	// refused with EINVAL, by the writer and by the runtime alike.
	MinQuotaMicros = 1000
	// MinShares and MaxShares are the kernel's bounds for cpu.shares: it silently clamps
	// others, so writing them would read back as drift.
	MinShares = 2
	MaxShares = 262144
)

// Cgroup is one cgroup's settings in kernel units, as the writer puts them in the files.
// A zero field leaves its file alone.
type Cgroup struct {
	CPUs, Mems string // cpuset lists in canonical form ("0-3,8")
	Idle       plugins.Toggle
	// Shares is cpu.shares in v1 units (MinShares..MaxShares); v2's cpu.weight is
	// Weight(Shares).
	Shares uint64
	// Quota is the CFS quota in µs per PeriodMicros (at least MinQuotaMicros); -1 lifts it.
	Quota int64
	// Memory is the memory limit in bytes; -1 lifts it.
	Memory  int64
	Devices []string
	// Burst is the CFS burst in µs per PeriodMicros (cpu.cfs_burst_us, cpu.max.burst); -1
	// clears it (writes 0).
	Burst int64
	// BurstPercent sizes the burst on the quota the cgroup has (someone else's): the writer
	// reads it. 0: Burst says.
	BurstPercent int32
	// BurstLimitMilli, when positive, is a limit in millicores (the owner's spec) the
	// BurstPercent burst is sized on instead where it is below the quota the cgroup has.
	BurstLimitMilli int64

	// Memory QoS, bytes or -1 (v2 "max", v1 unlimited); see plugins.Settings.
	MemoryHigh, MemoryLow, MemoryMin int64
	OOMWait                          plugins.Toggle

	// IO (see IOMax): IOMax is written when IOMaxSet ("" clears every throttle); IOWeight 0
	// leaves the weight alone. CRI and NRI carry no IO throttle: only the agent writes them.
	IOMax    string
	IOMaxSet bool
	IOWeight uint64
}

// ToCgroup is what the writer puts in a cgroup for s.
func ToCgroup(s plugins.Settings) Cgroup {
	c := Cgroup{Idle: s.CPUIdle, Devices: s.Devices}
	if !s.CPUs.IsEmpty() {
		c.CPUs = s.CPUs.String()
	}
	if !s.Mems.IsEmpty() {
		c.Mems = s.Mems.String()
	}
	if s.CPUShares != 0 {
		c.Shares = min(max(s.CPUShares, MinShares), MaxShares)
	}
	c.Quota = QuotaMicros(s.CPUQuota)
	c.Memory = memoryBytes(s.MemoryLimit)
	c.MemoryHigh, c.MemoryLow, c.MemoryMin = memoryBytes(s.MemoryHigh), memoryBytes(s.MemoryLow), memoryBytes(s.MemoryMin)
	c.OOMWait = s.MemoryOOMWait
	if s.IOLimits != nil {
		c.IOMax, c.IOMaxSet = IOMax(s.IOLimits), true
	}
	c.IOWeight = IOWeight(s.IOWeight)
	c.Burst = BurstMicros(s.CPUBurst)
	if s.CPUBurstPercent > 0 {
		c.Burst, c.BurstPercent, c.BurstLimitMilli = 0, min(s.CPUBurstPercent, 100), max(s.CPUBurstLimit, 0)
	}
	return c
}

// BurstMicros turns a burst in millicores into µs per PeriodMicros: 0 stays 0 (leave) and a
// negative one is -1 (none).
func BurstMicros(milli int64) int64 {
	switch {
	case milli == 0:
		return 0
	case milli < 0:
		return -1
	}
	return mulDiv(milli, PeriodMicros, 1000)
}

// memoryBytes is a memory setting as the files take it: 0 leaves it, any negative value
// lifts it (-1).
func memoryBytes(n int64) int64 { return max(n, plugins.Unlimited) }

// MemoryFile is a memory value as cgroup v2 files write it ("max" for -1).
func MemoryFile(n int64) string {
	if n < 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

// QuotaMicros turns a quota in millicores into µs per PeriodMicros: 0 stays 0 (leave), a
// negative one is -1 (unlimited), and a positive one is at least MinQuotaMicros.
func QuotaMicros(milli int64) int64 {
	switch {
	case milli == 0:
		return 0
	case milli < 0:
		return -1
	}
	return max(milli*PeriodMicros/1000, MinQuotaMicros)
}

// Weight maps cgroup v1 shares to v2 cpu.weight (1..10000) the way runc has for the shares
// a runtime is given, so a weight tidal writes and one the runtime derives from the CRI or
// NRI shares agree. 0 stays 0.
func Weight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	shares = min(max(shares, MinShares), MaxShares)
	return 1 + ((shares-2)*9999)/262142
}

// MilliCPU turns CFS quota and period, or else CPU shares (1024 a CPU, as the kubelet
// gives them), into millicores; 0 when neither says anything.
// The values come from the caller's request: huge ones saturate rather than wrap around
// (FuzzMilliCPU).
func MilliCPU(quota, period, shares int64) int64 {
	if quota > 0 && period > 0 {
		return mulDiv(quota, 1000, period)
	}
	if shares > MinShares {
		return mulDiv(shares, 1000, 1024)
	}
	return 0
}

// mulDiv is a*b/c for positive a, b, c without overflow, saturating at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// Container is a container's resources as a runtime hook passes them: CRI and NRI carry the
// same fields in the same units, so both are made from this. A zero field is left as the
// runtime has it.
type Container struct {
	CPUs, Mems string
	Shares     uint64 // v1 units; on v2 the runtime converts them with Weight
	Quota      int64  // µs per Period, or -1
	Period     uint64
	Memory     int64
	// OOMWait is v1's oom_kill_disable, which NRI carries and CRI has no field for (the
	// agent writes it to the pod's cgroup).
	OOMWait bool
	// Unified are cgroup v2 files with no field of their own (cpu.idle, cpu.max.burst,
	// memory.high, memory.low, memory.min).
	Unified map[string]string
}

// ToContainer is what a runtime hook passes for s, the same values as ToCgroup but for
// cpu.idle, which runtimes have no field for: on v2 it goes as a unified resource; on v1
// (where runc refuses unified resources) the pod's cgroup carries it, written by the agent,
// and the container gets the smallest share under it. CPU burst has no field either: on v2
// it goes as unified cpu.max.burst, but only beside a quota s sets itself (the kernel
// refuses a burst above the quota, and a container's quota is otherwise the kubelet's); a
// cleared burst is not passed, as the kernel starts every cgroup with none and a runtime
// would fail the container on a kernel without the file. A burst sized on the kubelet's
// quota (BurstPercent) the agent writes on the pod's and its containers' cgroups.
func ToContainer(s plugins.Settings, cgroupV2 bool) Container {
	cg := ToCgroup(s)
	c := Container{CPUs: cg.CPUs, Mems: cg.Mems, Shares: cg.Shares, Quota: cg.Quota, Memory: cg.Memory}
	if c.Quota != 0 {
		c.Period = PeriodMicros
	}
	switch {
	case cg.Idle != plugins.Unset && cgroupV2:
		c.Unified = map[string]string{"cpu.idle": "0"}
		if cg.Idle == plugins.On {
			c.Unified["cpu.idle"] = "1"
		}
	case cg.Idle == plugins.On:
		c.Shares = MinShares
	}
	if cgroupV2 && cg.Burst > 0 && c.Quota > 0 {
		if c.Unified == nil {
			c.Unified = map[string]string{}
		}
		c.Unified["cpu.max.burst"] = strconv.FormatInt(min(cg.Burst, c.Quota), 10)
	}
	memoryQoS(cg, cgroupV2, &c)
	return c
}

// memoryQoS adds the memory QoS files to c: on v2 as unified resources (runc writes them
// as they are); on v1 only oom_kill_disable has a runtime field (NRI's), and the soft
// limit is written by the agent to the pod's cgroup (runc's "reservation" means
// memory.low on v2, so it is not used for either).
func memoryQoS(cg Cgroup, cgroupV2 bool, c *Container) {
	if !cgroupV2 {
		c.OOMWait = cg.OOMWait == plugins.On
		return
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"memory.high", cg.MemoryHigh}, {"memory.low", cg.MemoryLow}, {"memory.min", cg.MemoryMin}} {
		if f.v == 0 {
			continue
		}
		if c.Unified == nil {
			c.Unified = map[string]string{}
		}
		c.Unified[f.name] = MemoryFile(f.v)
	}
}

// IsZero says whether c changes nothing.
func (c Container) IsZero() bool {
	return c.CPUs == "" && c.Mems == "" && c.Shares == 0 && c.Quota == 0 && c.Memory == 0 && !c.OOMWait && len(c.Unified) == 0
}

// CRI lays c over a CRI container's resources.
func (c Container) CRI(r *runtimeapi.LinuxContainerResources) {
	if c.CPUs != "" {
		r.CpusetCpus = c.CPUs
	}
	if c.Mems != "" {
		r.CpusetMems = c.Mems
	}
	if c.Shares != 0 {
		r.CpuShares = int64(c.Shares)
	}
	if c.Quota != 0 {
		r.CpuQuota, r.CpuPeriod = c.Quota, int64(c.Period)
	}
	if c.Memory != 0 {
		r.MemoryLimitInBytes = c.Memory
	}
	for k, v := range c.Unified {
		if r.Unified == nil {
			r.Unified = map[string]string{}
		}
		r.Unified[k] = v
	}
}

// NRI is c as NRI resources, for a container adjustment or update; nil when c changes
// nothing.
func (c Container) NRI() *api.LinuxResources {
	if c.IsZero() {
		return nil
	}
	r := &api.LinuxResources{}
	if c.CPUs != "" || c.Mems != "" || c.Shares != 0 || c.Quota != 0 {
		r.Cpu = &api.LinuxCPU{Cpus: c.CPUs, Mems: c.Mems}
		if c.Shares != 0 {
			r.Cpu.Shares = api.UInt64(c.Shares)
		}
		if c.Quota != 0 {
			r.Cpu.Quota, r.Cpu.Period = api.Int64(c.Quota), api.UInt64(c.Period)
		}
	}
	if c.Memory != 0 || c.OOMWait {
		r.Memory = &api.LinuxMemory{}
		if c.Memory != 0 {
			r.Memory.Limit = api.Int64(c.Memory)
		}
		if c.OOMWait {
			r.Memory.DisableOomKiller = api.Bool(true)
		}
	}
	if len(c.Unified) > 0 {
		r.Unified = make(map[string]string, len(c.Unified))
		for k, v := range c.Unified {
			r.Unified[k] = v
		}
	}
	return r
}
