package isolation

import (
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

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
	numKnobs
)

// String names the knob as metrics and logs show it.
func (k knob) String() string {
	return [...]string{"cpuset.cpus", "cpuset.mems", "cpu.idle", "cpu.shares", "cpu.quota", "memory.limit", "devices"}[k]
}

const (
	cfsPeriodMicros = 100000
	// v1 reports "no memory limit" as a page-rounded LONG_MAX; anything this large is unlimited.
	v1MemoryUnlimited = int64(1) << 62
)

// wanted returns the canonical value of every knob that s sets.
func wanted(s plugins.Settings) map[knob]string {
	w := map[knob]string{}
	if !s.CPUs.IsEmpty() {
		w[knobCPUs] = s.CPUs.String()
	}
	if !s.Mems.IsEmpty() {
		w[knobMems] = s.Mems.String()
	}
	switch s.CPUIdle {
	case plugins.On:
		w[knobIdle] = "1"
	case plugins.Off:
		w[knobIdle] = "0"
	}
	if s.CPUShares != 0 {
		w[knobShares] = strconv.FormatUint(s.CPUShares, 10)
	}
	if s.CPUQuota != 0 {
		w[knobQuota] = quotaText(s.CPUQuota)
	}
	if s.MemoryLimit != 0 {
		w[knobMemoryLimit] = strconv.FormatInt(max(s.MemoryLimit, plugins.Unlimited), 10)
	}
	if s.Devices != nil {
		w[knobDevices] = strings.Join(s.Devices, ";")
	}
	return w
}

// quotaText renders millicores as "<quota us>" over the fixed period, -1 for unlimited.
func quotaText(milli int64) string {
	if milli < 0 {
		return "-1"
	}
	// The kernel refuses quotas under 1 ms.
	return strconv.FormatInt(max(milli*cfsPeriodMicros/1000, 1000), 10)
}

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

// sharesToWeight maps cgroup v1 shares to v2 cpu.weight the way runc and the kernel docs do.
func sharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	return 1 + ((shares-2)*9999)/262142
}
