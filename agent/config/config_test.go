package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

func TestDefaultValidates(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.NodeName == "" {
		t.Error("Default().NodeName is empty")
	}
	if !c.CPU.ReservedSystemCPUs.IsEmpty() {
		t.Errorf("default reservedSystemCPUs = %v, want empty", c.CPU.ReservedSystemCPUs)
	}
}

func TestEmptyFileGivesDefaults(t *testing.T) {
	for _, in := range []string{"", "\n\n", "# only a comment\n", "---\n", "---\n...\n", "~\n", "cpu:\nmemory: ~\n"} {
		c, err := Parse("tidal.yaml", []byte(in))
		if err != nil {
			t.Errorf("Parse(%q) error: %v", in, err)
			continue
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) = %+v, want defaults", in, c)
		}
	}
}

const fullExample = `
mode: kubernetes
nodeName: node-a
cgroup:
  root: qos/tidal
  mountPoint: /mnt/cgroup
  version: v2
stateDir: /srv/tidal
socketPath: /var/run/tidal.sock
metricsAddress: ":9100"
logLevel: debug
cpu:
  reservedSystemCPUs: 0-1,8
  minReclaimedMilliCPU: 500
  safetyMarginMilliCPU: 0
  safetyMarginRatio: 0.25
  growStepMilliCPU: 1000
  peakWindow: 1m
  spikeThreshold: 1
  coreUtilization: 0.6
  mechanism: auto
  reclaimedCPUs: online
  quotaAfterCut: 3s
  autoMechanism:
    candidates: idle, quota
    trial: 30s
    rounds: 3
    every: 0s
    waitTolerance: 0.5
    sloTolerance: 0.1
  burstPercent:
    system: 10
    dedicated: 20
    shared: 100
interference:
  interval: 250ms
  minRunMilliCPU: 5
  waitReadings: 4
  slack: 0.6
  cut: 0.25
  holdAfterCut: 30s
  holdAfterFirstCut: 4s
  baselineFor: 3s
  baselineEvery: 0s
  shared:
    runQueueWait: 0.3
    runQueueWaitOverBaseline: 2
    throttled: 0.5
  dedicated:
    runQueueWait: 0.05
    runQueueWaitOverBaseline: 0
memory:
  reservedSystemBytes: 2Gi
  minReclaimedBytes: 0
  safetyMarginBytes: 1.5G
  growStepBytes: 134217728
  evictAvailableBelowBytes: "100Mi"
  evictPressureAbove: 25.5
  throttleMarginBytes: 512Mi
  oomWait: false
  stalledEvictAfter: 30s
  onlinePageCache: false
io:
  enabled: true
  nodeDisks: false
  devices:
    - device: "7:3"
      writeBps: 100Mi
      writeIOPS: 800
  floorBps: 4Mi
  floorIOPS: 32
  marginRatio: 0.5
  growStepRatio: 0.2
  peakWindow: 1m
  pressureThreshold: 15
  latencyThreshold: 20ms
  holdAfterCut: 5s
  interval: 250ms
loops:
  slowInterval: 2s
  fastInterval: 5ms
  fastWindow: 20ms
  fastBurstWindow: 15ms
  metricsStaleAfter: 10s
  psiStallThreshold: 100ms
  psiWindow: 1s
  psiTrigger: false
eviction:
  gracePeriod: 0s
  coolDown: 1m30s
  starvationFloor: 0.1
  starvationWindow: 5m
status:
  actionHistory: 20
arbiter:
  url: https://arbiter.example:9480
  tokenFile: /etc/tidal/token
  reportInterval: 30s
  nodeLabels: pool=batch,zone=a
kubernetes:
  kubeconfig: /etc/kubernetes/tidal.conf
  cgroupDriver: systemd
  cgroupRoot: /custom
  cpuManagerStateFile: ""
  tierPolicy: qos/tiers
  publishMinChange: 0.05
  publishMaxAge: 30s
hooks:
  criProxy: true
  criSocket: /run/tidal/cri.sock
  runtimeSocket: /run/k3s/containerd/containerd.sock
  nri: true
  nriSocket: /run/nri/nri.sock
  timeout: 50ms
`

func fullExampleConfig() Config {
	return Config{
		Mode:           ModeKubernetes,
		NodeName:       "node-a",
		Cgroup:         Cgroup{Root: "qos/tidal", MountPoint: "/mnt/cgroup", Version: CgroupV2},
		StateDir:       "/srv/tidal",
		SocketPath:     "/var/run/tidal.sock",
		MetricsAddress: ":9100",
		LogLevel:       LogDebug,
		CPU: CPU{
			ReservedSystemCPUs:   cpuset.New(0, 1, 8),
			MinReclaimedMilliCPU: 500,
			SafetyMarginMilliCPU: 0,
			SafetyMarginRatio:    0.25,
			GrowStepMilliCPU:     1000,
			PeakWindow:           time.Minute,
			LimitWindow:          5 * time.Second,
			SpikeThreshold:       1,
			CoreUtilization:      0.6,
			Mechanism:            "auto",
			ReclaimedCPUs:        "online",
			QuotaAfterCut:        3 * time.Second,
			AutoMechanism:        AutoMechanism{Candidates: "idle, quota", Trial: 30 * time.Second, Rounds: 3, WaitTolerance: 0.5, SLOTolerance: 0.1},
			BurstPercent:         BurstPercent{System: 10, Dedicated: 20, Shared: 100},
		},
		Interference: Interference{Interval: 250 * time.Millisecond, MinRunMilliCPU: 5, WaitReadings: 4, Slack: 0.6, Cut: 0.25, HoldAfterCut: 30 * time.Second, HoldAfterFirstCut: 4 * time.Second,
			BaselineFor: 3 * time.Second, Shared: Targets{RunQueueWait: 0.3, RunQueueWaitOverBaseline: 2, Throttled: 0.5}, Dedicated: Targets{RunQueueWait: 0.05}},
		Memory: Memory{
			ReservedSystemBytes:      2 * yamlconf.Gi,
			MinReclaimedBytes:        0,
			SafetyMarginBytes:        1_500_000_000,
			GrowStepBytes:            128 * yamlconf.Mi,
			EvictAvailableBelowBytes: 100 * yamlconf.Mi,
			EvictPressureAbove:       25.5,
			ThrottleMarginBytes:      512 * yamlconf.Mi,
			StalledEvictAfter:        30 * time.Second,
		},
		IO: IO{Enabled: true, Devices: []IODevice{{Device: "7:3", WriteBps: 100 * yamlconf.Mi, WriteIOPS: 800}},
			FloorBps: 4 * yamlconf.Mi, FloorIOPS: 32, MarginRatio: 0.5, GrowStepRatio: 0.2, PeakWindow: time.Minute,
			PressureThreshold: 15, LatencyThreshold: 20 * time.Millisecond, HoldAfterCut: 5 * time.Second, Interval: 250 * time.Millisecond},
		Loops: Loops{
			SlowInterval:      2 * time.Second,
			FastInterval:      5 * time.Millisecond,
			FastWindow:        20 * time.Millisecond,
			FastBurstWindow:   15 * time.Millisecond,
			MetricsStaleAfter: 10 * time.Second,
			PSIStallThreshold: 100 * time.Millisecond,
			PSIWindow:         time.Second,
			PSITrigger:        false,
		},
		Eviction: Eviction{GracePeriod: 0, CoolDown: 90 * time.Second, StarvationFloor: 0.1, StarvationWindow: 5 * time.Minute},
		Arbiter:  Arbiter{URL: "https://arbiter.example:9480", TokenFile: "/etc/tidal/token", ReportInterval: 30 * time.Second, NodeLabels: "pool=batch,zone=a"},
		Status:   Status{ActionHistory: 20},
		Kubernetes: Kubernetes{Kubeconfig: "/etc/kubernetes/tidal.conf", CgroupDriver: DriverSystemd, CgroupRoot: "/custom",
			TierPolicy: "qos/tiers", PublishMinChange: 0.05, PublishMaxAge: 30 * time.Second},
		Hooks: Hooks{CRIProxy: true, CRISocket: "/run/tidal/cri.sock", RuntimeSocket: "/run/k3s/containerd/containerd.sock",
			NRI: true, NRISocket: "/run/nri/nri.sock", Timeout: 50 * time.Millisecond},
	}
}

func TestFullExample(t *testing.T) {
	got, err := Parse("full.yaml", []byte(fullExample))
	if err != nil {
		t.Fatal(err)
	}
	want := fullExampleConfig()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse(full example):\n got %+v\nwant %+v", got, want)
	}
}

// TestMarshalRoundTrip: what MarshalYAML writes, Parse reads back unchanged.
func TestMarshalRoundTrip(t *testing.T) {
	for name, c := range map[string]Config{"default": Default(), "full": fullExampleConfig()} {
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", name, err)
		}
		back, err := Parse(name+".yaml", out)
		if err != nil {
			t.Fatalf("%s: Parse(Marshal(c)): %v\n%s", name, err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Errorf("%s: round trip changed the config:\n got %+v\nwant %+v\n%s", name, back, c, out)
		}
	}
}

// TestSchemaCoversConfig: every field of Config has a key in the schema,
// named after its yaml tag, and every key points into Config.
func TestSchemaCoversConfig(t *testing.T) {
	var fromStruct []string
	var walkType func(prefix string, typ reflect.Type)
	walkType = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := joinKey(prefix, f.Tag.Get("yaml"))
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[cpuset.CPUSet]() {
				walkType(key, f.Type)
				continue
			}
			fromStruct = append(fromStruct, key)
		}
	}
	walkType("", reflect.TypeFor[Config]())

	var fromSchema []string
	var walkSchema func(prefix string, entries []*entry)
	walkSchema = func(prefix string, entries []*entry) {
		for _, e := range entries {
			key := joinKey(prefix, e.key)
			if e.kind == kindSection {
				walkSchema(key, e.children)
				continue
			}
			fromSchema = append(fromSchema, key)
		}
	}
	walkSchema("", schema)
	if !reflect.DeepEqual(fromStruct, fromSchema) {
		t.Fatalf("schema keys differ from Config fields:\nstruct %v\nschema %v", fromStruct, fromSchema)
	}

	// Each entry's pointer must be a distinct field.
	var c Config
	seen := map[any]string{}
	var walkPtr func(entries []*entry)
	walkPtr = func(entries []*entry) {
		for _, e := range entries {
			if e.kind == kindSection {
				walkPtr(e.children)
				continue
			}
			p := e.ptr(&c)
			if other, dup := seen[p]; dup {
				t.Errorf("keys %s and %s share a field", other, e.key)
			}
			seen[p] = e.key
		}
	}
	walkPtr(schema)
}

func TestDeployExample(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "standalone", "tidal.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("%s does not spell out the defaults:\n got %+v\nwant %+v", path, c, Default())
	}
	// docs/config.md shows the same file.
	example, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(example)+"```\n") {
		t.Errorf("docs/config.md does not contain %s verbatim", path)
	}
	// Every key is documented.
	for _, key := range allKeys() {
		if !strings.Contains(string(doc), "| `"+key+"` |") {
			t.Errorf("docs/config.md has no table row for %s", key)
		}
	}
}

func allKeys() []string {
	var keys []string
	var walk func(prefix string, entries []*entry)
	walk = func(prefix string, entries []*entry) {
		for _, e := range entries {
			key := joinKey(prefix, e.key)
			if e.kind == kindSection {
				walk(key, e.children)
			} else {
				keys = append(keys, key)
			}
		}
	}
	walk("", schema)
	return keys
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Load(missing) error = %v, want one naming the file", err)
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tidal.yaml")
	if err := os.WriteFile(path, []byte("logLevel: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + `:1: logLevel: "loud" is not allowed: want one of debug, info, warn, error`
	if err == nil || err.Error() != want {
		t.Fatalf("Load error = %v, want %s", err, want)
	}
}

func TestErrors(t *testing.T) {
	topKeys := "mode, nodeName, cgroup, stateDir, socketPath, metricsAddress, logLevel, cpu, interference, memory, io, loops, eviction, status, arbiter, kubernetes, hooks"
	cpuKeys := "reservedSystemCPUs, minReclaimedMilliCPU, safetyMarginMilliCPU, safetyMarginRatio, growStepMilliCPU, peakWindow, limitWindow, spikeThreshold, coreUtilization, poolShrinkAfter, mechanism, reclaimedCPUs, quotaAfterCut, autoMechanism, burstPercent"
	sizeGt0 := `a size > 0: bytes as an integer, or a number with a suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000), such as "1Gi"`
	tests := []struct {
		name string
		in   string
		want string // the whole error
	}{
		{"unknown top-level key", "mode: standalone\nfoo: 1\n",
			"tidal.yaml:2: foo: unknown key: want one of " + topKeys},
		{"unknown nested key", "cpu:\n  growStep: 5\n",
			"tidal.yaml:2: cpu.growStep: unknown key (did you mean growStepMilliCPU?): want one of " + cpuKeys},
		{"wrong case key", "LogLevel: info\n",
			"tidal.yaml:1: LogLevel: unknown key (did you mean logLevel?): want one of " + topKeys},
		{"flattened key", "cpu.growStepMilliCPU: 5\n",
			"tidal.yaml:1: cpu.growStepMilliCPU: unknown key (a dotted key is not a path: write cpu: on its own line and growStepMilliCPU: indented below it): want one of " + topKeys},
		{"merge key", "base: &b {mode: standalone}\n<<: *b\n",
			"tidal.yaml:1: base: unknown key: want one of " + topKeys + "\n" +
				"tidal.yaml:2: <<: unknown key (YAML merge keys are not supported): want one of " + topKeys},
		{"wrong type int", "cpu:\n  growStepMilliCPU: lots\n",
			`tidal.yaml:2: cpu.growStepMilliCPU: "lots" is not an integer: want an integer > 0`},
		{"float for int", "status:\n  actionHistory: 1.5\n",
			`tidal.yaml:2: status.actionHistory: 1.5 is not an integer: want an integer >= 1`},
		{"quoted int", "status:\n  actionHistory: \"5\"\n",
			`tidal.yaml:2: status.actionHistory: "5" is not an integer: want an integer >= 1`},
		{"wrong type bool", "loops:\n  psiTrigger: yes\n",
			`tidal.yaml:2: loops.psiTrigger: "yes" is not a boolean: want true or false`},
		{"wrong type float", "cpu:\n  spikeThreshold: high\n",
			`tidal.yaml:2: cpu.spikeThreshold: "high" is not a number: want a number in (0, 1]`},
		{"list for string", "logLevel: [info]\n",
			`tidal.yaml:1: logLevel: got a list: want one of debug, info, warn, error`},
		{"scalar for section", "cpu: 4\n",
			"tidal.yaml:1: cpu: got 4: want a mapping with keys " + cpuKeys},
		{"missing value", "stateDir:\n",
			`tidal.yaml:1: stateDir: missing value: want an absolute path such as "/var/lib/tidal"`},
		{"starvation floor of 1", "eviction:\n  starvationFloor: 1\n",
			`tidal.yaml:2: eviction.starvationFloor: 1 is out of range: want a number in [0, 1) (0: off)`},
		{"starvation window under the slow loop", "eviction:\n  starvationWindow: 100ms\n",
			`tidal.yaml:2: eviction.starvationWindow: 100ms is out of range: want a duration >= loops.slowInterval (1s), such as "10m"`},
		{"burst above the quota", "cpu:\n  burstPercent:\n    shared: 150\n",
			`tidal.yaml:3: cpu.burstPercent.shared: 150 is out of range: want an integer in [0, 100] (a percentage of the CPU limit; the kernel takes no burst above it)`},
		{"burst for reclaimed", "cpu:\n  burstPercent:\n    reclaimed: 10\n",
			"tidal.yaml:3: cpu.burstPercent.reclaimed: unknown key: want one of system, dedicated, shared"},
		{"out of range float", "cpu:\n  spikeThreshold: 1.7\n",
			`tidal.yaml:2: cpu.spikeThreshold: 1.7 is out of range: want a number in (0, 1]`},
		{"NaN", "cpu:\n  safetyMarginRatio: .nan\n",
			`tidal.yaml:2: cpu.safetyMarginRatio: NaN is out of range: want a number in [0, 1]`},
		{"out of range int", "cpu:\n  minReclaimedMilliCPU: 5\n",
			`tidal.yaml:2: cpu.minReclaimedMilliCPU: 5 is out of range: want an integer >= 10`},
		{"int overflow", "cpu:\n  growStepMilliCPU: 99999999999999999999\n",
			`tidal.yaml:2: cpu.growStepMilliCPU: 99999999999999999999 is not an integer: want an integer > 0`},
		{"bad enum", "mode: cluster\n",
			`tidal.yaml:1: mode: "cluster" is not allowed: want one of standalone, kubernetes`},
		{"bad duration", "cpu:\n  peakWindow: 30 seconds\n",
			`tidal.yaml:2: cpu.peakWindow: "30 seconds" is not a duration: want a duration >= 1s, such as "30s"`},
		{"duration without unit", "eviction:\n  coolDown: 10\n",
			`tidal.yaml:2: eviction.coolDown: 10 is not a duration (a unit is required): want a duration >= 0, such as "10s"`},
		{"negative duration", "eviction:\n  gracePeriod: -1s\n",
			`tidal.yaml:2: eviction.gracePeriod: -1s is out of range: want a duration >= 0, such as "5s"`},
		{"duration out of range", "loops:\n  slowInterval: 2m\n",
			`tidal.yaml:2: loops.slowInterval: 2m0s is out of range: want a duration in [100ms, 1m], such as "1s"`},
		{"bad size suffix", "memory:\n  growStepBytes: 1GB\n",
			`tidal.yaml:2: memory.growStepBytes: "1GB" is not a valid size (unknown suffix "GB"): want ` + sizeGt0},
		{"fractional bytes", "memory:\n  growStepBytes: 1.5\n",
			`tidal.yaml:2: memory.growStepBytes: 1.5 is not a valid size: want ` + sizeGt0},
		{"zero size", "memory:\n  growStepBytes: 0\n",
			`tidal.yaml:2: memory.growStepBytes: 0 is out of range: want ` + sizeGt0},
		{"bad cpulist", "cpu:\n  reservedSystemCPUs: 0-3,x\n",
			`tidal.yaml:2: cpu.reservedSystemCPUs: "0-3,x" is not a valid CPU list ("x" is not a CPU number or range): want a Linux CPU list such as "0-1" or "0,2,4-7", or "" for none`},
		{"reversed cpulist", "cpu:\n  reservedSystemCPUs: 3-1\n",
			`tidal.yaml:2: cpu.reservedSystemCPUs: "3-1" is not a valid CPU list (range "3-1" goes down): want a Linux CPU list such as "0-1" or "0,2,4-7", or "" for none`},
		{"huge cpulist", "cpu:\n  reservedSystemCPUs: 0-4000000000\n",
			`tidal.yaml:2: cpu.reservedSystemCPUs: "0-4000000000" is not a valid CPU list (CPU 4000000000 is above 8191): want a Linux CPU list such as "0-1" or "0,2,4-7", or "" for none`},
		{"bad address", "metricsAddress: localhost\n",
			`tidal.yaml:1: metricsAddress: "localhost" is not allowed: want host:port such as "127.0.0.1:9477" or ":9477", or "" to disable`},
		{"bad port", "metricsAddress: localhost:http\n",
			`tidal.yaml:1: metricsAddress: "localhost:http" is not allowed: want host:port such as "127.0.0.1:9477" or ":9477", or "" to disable`},
		{"cgroup root escapes", "cgroup:\n  root: ../tidal\n",
			`tidal.yaml:2: cgroup.root: "../tidal" is not allowed: want a relative path without "..", such as "tidal"`},
		{"cgroup root absolute", "cgroup:\n  root: /tidal\n",
			`tidal.yaml:2: cgroup.root: "/tidal" is not allowed: want a relative path without "..", such as "tidal"`},
		{"relative state dir", "stateDir: var/lib/tidal\n",
			`tidal.yaml:1: stateDir: "var/lib/tidal" is not allowed: want an absolute path such as "/var/lib/tidal"`},
		{"cross-field on the key that is set", "loops:\n  fastInterval: 2s\n",
			`tidal.yaml:2: loops.fastInterval: 2s is out of range: want a duration >= 1ms and < loops.slowInterval (1s)`},
		{"cross-field on the related key", "loops:\n  slowInterval: 10s\n  psiWindow: 10s\n",
			`tidal.yaml:2: loops.metricsStaleAfter: 5s is out of range: want a duration > loops.slowInterval (10s)`},
		{"cross-field not checked against a bad key", "loops:\n  slowInterval: 2\n  fastInterval: 2s\n",
			`tidal.yaml:2: loops.slowInterval: 2 is not a duration (a unit is required): want a duration in [100ms, 1m], such as "1s"`},
		{"cross-field with defaults only on the other side", "loops:\n  psiWindow: 10s\n  psiStallThreshold: 11s\n",
			`tidal.yaml:3: loops.psiStallThreshold: 11s is out of range: want a duration > 0 and <= loops.psiWindow (10s)`},
		{"unknown auto candidate", "cpu:\n  autoMechanism:\n    candidates: quota,fast\n",
			`tidal.yaml:3: cpu.autoMechanism.candidates: "quota,fast" is not allowed: want a comma-separated list of distinct mechanisms (idle, shares, quota, cores, quota-on-cut), such as "quota,idle"`},
		{"negative wait tolerance", "cpu:\n  autoMechanism:\n    waitTolerance: -0.1\n",
			`tidal.yaml:3: cpu.autoMechanism.waitTolerance: -0.1 is out of range: want a number in [0, 100]`},
		{"SLO tolerance over one", "cpu:\n  autoMechanism:\n    sloTolerance: 5\n",
			`tidal.yaml:3: cpu.autoMechanism.sloTolerance: 5 is out of range: want a share in [0, 1]`},
		{"no wait readings", "interference:\n  waitReadings: 0\n",
			`tidal.yaml:2: interference.waitReadings: 0 is out of range: want an integer in [1, 20]`},
		{"baseline factor under 1", "interference:\n  shared:\n    runQueueWaitOverBaseline: 0.5\n",
			`tidal.yaml:3: interference.shared.runQueueWaitOverBaseline: 0.5 is out of range: want 0 (off) or a number in [1, 100] (times the workload's own run-queue wait with nothing lent)`},
		{"baseline shorter than 3 readings", "interference:\n  interval: 1s\n  baselineFor: 2s\n",
			`tidal.yaml:3: interference.baselineFor: 2s is out of range: want 0 (no baselines) or a duration in [1s, 1m] and >= 3 x interference.interval (1s), to take readings`},
		{"duplicate key", "logLevel: info\nlogLevel: debug\n",
			`tidal.yaml:2: logLevel: duplicate key: first set at line 1`},
		{"not a mapping", "- mode\n",
			`tidal.yaml:1: got a list at top level: want a mapping of settings such as "mode: standalone"`},
		{"two documents", "mode: standalone\n---\nmode: kubernetes\n",
			`tidal.yaml:2: more than one YAML document: want a single mapping of settings`},
		{"syntax error", "cpu:\n  spikeThreshold: [1\nmode: x\n",
			`tidal.yaml:2: invalid YAML: did not find expected ',' or ']'`},
		{"syntax error on line 1", "mode: a: b\n",
			`tidal.yaml:1: invalid YAML: mapping values are not allowed in this context`},
		{"syntax error, scanner", "mode: a\n b: 2\n",
			`tidal.yaml:2: invalid YAML: mapping values are not allowed in this context`},
		{"syntax error, parser", "mode: a\nlogLevel: info\n- x\n",
			`tidal.yaml:3: invalid YAML: did not find expected key`},
		{"unknown anchor", "mode: *nope\n",
			`tidal.yaml: invalid YAML: unknown anchor 'nope' referenced`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("tidal.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %s", tt.in, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q) error:\n got %s\nwant %s", tt.in, err, tt.want)
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("Parse returned a config with its error: %+v", c)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "tidal.yaml" {
				t.Errorf("error %v is not an *Error for tidal.yaml", err)
			}
		})
	}
}

func TestSeveralErrorsReportedTogether(t *testing.T) {
	in := `mode: standalone
logLevel: loud
cpu:
  spikeThreshold: 0
  bogus: 1
  peakWindow: 10
memory:
  growStepBytes: 12X
loops:
  fastInterval: 5s
`
	_, err := Parse("tidal.yaml", []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`tidal.yaml:2: logLevel: "loud" is not allowed: want one of debug, info, warn, error`,
		`tidal.yaml:4: cpu.spikeThreshold: 0 is out of range: want a number in (0, 1]`,
		`tidal.yaml:5: cpu.bogus: unknown key: want one of reservedSystemCPUs, minReclaimedMilliCPU, safetyMarginMilliCPU, safetyMarginRatio, growStepMilliCPU, peakWindow, limitWindow, spikeThreshold, coreUtilization, poolShrinkAfter, mechanism, reclaimedCPUs, quotaAfterCut, autoMechanism, burstPercent`,
		`tidal.yaml:6: cpu.peakWindow: 10 is not a duration (a unit is required): want a duration >= 1s, such as "30s"`,
		`tidal.yaml:8: memory.growStepBytes: "12X" is not a valid size (unknown suffix "X"): want a size > 0: bytes as an integer, or a number with a suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000), such as "1Gi"`,
		`tidal.yaml:10: loops.fastInterval: 5s is out of range: want a duration >= 1ms and < loops.slowInterval (1s)`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	// Each problem is its own *Error.
	var n int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *Error
		if errors.As(e, &fe) && fe.Line > 0 && fe.Key != "" {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d *Error values with line and key, want %d", n, len(want))
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.LogLevel = "trace"
	c.CPU.SpikeThreshold = 1.7
	c.Loops.FastInterval = 2 * time.Second
	c.Status.ActionHistory = 0
	want := strings.Join([]string{
		`logLevel: "trace" is not allowed: want one of debug, info, warn, error`,
		`cpu.spikeThreshold: 1.7 is out of range: want a number in (0, 1]`,
		`loops.fastInterval: 2s is out of range: want a duration >= 1ms and < loops.slowInterval (1s)`,
		`status.actionHistory: 0 is out of range: want an integer >= 1`,
	}, "\n")
	err := c.Validate()
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v\nwant %s", err, want)
	}
}

func TestValidateBoundaries(t *testing.T) {
	ok := []func(*Config){
		func(c *Config) { c.CPU.MinReclaimedMilliCPU = 10 },
		func(c *Config) { c.CPU.SafetyMarginRatio = 0 },
		func(c *Config) { c.CPU.SafetyMarginRatio = 1 },
		func(c *Config) { c.CPU.SpikeThreshold = 1 },
		func(c *Config) { c.CPU.PeakWindow, c.CPU.LimitWindow = time.Second, time.Second },
		func(c *Config) { c.CPU.LimitWindow = c.CPU.PeakWindow + time.Hour },
		func(c *Config) { c.Memory.EvictPressureAbove = 100 },
		func(c *Config) {
			c.Loops.SlowInterval = 100 * time.Millisecond
			c.Loops.MetricsStaleAfter = time.Second
		},
		func(c *Config) { c.Loops.SlowInterval = time.Minute; c.Loops.MetricsStaleAfter = 2 * time.Minute },
		func(c *Config) { c.Loops.FastInterval = time.Millisecond },
		func(c *Config) { c.Loops.FastWindow = c.Loops.FastInterval },
		func(c *Config) { c.Loops.PSIWindow = 10 * time.Second },
		func(c *Config) { c.Loops.PSIStallThreshold = c.Loops.PSIWindow },
		func(c *Config) { c.MetricsAddress = "" },
		func(c *Config) { c.MetricsAddress = "[::1]:9477" },
		func(c *Config) { c.Cgroup.Root = "a/b" },
		func(c *Config) { c.Interference.WaitReadings = 1 },
		func(c *Config) { c.Interference.WaitReadings = 20 },
		func(c *Config) { c.Eviction.GracePeriod, c.Eviction.CoolDown = 0, 0 },
	}
	for i, f := range ok {
		c := Default()
		f(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("ok case %d: %v", i, err)
		}
	}
	bad := map[string]func(*Config){
		"cpu.minReclaimedMilliCPU":   func(c *Config) { c.CPU.MinReclaimedMilliCPU = 9 },
		"interference.waitReadings":  func(c *Config) { c.Interference.WaitReadings = 21 },
		"cpu.limitWindow":            func(c *Config) { c.CPU.LimitWindow = time.Second - 1 },
		"cpu.safetyMarginMilliCPU":   func(c *Config) { c.CPU.SafetyMarginMilliCPU = -1 },
		"cpu.safetyMarginRatio":      func(c *Config) { c.CPU.SafetyMarginRatio = 1.01 },
		"cpu.growStepMilliCPU":       func(c *Config) { c.CPU.GrowStepMilliCPU = 0 },
		"cpu.peakWindow":             func(c *Config) { c.CPU.PeakWindow = 999 * time.Millisecond },
		"cpu.spikeThreshold":         func(c *Config) { c.CPU.SpikeThreshold = 0 },
		"cpu.poolShrinkAfter":        func(c *Config) { c.CPU.PoolShrinkAfter = -time.Second },
		"cpu.quotaAfterCut":          func(c *Config) { c.CPU.QuotaAfterCut = -time.Second },
		"cpu.reclaimedCPUs":          func(c *Config) { c.CPU.ReclaimedCPUs = "everywhere" },
		"memory.reservedSystemBytes": func(c *Config) { c.Memory.ReservedSystemBytes = -1 },
		"memory.evictPressureAbove":  func(c *Config) { c.Memory.EvictPressureAbove = 0 },
		"memory.throttleMarginBytes": func(c *Config) { c.Memory.ThrottleMarginBytes = -1 },
		"memory.stalledEvictAfter":   func(c *Config) { c.Memory.StalledEvictAfter = time.Millisecond },
		"loops.slowInterval":         func(c *Config) { c.Loops.SlowInterval = 99 * time.Millisecond },
		"loops.fastInterval":         func(c *Config) { c.Loops.FastInterval = c.Loops.SlowInterval },
		"loops.fastWindow":           func(c *Config) { c.Loops.FastWindow = c.Loops.FastInterval - 1 },
		"loops.fastBurstWindow":      func(c *Config) { c.Loops.FastBurstWindow = c.Loops.FastWindow + 1 },
		"loops.metricsStaleAfter":    func(c *Config) { c.Loops.MetricsStaleAfter = c.Loops.SlowInterval },
		"loops.psiWindow": func(c *Config) {
			c.Loops.PSIWindow = 499 * time.Millisecond
			c.Loops.PSIStallThreshold = time.Millisecond
		},
		"loops.psiStallThreshold": func(c *Config) { c.Loops.PSIStallThreshold = 0 },
		"mode":                    func(c *Config) { c.Mode = "" },
		"nodeName":                func(c *Config) { c.NodeName = "bad/name" },
		"cgroup.root":             func(c *Config) { c.Cgroup.Root = "a/../.." },
		"cgroup.mountPoint":       func(c *Config) { c.Cgroup.MountPoint = "sys/fs/cgroup" },
		"cgroup.version":          func(c *Config) { c.Cgroup.Version = "2" },
		"socketPath":              func(c *Config) { c.SocketPath = "tidal.sock" },
		"metricsAddress":          func(c *Config) { c.MetricsAddress = "127.0.0.1:0" },
		"eviction.coolDown":       func(c *Config) { c.Eviction.CoolDown = -time.Second },
	}
	for key, f := range bad {
		c := Default()
		f(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), key+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("bad %s: Validate() = %v, want one error for that key", key, err)
		}
	}
}

// A socket path longer than a unix address holds is refused at its key, not at bind time with
// "invalid argument" after the agent wrote its cgroups.
func TestSocketPathMustFitAUnixAddress(t *testing.T) {
	c := Default()
	c.SocketPath = "/tmp/" + strings.Repeat("x", 103) // 108 bytes
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "socketPath: ") || !strings.Contains(err.Error(), "under 108 bytes") {
		t.Errorf("a 108-byte socket path: %v, want refused at socketPath", err)
	}
	c.SocketPath = c.SocketPath[:107]
	if err := c.Validate(); err != nil {
		t.Errorf("a 107-byte socket path: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"", fullExample, "cpu:\n  spikeThreshold: 1.7\n", "a: b: c", "- 1", "cpu: &a {x: *a}",
		"memory: {growStepBytes: 1.5Gi}", "cpu: {reservedSystemCPUs: 0-3,8}", "loops: {fastInterval: 1h}",
		"x: &a [1]\ny: *a\n", "? [a]\n: 1\n", "mode: !!binary aGk=\n", "---\n---\n", "cpu: {reservedSystemCPUs: 0-8191}",
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "standalone", "tidal.yaml")); err == nil {
		seeds = append(seeds, string(data))
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) && !hasNaN(c) {
			t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", back, c)
		}
	})
}

// hasNaN: NaN never validates, so this is only a guard for DeepEqual.
func hasNaN(c Config) bool {
	return c.CPU.SafetyMarginRatio != c.CPU.SafetyMarginRatio ||
		c.CPU.SpikeThreshold != c.CPU.SpikeThreshold ||
		c.Memory.EvictPressureAbove != c.Memory.EvictPressureAbove
}

func TestArbiterKeys(t *testing.T) {
	for in, want := range map[string]string{
		"arbiter:\n  url: http://a:9480\n":                     "arbiter.tokenFile",
		"arbiter:\n  url: ftp://a\n  tokenFile: /t\n":          "arbiter.url",
		"arbiter:\n  nodeLabels: pool\n":                       "arbiter.nodeLabels",
		"arbiter:\n  reportInterval: 10m\n":                    "arbiter.reportInterval",
		"arbiter:\n  url: http://a:9480\n  tokenFile: rel/t\n": "arbiter.tokenFile",
	} {
		_, err := Parse("tidal.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", in, err, want)
		}
	}
	c, err := Parse("tidal.yaml", []byte("arbiter:\n  url: http://127.0.0.1:9480\n  tokenFile: /etc/tidal/token\n  nodeLabels: a=1, b=2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ParseLabels(c.Arbiter.NodeLabels); err != nil || l["a"] != "1" || l["b"] != "2" {
		t.Errorf("labels = %v, %v", l, err)
	}
}

// The agent config shipped in deploy/agent-config.yaml (the DaemonSet's ConfigMap) is valid.
func TestDeployedConfigMapParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "agent-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	found := false
	for {
		var cm struct {
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if err := dec.Decode(&cm); err != nil {
			break
		}
		if cm.Metadata.Name != "tidal-agent-config" {
			continue
		}
		found = true
		cfg, err := Parse("tidal-agent-config/tidal.yaml", []byte(cm.Data["tidal.yaml"]))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Mode != ModeKubernetes {
			t.Errorf("mode %q, want kubernetes", cfg.Mode)
		}
	}
	if !found {
		t.Fatal("no ConfigMap tidal-agent-config in deploy/agent-config.yaml")
	}
}

// A problem found only at start names the key; PlaceInFile points it at the line that set the
// key, and leaves alone what the file does not set and errors that are not a config's.
func TestPlaceInFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tidal.yaml")
	if err := os.WriteFile(path, []byte("mode: standalone\ncpu:\n  reservedSystemCPUs: 0-4095\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found := &Error{Key: "cpu.reservedSystemCPUs", Msg: "0-4095: not all of them are online CPUs"}
	notInFile := &Error{Key: "memory.safetyMarginBytes", Msg: "too big for this host"}
	want := path + ":3: cpu.reservedSystemCPUs: 0-4095: not all of them are online CPUs"
	if err := PlaceInFile(found, path); err.Error() != want {
		t.Errorf("placed error = %q, want %q", err, want)
	}
	err := PlaceInFile(errors.Join(found, notInFile), path)
	if got := strings.Split(err.Error(), "\n"); len(got) != 2 || got[0] != want || got[1] != notInFile.Error() {
		t.Errorf("placed errors = %q, want %q and %q as it was", got, want, notInFile)
	}
	other := errors.New("no such device")
	if got := PlaceInFile(other, path); got != other {
		t.Errorf("an error without a key came back as %v", got)
	}
	if got := PlaceInFile(found, filepath.Join(t.TempDir(), "gone.yaml")); got != found {
		t.Errorf("with the file gone the error came back as %v", got)
	}
}
