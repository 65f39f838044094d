package isolation

import (
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
)

// knob is one cgroup setting tidal writes. Its value is kept as the canonical text of the
// kernel file (in kernel units), so "changed" is a string comparison.
type knob int

const (
	knobCPUs knob = iota
	knobMems
	knobIdle // before shares: the kernel refuses shares on an idle group
	knobShares
	knobQuota
	knobMemoryLimit
	knobDevices
	// knobBurst comes after knobQuota: a burst may only rise once the quota has (the kernel
	// refuses a burst above the quota); Apply lowers it before the quota.
	knobBurst
	// Memory QoS: see plugins.Settings. Low and min exist on v2 only, oom-wait on v1 only.
	knobMemoryHigh
	knobMemoryLow
	knobMemoryMin
	knobMemoryOOMWait
	// Disk IO: the throttles of every device (canonical io.max text, translate.IOMax) and
	// the proportional weight, which exists only where a scheduler offers it.
	knobIOMax
	knobIOWeight
	// knobCPUBalance is cgroup v1's cpuset.sched_load_balance, turned off in every cgroup
	// tidal gives CPUs, where the root's is on: see v1Backend.supports.
	knobCPUBalance
	numKnobs
)

// String names the knob as metrics and logs show it.
func (k knob) String() string {
	return [...]string{"cpuset.cpus", "cpuset.mems", "cpu.idle", "cpu.shares", "cpu.quota", "memory.limit", "devices", "cpu.burst",
		"memory.high", "memory.low", "memory.min", "memory.oom-wait", "io.max", "io.weight", "cpuset.sched-load-balance"}[k]
}

// v1 reports "no memory limit" as a page-rounded LONG_MAX; anything this large is unlimited.
const v1MemoryUnlimited = int64(1) << 62

// wanted returns the canonical value of every knob that s sets, in the kernel units
// translate gives every write path.
func wanted(s plugins.Settings) map[knob]string {
	c := translate.ToCgroup(s)
	w := map[knob]string{}
	if c.CPUs != "" {
		w[knobCPUs] = c.CPUs
		w[knobCPUBalance] = "0"
	}
	if c.Mems != "" {
		w[knobMems] = c.Mems
	}
	switch c.Idle {
	case plugins.On:
		w[knobIdle] = "1"
	case plugins.Off:
		w[knobIdle] = "0"
	}
	if c.Shares != 0 {
		w[knobShares] = strconv.FormatUint(c.Shares, 10)
	}
	if c.Quota != 0 {
		w[knobQuota] = strconv.FormatInt(c.Quota, 10)
	}
	if c.Memory != 0 {
		w[knobMemoryLimit] = strconv.FormatInt(c.Memory, 10)
	}
	if c.Devices != nil {
		w[knobDevices] = strings.Join(c.Devices, ";")
	}
	switch {
	case c.Burst < 0:
		w[knobBurst] = "0"
	case c.Burst > 0:
		w[knobBurst] = strconv.FormatInt(c.Burst, 10)
	}
	for k, v := range map[knob]int64{knobMemoryHigh: c.MemoryHigh, knobMemoryLow: c.MemoryLow, knobMemoryMin: c.MemoryMin} {
		if v != 0 {
			w[k] = strconv.FormatInt(v, 10)
		}
	}
	switch c.OOMWait {
	case plugins.On:
		w[knobMemoryOOMWait] = "1"
	case plugins.Off:
		w[knobMemoryOOMWait] = "0"
	}
	if c.IOMaxSet {
		w[knobIOMax] = c.IOMax
	}
	if c.IOWeight != 0 {
		w[knobIOWeight] = strconv.FormatUint(c.IOWeight, 10)
	}
	return w
}

// burstOfQuota is pct percent of a canonical quota ("50000", "50000/20000": µs per a period
// other than PeriodMicros, "-1"), or of limitMilli millicores over the quota's period where
// that is less, as the burst file takes it; ok is false when there is no quota to burst above.
func burstOfQuota(quota string, pct int32, limitMilli int64) (string, bool) {
	q, p, hasPeriod := strings.Cut(quota, "/")
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		return "", false
	}
	period := int64(translate.PeriodMicros)
	if hasPeriod {
		if period, err = strconv.ParseInt(p, 10, 64); err != nil || period <= 0 {
			return "", false
		}
	}
	if limitMilli > 0 {
		n = min(n, limitMilli*period/1000)
	}
	return strconv.FormatInt(n*int64(pct)/100, 10), true
}

// optional knobs are files a stock kernel may lack (cpu.cfs_burst_us and cpu.max.burst came
// in Linux 5.14; an IO weight file exists only with bfq, or io.cost on v2): without the file
// the knob is skipped, not an error.
func (k knob) optional() bool { return k == knobBurst || k == knobIOWeight }

// quotaMicros parses a canonical quota; unlimited is the largest value.
func quotaMicros(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return int64(^uint64(0) >> 1)
	}
	return n
}

// canonicalCPUs normalizes a cpuset file ("0-1\n", "0,1") to the form wanted() produces.
func canonicalCPUs(raw string) string {
	s, err := cpuset.Parse(strings.TrimSpace(raw))
	if err != nil {
		return strings.TrimSpace(raw)
	}
	return s.String()
}
