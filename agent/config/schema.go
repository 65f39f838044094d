package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// kind is how a key's value is written in the file.
type kind int

const (
	kindSection   kind = iota // a mapping of more keys
	kindString                // any scalar, taken as text
	kindInt                   // an integer (int or int64 field)
	kindFloat                 // an integer or a decimal number
	kindBool                  // true or false
	kindDuration              // a Go duration string
	kindSize                  // bytes: an integer or a string with a suffix (ParseSize)
	kindCPUSet                // a Linux cpulist
	kindIODevices             // io.devices: a list of mappings (see ioDevices)
)

// entry describes one key of the file: its name, how its value is written,
// where it goes in Config and which values are allowed.
type entry struct {
	key      string
	kind     kind
	children []*entry // kindSection

	ptr  func(*Config) any // pointer to the field
	want string            // what is allowed, in words
	ok   func(*Config) bool
	// wantFn, when set, says what is allowed given the rest of the config
	// (cross-field rules); related are the keys it depends on, whose line
	// is used when this key is not in the file.
	wantFn  func(*Config) string
	related []string
}

func section(key string, children ...*entry) *entry {
	return &entry{key: key, kind: kindSection, children: children}
}

func leaf[T any](key string, k kind, p func(*Config) *T, want string, ok func(T) bool) *entry {
	e := &entry{key: key, kind: k, want: want, ptr: func(c *Config) any { return p(c) }}
	if ok != nil {
		e.ok = func(c *Config) bool { return ok(*p(c)) }
	}
	return e
}

// cross makes e's check depend on the whole config.
func (e *entry) cross(ok func(*Config) bool, want func(*Config) string, related ...string) *entry {
	e.ok, e.wantFn, e.related = ok, want, related
	return e
}

func oneOf(vals ...string) func(string) bool {
	return func(s string) bool {
		for _, v := range vals {
			if s == v {
				return true
			}
		}
		return false
	}
}

func absPath(s string) bool { return path.IsAbs(s) }

// targets is the section of one tier's interference targets.
func targets(key string, p func(*Config) *Targets) *entry {
	return section(key,
		leaf("runQueueWait", kindFloat, func(c *Config) *float64 { return &p(c).RunQueueWait },
			"a number >= 0 (run-queue wait per unit of CPU run; 0 turns it off)", func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }),
		leaf("runQueueWaitOverBaseline", kindFloat, func(c *Config) *float64 { return &p(c).RunQueueWaitOverBaseline },
			"0 (off) or a number in [1, 100] (times the workload's own run-queue wait with nothing lent)",
			func(v float64) bool { return v == 0 || v >= 1 && v <= 100 }),
		leaf("throttled", kindFloat, func(c *Config) *float64 { return &p(c).Throttled },
			"a number in [0, 1] (fraction of CFS periods throttled; 0 turns it off)", inRange(0, 1, false)),
	)
}

func mechanismList() []string { return Mechanisms() }

// candidateList checks cpu.autoMechanism.candidates: known mechanisms, each once.
func candidateList(s string) bool {
	list := AutoMechanism{Candidates: s}.CandidateList()
	seen := map[string]bool{}
	for _, c := range list {
		if seen[c] || !oneOf(mechanismList()...)(c) {
			return false
		}
		seen[c] = true
	}
	return len(list) > 0
}

func mechanismNames() string { return strings.Join(mechanismList(), ", ") }

// relPath accepts a relative path that stays below its parent: not empty,
// no leading slash, no ".." component and not just ".".
func relPath(s string) bool {
	if s == "" || strings.HasPrefix(s, "/") || path.Clean(s) == "." {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// hostPort accepts "" (disabled) or host:port with a port in 1..65535.
func hostPort(s string) bool {
	if s == "" {
		return true
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

func atLeast[T int | int64 | time.Duration](min T) func(T) bool {
	return func(v T) bool { return v >= min }
}

func above[T int | int64 | time.Duration](min T) func(T) bool {
	return func(v T) bool { return v > min }
}

// inRange checks lo <= v <= hi (loOpen: lo < v); NaN is never in range.
func inRange(lo, hi float64, loOpen bool) func(float64) bool {
	return func(v float64) bool {
		if loOpen {
			return v > lo && v <= hi
		}
		return v >= lo && v <= hi
	}
}

func sizeWant(cond, example string) string {
	return fmt.Sprintf("a size %s: bytes as an integer, or a number with a %s, such as %q", cond, yamlconf.SizeSuffixes, example)
}

// schema is every key of the config file, in the order of docs/config.md.
var schema = []*entry{
	leaf("mode", kindString, func(c *Config) *string { return &c.Mode },
		"one of standalone, kubernetes", oneOf(ModeStandalone, ModeKubernetes)),
	leaf("nodeName", kindString, func(c *Config) *string { return &c.NodeName },
		"a node name: 1-253 letters, digits, '-', '.' or '_' (a Kubernetes node's name, or the host's)", validNodeName),
	section("cgroup",
		leaf("root", kindString, func(c *Config) *string { return &c.Cgroup.Root },
			`a relative path without "..", such as "tidal"`, relPath),
		leaf("mountPoint", kindString, func(c *Config) *string { return &c.Cgroup.MountPoint },
			`an absolute path such as "/sys/fs/cgroup"`, absPath),
		leaf("version", kindString, func(c *Config) *string { return &c.Cgroup.Version },
			"one of auto, v1, v2", oneOf(CgroupAuto, CgroupV1, CgroupV2)),
	),
	leaf("stateDir", kindString, func(c *Config) *string { return &c.StateDir },
		`an absolute path such as "/var/lib/tidal"`, absPath),
	leaf("socketPath", kindString, func(c *Config) *string { return &c.SocketPath },
		`an absolute path under 108 bytes, such as "/run/tidal/tidal.sock"`, socketPath),
	leaf("metricsAddress", kindString, func(c *Config) *string { return &c.MetricsAddress },
		`host:port such as "127.0.0.1:9477" or ":9477", or "" to disable`, hostPort),
	leaf("logLevel", kindString, func(c *Config) *string { return &c.LogLevel },
		"one of debug, info, warn, error", oneOf(LogDebug, LogInfo, LogWarn, LogError)),
	section("cpu",
		leaf("reservedSystemCPUs", kindCPUSet, func(c *Config) *cpuset.CPUSet { return &c.CPU.ReservedSystemCPUs },
			`a Linux CPU list such as "0-1" or "0,2,4-7", or "" for none`, nil),
		leaf("minReclaimedMilliCPU", kindInt, func(c *Config) *int64 { return &c.CPU.MinReclaimedMilliCPU },
			"an integer >= 10", atLeast[int64](10)),
		leaf("safetyMarginMilliCPU", kindInt, func(c *Config) *int64 { return &c.CPU.SafetyMarginMilliCPU },
			"an integer >= 0", atLeast[int64](0)),
		leaf("safetyMarginRatio", kindFloat, func(c *Config) *float64 { return &c.CPU.SafetyMarginRatio },
			"a number in [0, 1]", inRange(0, 1, false)),
		leaf("growStepMilliCPU", kindInt, func(c *Config) *int64 { return &c.CPU.GrowStepMilliCPU },
			"an integer > 0", above[int64](0)),
		leaf("peakWindow", kindDuration, func(c *Config) *time.Duration { return &c.CPU.PeakWindow },
			`a duration >= 1s, such as "30s"`, atLeast(time.Second)),
		leaf("limitWindow", kindDuration, func(c *Config) *time.Duration { return &c.CPU.LimitWindow },
			`a duration >= 1s, such as "5s"`, atLeast(time.Second)),
		leaf("spikeThreshold", kindFloat, func(c *Config) *float64 { return &c.CPU.SpikeThreshold },
			"a number in (0, 1]", inRange(0, 1, true)),
		leaf("coreUtilization", kindFloat, func(c *Config) *float64 { return &c.CPU.CoreUtilization },
			"a number in (0, 1]", inRange(0, 1, true)),
		leaf("poolShrinkAfter", kindDuration, func(c *Config) *time.Duration { return &c.CPU.PoolShrinkAfter },
			`a duration >= 0, such as "10s"`, atLeast[time.Duration](0)),
		leaf("mechanism", kindString, func(c *Config) *string { return &c.CPU.Mechanism },
			"one of "+mechanismNames()+", "+MechanismAuto, oneOf(append(mechanismList(), MechanismAuto)...)),
		leaf("reclaimedCPUs", kindString, func(c *Config) *string { return &c.CPU.ReclaimedCPUs },
			"one of auto, pool, online", oneOf(ReclaimedAuto, ReclaimedOnPool, ReclaimedOnOnline)),
		leaf("quotaAfterCut", kindDuration, func(c *Config) *time.Duration { return &c.CPU.QuotaAfterCut },
			`a duration >= 0, such as "1s"`, atLeast[time.Duration](0)),
		section("autoMechanism",
			leaf("candidates", kindString, func(c *Config) *string { return &c.CPU.AutoMechanism.Candidates },
				"a comma-separated list of distinct mechanisms ("+mechanismNames()+"), such as \"quota,idle\"", candidateList),
			leaf("trial", kindDuration, func(c *Config) *time.Duration { return &c.CPU.AutoMechanism.Trial },
				`a duration >= 1s, such as "1m"`, atLeast(time.Second)),
			leaf("rounds", kindInt, func(c *Config) *int { return &c.CPU.AutoMechanism.Rounds },
				"an integer in [1, 10]", func(v int) bool { return v >= 1 && v <= 10 }),
			leaf("every", kindDuration, func(c *Config) *time.Duration { return &c.CPU.AutoMechanism.Every },
				`0 (choose once) or a duration >= 1m, such as "6h"`, func(d time.Duration) bool { return d == 0 || d >= time.Minute }),
			leaf("waitTolerance", kindFloat, func(c *Config) *float64 { return &c.CPU.AutoMechanism.WaitTolerance },
				"a number in [0, 100]", inRange(0, 100, false)),
			leaf("sloTolerance", kindFloat, func(c *Config) *float64 { return &c.CPU.AutoMechanism.SLOTolerance },
				"a share in [0, 1]", inRange(0, 1, false)),
		),
		// CPU burst (issue 12).
		section("burstPercent",
			leaf("system", kindInt, func(c *Config) *int { return &c.CPU.BurstPercent.System }, burstWant, burstPercent),
			leaf("dedicated", kindInt, func(c *Config) *int { return &c.CPU.BurstPercent.Dedicated }, burstWant, burstPercent),
			leaf("shared", kindInt, func(c *Config) *int { return &c.CPU.BurstPercent.Shared }, burstWant, burstPercent),
		),
	),
	section("interference",
		leaf("interval", kindDuration, func(c *Config) *time.Duration { return &c.Interference.Interval },
			`a duration in [50ms, 10s], such as "500ms"`, func(d time.Duration) bool {
				return d >= 50*time.Millisecond && d <= 10*time.Second
			}),
		leaf("minRunMilliCPU", kindInt, func(c *Config) *int64 { return &c.Interference.MinRunMilliCPU },
			"an integer >= 0", atLeast[int64](0)),
		leaf("waitReadings", kindInt, func(c *Config) *int { return &c.Interference.WaitReadings },
			"an integer in [1, 20]", func(n int) bool { return n >= 1 && n <= 20 }),
		leaf("slack", kindFloat, func(c *Config) *float64 { return &c.Interference.Slack },
			"a number in (0, 1]", inRange(0, 1, true)),
		leaf("cut", kindFloat, func(c *Config) *float64 { return &c.Interference.Cut },
			"a number in [0, 1)", func(v float64) bool { return v >= 0 && v < 1 }),
		leaf("holdAfterCut", kindDuration, func(c *Config) *time.Duration { return &c.Interference.HoldAfterCut },
			`a duration >= 0, such as "10s"`, atLeast[time.Duration](0)),
		leaf("holdAfterFirstCut", kindDuration, func(c *Config) *time.Duration { return &c.Interference.HoldAfterFirstCut },
			`a duration >= 0, such as "2500ms"`, atLeast[time.Duration](0)),
		leaf("baselineFor", kindDuration, func(c *Config) *time.Duration { return &c.Interference.BaselineFor },
			`0 (no baselines) or a duration in [1s, 1m] and >= 3 x interference.interval, such as "2s"`, nil).
			cross(func(c *Config) bool {
				d := c.Interference.BaselineFor
				return d == 0 || d >= time.Second && d <= time.Minute && d >= 3*c.Interference.Interval
			}, func(c *Config) string {
				return fmt.Sprintf("0 (no baselines) or a duration in [1s, 1m] and >= 3 x interference.interval (%v), to take readings", c.Interference.Interval)
			}, "interference.interval"),
		leaf("baselineEvery", kindDuration, func(c *Config) *time.Duration { return &c.Interference.BaselineEvery },
			`0 (only for workloads without one) or a duration >= 1m, such as "10m"`,
			func(d time.Duration) bool { return d == 0 || d >= time.Minute }),
		targets("shared", func(c *Config) *Targets { return &c.Interference.Shared }),
		targets("dedicated", func(c *Config) *Targets { return &c.Interference.Dedicated }),
	),
	section("memory",
		leaf("reservedSystemBytes", kindSize, func(c *Config) *int64 { return &c.Memory.ReservedSystemBytes },
			sizeWant(">= 0", "1Gi"), atLeast[int64](0)),
		leaf("minReclaimedBytes", kindSize, func(c *Config) *int64 { return &c.Memory.MinReclaimedBytes },
			sizeWant(">= 0", "256Mi"), atLeast[int64](0)),
		leaf("safetyMarginBytes", kindSize, func(c *Config) *int64 { return &c.Memory.SafetyMarginBytes },
			sizeWant(">= 0", "512Mi"), atLeast[int64](0)),
		leaf("growStepBytes", kindSize, func(c *Config) *int64 { return &c.Memory.GrowStepBytes },
			sizeWant("> 0", "1Gi"), above[int64](0)),
		leaf("evictAvailableBelowBytes", kindSize, func(c *Config) *int64 { return &c.Memory.EvictAvailableBelowBytes },
			sizeWant("> 0", "512Mi"), above[int64](0)),
		leaf("evictPressureAbove", kindFloat, func(c *Config) *float64 { return &c.Memory.EvictPressureAbove },
			"a number in (0, 100] (percent)", inRange(0, 100, true)),
		// Memory QoS.
		leaf("throttleMarginBytes", kindSize, func(c *Config) *int64 { return &c.Memory.ThrottleMarginBytes },
			sizeWant(">= 0", "256Mi"), atLeast[int64](0)),
		leaf("oomWait", kindBool, func(c *Config) *bool { return &c.Memory.OOMWait }, "true or false", nil),
		leaf("stalledEvictAfter", kindDuration, func(c *Config) *time.Duration { return &c.Memory.StalledEvictAfter },
			`a duration >= 1s, such as "10s"`, atLeast(time.Second)),
		leaf("onlinePageCache", kindBool, func(c *Config) *bool { return &c.Memory.OnlinePageCache }, "true or false", nil),
	),
	section("io",
		leaf("enabled", kindBool, func(c *Config) *bool { return &c.IO.Enabled }, "true or false", nil),
		leaf("nodeDisks", kindBool, func(c *Config) *bool { return &c.IO.NodeDisks }, "true or false", nil),
		&entry{key: "devices", kind: kindIODevices, ptr: func(c *Config) any { return &c.IO.Devices }},
		leaf("floorBps", kindSize, func(c *Config) *int64 { return &c.IO.FloorBps },
			sizeWant("> 0 (bytes per second)", "8Mi"), above[int64](0)),
		leaf("floorIOPS", kindInt, func(c *Config) *int64 { return &c.IO.FloorIOPS },
			"an integer > 0 (IOs per second)", above[int64](0)),
		leaf("marginRatio", kindFloat, func(c *Config) *float64 { return &c.IO.MarginRatio },
			"a number in [0, 10]", inRange(0, 10, false)),
		leaf("growStepRatio", kindFloat, func(c *Config) *float64 { return &c.IO.GrowStepRatio },
			"a number in (0, 1]", inRange(0, 1, true)),
		leaf("peakWindow", kindDuration, func(c *Config) *time.Duration { return &c.IO.PeakWindow },
			`a duration >= 1s, such as "30s"`, atLeast(time.Second)),
		leaf("pressureThreshold", kindFloat, func(c *Config) *float64 { return &c.IO.PressureThreshold },
			"a number in [0, 100] (percent; 0 turns it off)", inRange(0, 100, false)),
		leaf("latencyThreshold", kindDuration, func(c *Config) *time.Duration { return &c.IO.LatencyThreshold },
			`a duration >= 0 (0 turns it off), such as "50ms"`, atLeast[time.Duration](0)),
		leaf("holdAfterCut", kindDuration, func(c *Config) *time.Duration { return &c.IO.HoldAfterCut },
			`a duration >= 0, such as "10s"`, atLeast[time.Duration](0)),
		leaf("interval", kindDuration, func(c *Config) *time.Duration { return &c.IO.Interval },
			`a duration in [10ms, 10s], such as "500ms"`, func(d time.Duration) bool {
				return d >= 10*time.Millisecond && d <= 10*time.Second
			}),
	),
	section("loops",
		leaf("slowInterval", kindDuration, func(c *Config) *time.Duration { return &c.Loops.SlowInterval },
			`a duration in [100ms, 1m], such as "1s"`, func(d time.Duration) bool {
				return d >= 100*time.Millisecond && d <= time.Minute
			}),
		leaf("fastInterval", kindDuration, func(c *Config) *time.Duration { return &c.Loops.FastInterval },
			`a duration >= 1ms and < loops.slowInterval, such as "10ms"`, nil).
			cross(func(c *Config) bool {
				return c.Loops.FastInterval >= time.Millisecond && c.Loops.FastInterval < c.Loops.SlowInterval
			}, func(c *Config) string {
				return fmt.Sprintf("a duration >= 1ms and < loops.slowInterval (%v)", c.Loops.SlowInterval)
			}, "loops.slowInterval"),
		leaf("fastWindow", kindDuration, func(c *Config) *time.Duration { return &c.Loops.FastWindow },
			`a duration >= loops.fastInterval, such as "30ms"`, nil).
			cross(func(c *Config) bool {
				return c.Loops.FastWindow >= c.Loops.FastInterval
			}, func(c *Config) string {
				return fmt.Sprintf("a duration >= loops.fastInterval (%v)", c.Loops.FastInterval)
			}, "loops.fastInterval"),
		leaf("fastBurstWindow", kindDuration, func(c *Config) *time.Duration { return &c.Loops.FastBurstWindow },
			`0 (off) or a duration in [loops.fastInterval, loops.fastWindow], such as "10ms"`, nil).
			cross(func(c *Config) bool {
				d := c.Loops.FastBurstWindow
				return d == 0 || d >= c.Loops.FastInterval && d <= c.Loops.FastWindow
			}, func(c *Config) string {
				return fmt.Sprintf("0 (off) or a duration in [loops.fastInterval (%v), loops.fastWindow (%v)]", c.Loops.FastInterval, c.Loops.FastWindow)
			}, "loops.fastInterval", "loops.fastWindow"),
		leaf("metricsStaleAfter", kindDuration, func(c *Config) *time.Duration { return &c.Loops.MetricsStaleAfter },
			`a duration > loops.slowInterval, such as "5s"`, nil).
			cross(func(c *Config) bool {
				return c.Loops.MetricsStaleAfter > c.Loops.SlowInterval
			}, func(c *Config) string {
				return fmt.Sprintf("a duration > loops.slowInterval (%v)", c.Loops.SlowInterval)
			}, "loops.slowInterval"),
		leaf("psiStallThreshold", kindDuration, func(c *Config) *time.Duration { return &c.Loops.PSIStallThreshold },
			`a duration > 0 and <= loops.psiWindow, such as "50ms"`, nil).
			cross(func(c *Config) bool {
				return c.Loops.PSIStallThreshold > 0 && c.Loops.PSIStallThreshold <= c.Loops.PSIWindow
			}, func(c *Config) string {
				return fmt.Sprintf("a duration > 0 and <= loops.psiWindow (%v)", c.Loops.PSIWindow)
			}, "loops.psiWindow"),
		leaf("psiWindow", kindDuration, func(c *Config) *time.Duration { return &c.Loops.PSIWindow },
			`a duration in [500ms, 10s], such as "500ms"`, func(d time.Duration) bool {
				return d >= 500*time.Millisecond && d <= 10*time.Second
			}),
		leaf("psiTrigger", kindBool, func(c *Config) *bool { return &c.Loops.PSITrigger },
			"true or false", nil),
	),
	section("eviction",
		leaf("gracePeriod", kindDuration, func(c *Config) *time.Duration { return &c.Eviction.GracePeriod },
			`a duration >= 0, such as "5s"`, atLeast[time.Duration](0)),
		leaf("coolDown", kindDuration, func(c *Config) *time.Duration { return &c.Eviction.CoolDown },
			`a duration >= 0, such as "10s"`, atLeast[time.Duration](0)),
		// Starvation eviction (issue 12).
		leaf("starvationFloor", kindFloat, func(c *Config) *float64 { return &c.Eviction.StarvationFloor },
			"a number in [0, 1) (0: off)", func(f float64) bool { return f >= 0 && f < 1 }),
		leaf("starvationWindow", kindDuration, func(c *Config) *time.Duration { return &c.Eviction.StarvationWindow },
			`a duration >= loops.slowInterval, such as "10m"`, nil).
			cross(func(c *Config) bool {
				return c.Eviction.StarvationWindow >= c.Loops.SlowInterval
			}, func(c *Config) string {
				return fmt.Sprintf("a duration >= loops.slowInterval (%v), such as \"10m\"", c.Loops.SlowInterval)
			}, "loops.slowInterval"),
	),
	section("status",
		leaf("actionHistory", kindInt, func(c *Config) *int { return &c.Status.ActionHistory },
			"an integer >= 1", atLeast(1)),
	),
	section("arbiter",
		leaf("url", kindString, func(c *Config) *string { return &c.Arbiter.URL },
			`"" (no arbiter) or an http(s) URL such as "http://127.0.0.1:9480"`, httpURL),
		leaf("tokenFile", kindString, func(c *Config) *string { return &c.Arbiter.TokenFile },
			`an absolute path, required when arbiter.url is set`, nil).
			cross(func(c *Config) bool {
				if c.Arbiter.URL == "" {
					return c.Arbiter.TokenFile == "" || absPath(c.Arbiter.TokenFile)
				}
				return absPath(c.Arbiter.TokenFile)
			}, func(c *Config) string {
				return "an absolute path, required when arbiter.url is set"
			}, "arbiter.url"),
		leaf("reportInterval", kindDuration, func(c *Config) *time.Duration { return &c.Arbiter.ReportInterval },
			`a duration in [1s, 5m], such as "10s"`, func(d time.Duration) bool {
				return d >= time.Second && d <= 5*time.Minute
			}),
		leaf("nodeLabels", kindString, func(c *Config) *string { return &c.Arbiter.NodeLabels },
			`"" or comma-separated key=value labels, such as "pool=batch,zone=a"`, func(s string) bool {
				_, err := ParseLabels(s)
				return err == nil
			}),
	),
	section("kubernetes",
		leaf("kubeconfig", kindString, func(c *Config) *string { return &c.Kubernetes.Kubeconfig },
			`"" (the in-cluster config) or an absolute path`, func(s string) bool { return s == "" || absPath(s) }),
		leaf("cgroupDriver", kindString, func(c *Config) *string { return &c.Kubernetes.CgroupDriver },
			"one of auto, cgroupfs, systemd", oneOf(DriverAuto, DriverCgroupfs, DriverSystemd)),
		leaf("cgroupRoot", kindString, func(c *Config) *string { return &c.Kubernetes.CgroupRoot },
			`the kubelet's --cgroup-root, such as "/", without ".."`, cgroupRoot),
		leaf("cpuManagerStateFile", kindString, func(c *Config) *string { return &c.Kubernetes.CPUManagerStateFile },
			`"" (no CPU manager) or an absolute path such as "/var/lib/kubelet/cpu_manager_state"`,
			func(s string) bool { return s == "" || absPath(s) }),
		leaf("tierPolicy", kindString, func(c *Config) *string { return &c.Kubernetes.TierPolicy },
			`a ConfigMap as "namespace/name", such as "tidal-system/tidal-tier-policy"`, namespacedName),
		leaf("publishMinChange", kindFloat, func(c *Config) *float64 { return &c.Kubernetes.PublishMinChange },
			"a number in [0, 1]", inRange(0, 1, false)),
		leaf("publishMaxAge", kindDuration, func(c *Config) *time.Duration { return &c.Kubernetes.PublishMaxAge },
			`a duration in [1s, 1h], such as "1m"`, func(d time.Duration) bool {
				return d >= time.Second && d <= time.Hour
			}),
	),
	section("hooks",
		leaf("criProxy", kindBool, func(c *Config) *bool { return &c.Hooks.CRIProxy }, "true or false", nil),
		leaf("criSocket", kindString, func(c *Config) *string { return &c.Hooks.CRISocket },
			`an absolute path under 108 bytes, such as "/run/tidal/cri.sock"`, socketPath),
		leaf("runtimeSocket", kindString, func(c *Config) *string { return &c.Hooks.RuntimeSocket },
			`an absolute path under 108 bytes, such as "/run/containerd/containerd.sock"`, socketPath),
		leaf("nri", kindBool, func(c *Config) *bool { return &c.Hooks.NRI }, "true or false", nil),
		leaf("nriSocket", kindString, func(c *Config) *string { return &c.Hooks.NRISocket },
			`an absolute path under 108 bytes, such as "/var/run/nri/nri.sock"`, socketPath),
		leaf("timeout", kindDuration, func(c *Config) *time.Duration { return &c.Hooks.Timeout },
			`a duration in [1ms, 10s], such as "100ms"`, func(d time.Duration) bool {
				return d >= time.Millisecond && d <= 10*time.Second
			}),
	),
}

// burstWant and burstPercent check a tier's CPU burst (issue 12).
const burstWant = "an integer in [0, 100] (a percentage of the CPU limit; the kernel takes no burst above it)"

func burstPercent(n int) bool { return n >= 0 && n <= 100 }

// socketPath accepts an absolute path short enough for a unix socket address.
func socketPath(s string) bool { return absPath(s) && len(s) < 108 }

// cgroupRoot accepts "/" or a path (leading slash optional) without "..".
func cgroupRoot(s string) bool {
	t := strings.Trim(s, "/")
	return t == "" && s != "" || relPath(t)
}

// dnsName is a Kubernetes namespace or object name (RFC 1123 subdomain).
var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// namespacedName accepts "namespace/name".
func namespacedName(s string) bool {
	ns, name, ok := strings.Cut(s, "/")
	return ok && len(ns) <= 63 && dnsName.MatchString(ns) && !strings.Contains(ns, ".") && dnsName.MatchString(name)
}

// httpURL accepts "" or an absolute http or https URL with a host.
func httpURL(s string) bool {
	if s == "" {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// ParseLabels reads "k=v,k2=v2" into a map; keys are non-empty and unique.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", part)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// wantFor says what e allows given c.
func (e *entry) wantFor(c *Config) string {
	if e.wantFn != nil {
		return e.wantFn(c)
	}
	return e.want
}

// formatValue writes e's current value in c the way messages show it.
func formatValue(e *entry, c *Config) string {
	switch p := e.ptr(c).(type) {
	case *string:
		return strconv.Quote(*p)
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *bool:
		return strconv.FormatBool(*p)
	case *time.Duration:
		return p.String()
	case *cpuset.CPUSet:
		return strconv.Quote(p.String())
	}
	return fmt.Sprint(e.ptr(c))
}

// keyList names the keys of a section, for messages.
func keyList(entries []*entry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.key
	}
	return strings.Join(names, ", ")
}

// suggest returns the known key closest to an unknown one, or "".
// validNodeName accepts a host's or a Kubernetes node's name: it becomes part of the arbiter's
// URLs and the Node object's name, so nothing that would split a path or a line.
func validNodeName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// nested says whether key is a section among entries: "cpu" of "cpu.spikeThreshold".
func nested(key string, entries []*entry) bool {
	for _, e := range entries {
		if e.key == key && e.kind == kindSection {
			return true
		}
	}
	return false
}

func suggest(unknown string, entries []*entry) string {
	if unknown == "" || len(unknown) > 64 {
		return ""
	}
	lu := strings.ToLower(unknown)
	for _, e := range entries {
		if strings.ToLower(e.key) == lu {
			return e.key
		}
	}
	if len(lu) >= 4 {
		for _, e := range entries {
			if strings.HasPrefix(strings.ToLower(e.key), lu) {
				return e.key
			}
		}
	}
	best, bestDist := "", 3
	for _, e := range entries {
		if d := yamlconf.EditDistance(lu, strings.ToLower(e.key)); d < bestDist && d < len(e.key) {
			best, bestDist = e.key, d
		}
	}
	return best
}

// maxCPUID bounds CPU ids in a cpulist (Linux NR_CPUS is at most 8192), so
// that a typo such as "0-99999999" does not build a huge set.
const maxCPUID = 8191

// parseCPUList parses Linux cpulist syntax ("0-3,8,10-11"; "" is the empty
// set). On failure it returns the reason.
func parseCPUList(s string) (cpuset.CPUSet, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), ""
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, reason := cpuID(lo, part)
		if reason != "" {
			return cpuset.CPUSet{}, reason
		}
		if isRange {
			b, reason := cpuID(hi, part)
			if reason != "" {
				return cpuset.CPUSet{}, reason
			}
			if a > b {
				return cpuset.CPUSet{}, fmt.Sprintf("range %q goes down", part)
			}
		}
	}
	set, err := cpuset.Parse(s)
	if err != nil {
		return cpuset.CPUSet{}, err.Error()
	}
	return set, ""
}

func cpuID(s, part string) (int, string) {
	if s == "" {
		return 0, fmt.Sprintf("%q is not a CPU number or range", part)
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Sprintf("%q is not a CPU number or range", part)
		}
	}
	if len(s) > 5 {
		return 0, fmt.Sprintf("CPU %s is above %d", s, maxCPUID)
	}
	n, _ := strconv.Atoi(s)
	if n > maxCPUID {
		return 0, fmt.Sprintf("CPU %d is above %d", n, maxCPUID)
	}
	return n, ""
}

// formatFloat writes f so that YAML reads it back as a float.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}
