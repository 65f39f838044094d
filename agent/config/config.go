// Package config holds tidal's node agent configuration: the YAML file the
// agent reads at start, its defaults and its validation.
//
// Every key is optional; an empty file gives Default(). Keys are camelCase.
// Durations are Go duration strings ("10ms", "1s"), sizes are bytes as an
// integer or a string with a suffix (see yamlconf.ParseSize), CPU lists use
// the Linux cpulist syntax ("0-3,8"). Unknown keys, wrong types and bad
// values are errors that name the file, the line and the full key path; all
// problems in a file are reported together, one per line. The YAML helpers
// and the error type are shared with the arbiter (internal/yamlconf).
//
// docs/config.md is the reference of every key.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/internal/yamlconf"
	"github.com/tidalqos/tidal/plugins"
)

// Modes of operation.
const (
	ModeStandalone = "standalone"
	ModeKubernetes = "kubernetes"
)

// Cgroup versions.
const (
	CgroupAuto = "auto"
	CgroupV1   = "v1"
	CgroupV2   = "v2"
)

// Log levels.
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"
)

// Config is the agent's configuration. The yaml tags name the keys of the
// config file; decoding is done by Parse, not by yaml.Unmarshal.
type Config struct {
	// Mode is "standalone" (default) or "kubernetes".
	Mode string `yaml:"mode"`
	// NodeName names this node; it defaults to the host name.
	NodeName string `yaml:"nodeName"`
	// Cgroup says where cgroups are and where tidal's own tree lives.
	Cgroup Cgroup `yaml:"cgroup"`
	// StateDir is where the agent persists its state (absolute path).
	StateDir string `yaml:"stateDir"`
	// SocketPath is the control socket used by the tidal CLI (absolute path).
	SocketPath string `yaml:"socketPath"`
	// MetricsAddress is the host:port of the Prometheus endpoint; "" disables it.
	MetricsAddress string `yaml:"metricsAddress"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"logLevel"`

	CPU          CPU          `yaml:"cpu"`
	Interference Interference `yaml:"interference"`
	Memory       Memory       `yaml:"memory"`
	IO           IO           `yaml:"io"`
	Loops        Loops        `yaml:"loops"`
	Eviction     Eviction     `yaml:"eviction"`
	Status       Status       `yaml:"status"`
	// Arbiter is the central arbiter the node reports to (optional).
	Arbiter Arbiter `yaml:"arbiter"`
	// Kubernetes configures the kubernetes mode (ignored standalone).
	Kubernetes Kubernetes `yaml:"kubernetes"`
	// Hooks turns on the runtime hooks that confine containers at creation.
	Hooks Hooks `yaml:"hooks"`
}

// Hooks configures the CRI proxy and the NRI plugin.
type Hooks struct {
	// CRIProxy serves a CRI socket (CRISocket) in front of the runtime's (RuntimeSocket).
	CRIProxy      bool   `yaml:"criProxy"`
	CRISocket     string `yaml:"criSocket"`
	RuntimeSocket string `yaml:"runtimeSocket"`
	// NRI registers tidal as an NRI plugin on the runtime's NRI socket.
	NRI       bool   `yaml:"nri"`
	NRISocket string `yaml:"nriSocket"`
	// Timeout bounds a hook's decision; past it the call goes on unchanged (fail-open).
	Timeout time.Duration `yaml:"timeout"`
}

// Cgroup configures the cgroup hierarchy.
type Cgroup struct {
	// Root is the name of tidal's own cgroup tree under each hierarchy: a
	// relative path without "..", such as "tidal". The reclaimed tier is beside
	// it ("tidal-reclaimed", plugins.TierPath).
	Root string `yaml:"root"`
	// MountPoint is where the cgroup file system is mounted (absolute path).
	MountPoint string `yaml:"mountPoint"`
	// Version is "auto", "v1" or "v2".
	Version string `yaml:"version"`
}

// CPU configures how CPU is lent to reclaimed work.
type CPU struct {
	// ReservedSystemCPUs are kept for the system tier; empty means the system
	// tier shares the shared pool at top weight.
	ReservedSystemCPUs cpuset.CPUSet `yaml:"reservedSystemCPUs"`
	// MinReclaimedMilliCPU is the floor of the reclaimed pool.
	MinReclaimedMilliCPU int64 `yaml:"minReclaimedMilliCPU"`
	// SafetyMarginMilliCPU is kept free above predicted online demand.
	SafetyMarginMilliCPU int64 `yaml:"safetyMarginMilliCPU"`
	// SafetyMarginRatio is kept free above predicted online demand, as a
	// fraction of that demand.
	SafetyMarginRatio float64 `yaml:"safetyMarginRatio"`
	// GrowStepMilliCPU is the most the reclaimed pool grows per slow-loop round.
	GrowStepMilliCPU int64 `yaml:"growStepMilliCPU"`
	// PeakWindow: online demand is predicted as peak usage over this window for what the node
	// publishes (Node resources, the arbiter): damped, so the scheduler does not chase every
	// dip.
	PeakWindow time.Duration `yaml:"peakWindow"`
	// LimitWindow: reclaimed work's CPU limit on the node follows online peak usage over this
	// shorter window, so offline work uses a dip within seconds; the fast path and the
	// interference feedback take it back at once. Equal to (or longer than) PeakWindow, the
	// limit is what is published.
	LimitWindow time.Duration `yaml:"limitWindow"`
	// SpikeThreshold: the fast path fires when online usage exceeds this
	// fraction of the CPU online work has not lent out.
	SpikeThreshold float64 `yaml:"spikeThreshold"`
	// CoreUtilization: under the cores mechanism online work runs on the cores it keeps,
	// where its queue grows fast with load; it keeps enough that its peak use is at most
	// this share of them, and the fast path hands a core back when its use crosses it.
	CoreUtilization float64 `yaml:"coreUtilization"`
	// PoolShrinkAfter: under the quota mechanism, the reclaimed pool keeps its CPUs this long
	// after lending fell within fewer of them; the quota takes the CPU time back at once.
	// Narrowing the pool rewrites the cpuset of every reclaimed cgroup, milliseconds of kernel
	// time with a hundred workloads, spent when online work wants the CPU, and a cut is often
	// grown back seconds later. 0 narrows at once.
	PoolShrinkAfter time.Duration `yaml:"poolShrinkAfter"`
	// Mechanism is how reclaimed work is held to what is lent on its CPUs: idle, shares
	// or quota (see plugins.CPUMechanism and docs/benchmark.md for the figures);
	// quota-on-cut, the idle class while online work is calm and the quota as well from a
	// cut until QuotaAfterCut has passed without another; or auto: the agent tries
	// AutoMechanism's candidates on this node and keeps the best.
	Mechanism string `yaml:"mechanism"`
	// ReclaimedCPUs is which CPUs reclaimed work may run on: "pool", the ceil(lent) shared
	// CPUs farthest from system ones (the cpuset holds it to what is lent while no quota
	// does); "online", every CPU online work runs on, where the idle class lets online
	// work take any CPU back at a wakeup and the quota, where the mechanism sets one, holds
	// the amount; or "auto", online where every core has one thread and pool where cores
	// have two or more (SMT: a thread beside an online one shares its core, which no CPU
	// priority takes back). Under the cores mechanism the lent cores are reclaimed work's
	// whatever this says.
	ReclaimedCPUs string `yaml:"reclaimedCPUs"`
	// QuotaAfterCut: under quota-on-cut, how long the quota holds reclaimed work to what is
	// lent after the last cut for online work's sake (the fast path, the interference
	// feedback, CPU pressure). It holds as long as lending is at its minimum, too.
	QuotaAfterCut time.Duration `yaml:"quotaAfterCut"`
	AutoMechanism AutoMechanism `yaml:"autoMechanism"`

	// CPU burst (issue 12).
	// BurstPercent is each online tier's CPU burst, a percentage (0..100) of a workload's
	// CPU limit; a workload's tidalqos.io/cpu-burst-percent overrides it.
	BurstPercent BurstPercent `yaml:"burstPercent"`
}

// MechanismAuto is the cpu.mechanism that the agent chooses by measurement.
const MechanismAuto = "auto"

// Where reclaimed work may run (cpu.reclaimedCPUs).
const (
	ReclaimedOnPool   = "pool"
	ReclaimedOnOnline = "online"
	ReclaimedAuto     = "auto"
)

// MechanismQuotaOnCut is the cpu.mechanism that the agent resolves on every pass to the idle
// class while online work is calm, or to the quota after a cut (cpu.quotaAfterCut) and while
// lending is at its minimum: reclaimed work uses the idle time beside what is lent until
// online work shows it needs the CPU back, and is then held to exactly what is lent.
const MechanismQuotaOnCut = "quota-on-cut"

// Mechanisms are the cpu.mechanism values that name one way to hold reclaimed work (every
// value but auto): the policy's own, and quota-on-cut, which switches between two of them.
func Mechanisms() []string {
	var out []string
	for _, m := range plugins.CPUMechanisms() {
		out = append(out, string(m))
	}
	return append(out, MechanismQuotaOnCut)
}

// AutoMechanism configures cpu.mechanism auto (sysadvisor/mechanism): each candidate runs for
// Trial at a time, Rounds times each, interleaved; among those under which online work's
// run-queue wait over its baseline stayed within WaitTolerance of the least (or, where online
// work has SLO probes, the share of their answers over target stayed within SLOTolerance of
// the least), the one under which the interference feedback lent the largest share of the
// usage ceiling is kept for Every.
type AutoMechanism struct {
	// Candidates is a comma-separated list of mechanisms, in order of preference (the first
	// is tried first and wins a tie).
	Candidates    string        `yaml:"candidates"`
	Trial         time.Duration `yaml:"trial"`
	Rounds        int           `yaml:"rounds"`
	Every         time.Duration `yaml:"every"`
	WaitTolerance float64       `yaml:"waitTolerance"`
	SLOTolerance  float64       `yaml:"sloTolerance"`
}

// CandidateList is Candidates split.
func (m AutoMechanism) CandidateList() []string {
	var out []string
	for _, c := range strings.Split(m.Candidates, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// BurstPercent is the CPU burst of each online tier. Reclaimed work never bursts.
type BurstPercent struct {
	System    int `yaml:"system"`
	Dedicated int `yaml:"dedicated"`
	Shared    int `yaml:"shared"`
}

// Interference configures the feedback that sizes lending by how much online work is hurt.
type Interference struct {
	// Interval is how often online work's indicators are read.
	Interval time.Duration `yaml:"interval"`
	// MinRunMilliCPU: an online workload that ran less CPU than this over an interval
	// is left out of that reading (a handful of wakeups says nothing of a ratio).
	MinRunMilliCPU int64 `yaml:"minRunMilliCPU"`
	// WaitReadings: a workload's run-queue wait is judged by the median of its readings
	// over this many intervals (1: each reading alone). One interval's wait is a small
	// sample, and a lone slow one cut lending by half.
	WaitReadings int `yaml:"waitReadings"`
	// Slack: lending grows only while every indicator is under Slack of the way from its
	// baseline (0 for an absolute target) to its target.
	Slack float64 `yaml:"slack"`
	// Cut multiplies what a NUMA node lends when an indicator crosses its target.
	Cut float64 `yaml:"cut"`
	// HoldAfterCut is the longest lending may not grow after a cut; HoldAfterFirstCut the
	// hold after a crossing that follows none within HoldAfterCut (0 or more than
	// HoldAfterCut: HoldAfterCut). Each crossing within HoldAfterCut of the last doubles the
	// hold, up to HoldAfterCut.
	HoldAfterCut      time.Duration `yaml:"holdAfterCut"`
	HoldAfterFirstCut time.Duration `yaml:"holdAfterFirstCut"`
	// BaselineFor and BaselineEvery: the agent measures each online workload's own
	// run-queue wait with nothing lent (the node lends its minimum for BaselineFor) when an
	// active workload has no baseline yet, and again every BaselineEvery (0: only then).
	// A target relative to that baseline fits workloads that wait on their own threads.
	BaselineFor   time.Duration `yaml:"baselineFor"`
	BaselineEvery time.Duration `yaml:"baselineEvery"`
	// Shared and Dedicated are the targets for online work of each tier.
	Shared    Targets `yaml:"shared"`
	Dedicated Targets `yaml:"dedicated"`
}

// Targets are the indicator levels past which a tier's online work counts as hurt; 0 turns an
// indicator off for that tier.
type Targets struct {
	// RunQueueWait is run-queue wait per unit of CPU run (/proc/<tid>/schedstat).
	RunQueueWait float64 `yaml:"runQueueWait"`
	// RunQueueWaitOverBaseline raises a workload's run-queue wait target to this many times
	// its own wait with nothing lent, once that baseline is measured; 0 keeps the absolute
	// target alone.
	RunQueueWaitOverBaseline float64 `yaml:"runQueueWaitOverBaseline"`
	// Throttled is the fraction of CFS periods in which the workload's own quota ran out.
	Throttled float64 `yaml:"throttled"`
}

// Memory configures how memory is lent and when reclaimed work is evicted.
type Memory struct {
	// ReservedSystemBytes is kept for the system.
	ReservedSystemBytes int64 `yaml:"reservedSystemBytes"`
	// MinReclaimedBytes is the floor of lent memory.
	MinReclaimedBytes int64 `yaml:"minReclaimedBytes"`
	// SafetyMarginBytes is kept free above predicted online demand.
	SafetyMarginBytes int64 `yaml:"safetyMarginBytes"`
	// GrowStepBytes is the most lent memory grows per slow-loop round.
	GrowStepBytes int64 `yaml:"growStepBytes"`
	// EvictAvailableBelowBytes: reclaimed work is evicted when MemAvailable
	// falls below this.
	EvictAvailableBelowBytes int64 `yaml:"evictAvailableBelowBytes"`
	// EvictPressureAbove: reclaimed work is evicted when memory PSI
	// "some avg10" (percent) exceeds this.
	EvictPressureAbove float64 `yaml:"evictPressureAbove"`

	// Memory QoS and page-cache-aware lending (docs/config.md).
	//
	// ThrottleMarginBytes puts reclaimed work's throttle point (v2 memory.high, v1
	// memory.soft_limit_in_bytes) this far below what is lent.
	ThrottleMarginBytes int64 `yaml:"throttleMarginBytes"`
	// OOMWait (v1): a reclaimed task at its limit waits for lending to grow instead of
	// being OOM-killed; evicted after StalledEvictAfter if lending cannot grow.
	OOMWait           bool          `yaml:"oomWait"`
	StalledEvictAfter time.Duration `yaml:"stalledEvictAfter"`
	// OnlinePageCache counts online work's active page cache as online demand, so what is
	// lent leaves it in place.
	OnlinePageCache bool `yaml:"onlinePageCache"`
}

// Loops configures the control loops.
type Loops struct {
	// SlowInterval is the period of the slow loop.
	SlowInterval time.Duration `yaml:"slowInterval"`
	// FastInterval is the period of the fast path's usage sampling.
	FastInterval time.Duration `yaml:"fastInterval"`
	// FastWindow: usage over this window drives the fast path.
	FastWindow time.Duration `yaml:"fastWindow"`
	// FastBurstWindow: online work that used all the CPU it kept over this shorter window
	// also shrinks lending at once (0: off). It sees a sudden spike sooner than FastWindow's
	// threshold can.
	FastBurstWindow time.Duration `yaml:"fastBurstWindow"`
	// MetricsStaleAfter: older metrics make the reclaimed pool fall to its
	// minimum.
	MetricsStaleAfter time.Duration `yaml:"metricsStaleAfter"`
	// PSIStallThreshold and PSIWindow make the CPU PSI trigger
	// ("some <threshold> <window>"); PSITrigger turns it on.
	PSIStallThreshold time.Duration `yaml:"psiStallThreshold"`
	PSIWindow         time.Duration `yaml:"psiWindow"`
	PSITrigger        bool          `yaml:"psiTrigger"`
}

// Eviction configures how reclaimed work is evicted.
type Eviction struct {
	// GracePeriod is the time between SIGTERM and SIGKILL.
	GracePeriod time.Duration `yaml:"gracePeriod"`
	// CoolDown is the least time between two evictions.
	CoolDown time.Duration `yaml:"coolDown"`

	// Starvation eviction (issue 12).
	// StarvationFloor: reclaimed work whose CPU satisfaction (CPU it got / CPU it was ready
	// to run, within what it is allowed) stays under this for StarvationWindow is evicted;
	// 0 turns it off.
	StarvationFloor  float64       `yaml:"starvationFloor"`
	StarvationWindow time.Duration `yaml:"starvationWindow"`
}

// Arbiter says where the node reports what it can lend and gets its lease.
type Arbiter struct {
	// URL is the arbiter's base URL; "" means no arbiter: the node lends by its own advisor.
	URL string `yaml:"url"`
	// TokenFile holds this node's bearer token (required with URL).
	TokenFile string `yaml:"tokenFile"`
	// ReportInterval is how often the node reports.
	ReportInterval time.Duration `yaml:"reportInterval"`
	// NodeLabels are this node's labels for the arbiter's lending rules, "k=v,k2=v2".
	NodeLabels string `yaml:"nodeLabels"`
}

// Cgroup drivers of the kubelet.
const (
	DriverAuto     = "auto"
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// Kubernetes configures how the agent finds pods, their cgroups and its Node.
type Kubernetes struct {
	// Kubeconfig is a kubeconfig file; "" means the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig"`
	// CgroupDriver is the kubelet's: auto, cgroupfs or systemd.
	CgroupDriver string `yaml:"cgroupDriver"`
	// CgroupRoot is the kubelet's --cgroup-root, relative to each hierarchy.
	CgroupRoot string `yaml:"cgroupRoot"`
	// CPUManagerStateFile is the kubelet CPU manager's checkpoint: CPUs it gives
	// exclusively count as dedicated and tidal never writes their cpusets.
	CPUManagerStateFile string `yaml:"cpuManagerStateFile"`
	// TierPolicy is the ConfigMap ("namespace/name") holding the tier policy.
	TierPolicy string `yaml:"tierPolicy"`
	// PublishMinChange and PublishMaxAge damp the Node's reclaimed capacity: a
	// new value is published when it moved by this fraction of the published
	// one, or when the published one is older than PublishMaxAge.
	PublishMinChange float64       `yaml:"publishMinChange"`
	PublishMaxAge    time.Duration `yaml:"publishMaxAge"`
}

// Status configures what `tidal status` shows.
type Status struct {
	// ActionHistory is how many recent actions are kept.
	ActionHistory int `yaml:"actionHistory"`
}

// Default returns the default configuration. NodeName is the host name, or
// "localhost" when it cannot be read.
func Default() Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return Config{
		Mode:     ModeStandalone,
		NodeName: host,
		Cgroup: Cgroup{
			Root:       "tidal",
			MountPoint: "/sys/fs/cgroup",
			Version:    CgroupAuto,
		},
		StateDir:       "/var/lib/tidal",
		SocketPath:     "/run/tidal/tidal.sock",
		MetricsAddress: "127.0.0.1:9477",
		LogLevel:       LogInfo,
		CPU: CPU{
			ReservedSystemCPUs:   cpuset.New(),
			MinReclaimedMilliCPU: 100,
			SafetyMarginMilliCPU: 250,
			SafetyMarginRatio:    0.10,
			GrowStepMilliCPU:     250,
			PeakWindow:           30 * time.Second,
			LimitWindow:          5 * time.Second,
			SpikeThreshold:       0.8,
			CoreUtilization:      0.5,
			PoolShrinkAfter:      0,
			// Measured (docs/benchmark.md#quota-on-cut): on this kind of machine the quota
			// only from a cut lent 1.25-1.8x the always-on quota's offline work with online
			// p99 within its run-to-run spread; idle alone did not hold p99.
			Mechanism:     MechanismQuotaOnCut,
			ReclaimedCPUs: ReclaimedAuto,
			AutoMechanism: AutoMechanism{
				// The two that measured best: cores for the tail, quota-on-cut for what
				// is lent (docs/benchmark.md#xeon480). cores first, as it is tried first.
				Candidates: string(plugins.MechanismCores) + "," + MechanismQuotaOnCut,
				Trial:      time.Minute, Rounds: 2, Every: 6 * time.Hour,
				// Sharing a core raised web servers' wait 1.2-3x over whole cores of their
				// own, and their p99 from within the noise to 1.6x (docs/benchmark.md#auto-tail).
				WaitTolerance: 0.2,
				// An SLO probe is the operator's own word: five answers in a hundred more
				// over it is past the noise of a candidate's 2 min of trials (a probe answers
				// every interference.interval: about 240 answers).
				SLOTolerance: 0.05,
			},
			QuotaAfterCut: time.Second,
			BurstPercent:  BurstPercent{Shared: 50},
		},
		Interference: Interference{
			Interval:          500 * time.Millisecond,
			MinRunMilliCPU:    20,
			WaitReadings:      3,
			Slack:             0.5,
			Cut:               0.5,
			HoldAfterCut:      10 * time.Second,
			HoldAfterFirstCut: 2500 * time.Millisecond,
			BaselineFor:       2 * time.Second,
			BaselineEvery:     10 * time.Minute,
			// A workload's own threads wait too (the Go server of the benchmark 0.33 per
			// unit run alone, nginx 0.05): the target is the larger of the absolute one
			// and a multiple of its own baseline (docs/benchmark.md).
			Shared:    Targets{RunQueueWait: 0.25, RunQueueWaitOverBaseline: 1.5},
			Dedicated: Targets{RunQueueWait: 0.10, RunQueueWaitOverBaseline: 1.25},
		},
		IO: defaultIO(),
		Memory: Memory{
			ReservedSystemBytes:      1 * yamlconf.Gi,
			MinReclaimedBytes:        256 * yamlconf.Mi,
			SafetyMarginBytes:        512 * yamlconf.Mi,
			GrowStepBytes:            1 * yamlconf.Gi,
			EvictAvailableBelowBytes: 512 * yamlconf.Mi,
			EvictPressureAbove:       10,
			// Memory QoS.
			ThrottleMarginBytes: 256 * yamlconf.Mi,
			OOMWait:             true,
			StalledEvictAfter:   10 * time.Second,
			OnlinePageCache:     true,
		},
		Loops: Loops{
			SlowInterval:      time.Second,
			FastInterval:      10 * time.Millisecond,
			FastWindow:        30 * time.Millisecond,
			FastBurstWindow:   10 * time.Millisecond,
			MetricsStaleAfter: 5 * time.Second,
			PSIStallThreshold: 100 * time.Millisecond,
			PSIWindow:         2 * time.Second,
			PSITrigger:        true,
		},
		Eviction: Eviction{
			GracePeriod: 5 * time.Second,
			CoolDown:    10 * time.Second,
			// Starvation eviction (issue 12): off unless configured.
			StarvationWindow: 10 * time.Minute,
		},
		Status: Status{
			ActionHistory: 100,
		},
		Arbiter: Arbiter{
			ReportInterval: 10 * time.Second,
		},
		Kubernetes: Kubernetes{
			CgroupDriver:        DriverAuto,
			CgroupRoot:          "/",
			CPUManagerStateFile: "/var/lib/kubelet/cpu_manager_state",
			TierPolicy:          "tidal-system/tidal-tier-policy",
			PublishMinChange:    0.1,
			PublishMaxAge:       time.Minute,
		},
		Hooks: Hooks{
			CRISocket:     "/run/tidal/cri.sock",
			RuntimeSocket: "/run/containerd/containerd.sock",
			NRISocket:     "/var/run/nri/nri.sock",
			Timeout:       100 * time.Millisecond,
		},
	}
}

// Load reads the config file at path and applies it on top of Default().
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Error is one problem in a config: where it is and what is wrong. Parse and Validate return
// one Error per problem, joined with errors.Join.
type Error = yamlconf.Error

// Parse decodes a config file on top of Default() and validates the result.
// name (usually the file path) is used in error messages. On error the
// returned Config is the zero value and the error lists every problem found,
// one per line.
func Parse(name string, data []byte) (cfg Config, err error) {
	defer func() {
		// The YAML library is not supposed to panic; if it does on some odd
		// input, report that instead of taking the agent down.
		if r := recover(); r != nil {
			cfg, err = Config{}, &Error{File: name, Msg: fmt.Sprintf("cannot parse YAML: %v", r)}
		}
	}()

	cfg = Default()
	root, perr := parseYAML(name, data)
	if perr != nil {
		return Config{}, perr
	}
	d := &decoder{file: name, lines: map[string]int{}, failed: map[string]bool{}}
	if root != nil {
		d.mapping(root, "", schema, &cfg)
	}
	for _, p := range cfg.problems() {
		if d.failed[p.key] || dependsOn(p, d.failed) {
			continue // already reported, and the default stayed in place
		}
		line := d.lines[p.key]
		for _, k := range p.related {
			if line != 0 {
				break
			}
			line = d.lines[k]
		}
		d.errs = append(d.errs, &Error{File: name, Line: line, Key: p.key, Msg: p.msg})
	}
	if len(d.errs) > 0 {
		return Config{}, yamlconf.JoinErrors(d.errs)
	}
	return cfg, nil
}

// parseYAML returns the top-level node of the single document in data, or
// nil for an empty document.
func parseYAML(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlconf.SyntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: extra.Line, Msg: "more than one YAML document: want a single mapping of settings"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlconf.SyntaxError(name, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	root = yamlconf.ResolveAlias(root)
	if yamlconf.IsNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Msg: fmt.Sprintf("got %s at top level: want a mapping of settings such as \"mode: standalone\"", yamlconf.DescribeNode(root))}
	}
	return root, nil
}

// KeyErrorf is a problem with key that only the host shows, found after the file was read (at
// start: a disk that is not there, a token file that cannot be read). PlaceInFile points it at
// the line that set the key.
func KeyErrorf(key, format string, args ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// PlaceInFile gives a problem that names a key but no file (one found only at start, such as
// reserved CPUs that are not online) the file and line where the config file at path sets that
// key, so the operator is pointed at the line to change as with any other problem. err is a
// *Error or errors joined by Validate; a problem whose key the file does not set, and any other
// error, comes back as it was.
func PlaceInFile(err error, path string) error {
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return err
	}
	root, perr := parseYAML(path, data)
	if perr != nil || root == nil {
		return err
	}
	d := &decoder{file: path, lines: map[string]int{}, failed: map[string]bool{}}
	scratch := Default()
	d.mapping(root, "", schema, &scratch)
	return placed(err, path, d.lines)
}

func placed(err error, path string, lines map[string]int) error {
	switch e := err.(type) {
	case *Error:
		if line := lines[e.Key]; e.File == "" && e.Key != "" && line != 0 {
			return &Error{File: path, Line: line, Key: e.Key, Msg: e.Msg}
		}
	case interface{ Unwrap() []error }:
		var all []error
		for _, inner := range e.Unwrap() {
			all = append(all, placed(inner, path, lines))
		}
		return errors.Join(all...)
	}
	return err
}
