package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/arbiter/arbiterapi"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// fakeHost is a 4-CPU machine in folders: /sys topology, /proc (stat, meminfo) and a unified
// cgroup hierarchy of plain files, so the agent's core runs without root. Cgroup files keep
// what the agent writes; the test moves the counters the agent reads.
type fakeHost struct {
	t                     *testing.T
	sys, proc, cgroupRoot string
	busy                  [4]int // jiffies of each CPU, as /proc/stat reports them
	idle                  [4]int
}

var fakeCgroupFiles = map[string]string{
	"cgroup.controllers": "cpuset cpu memory", "cgroup.subtree_control": "", "cgroup.procs": "",
	"cpuset.cpus": "", "cpuset.mems": "", "cpu.weight": "100", "cpu.idle": "0",
	"cpu.max": "max 100000", "memory.max": "max",
	"cpu.stat": "usage_usec 0\n", "memory.current": "0", "memory.stat": "inactive_file 0\nactive_file 0\n",
	"memory.high": "max", "memory.low": "0", "memory.min": "0",
}

// cgroup makes a cgroup's files, as the kernel would on mkdir.
func (h *fakeHost) cgroup(path string) {
	h.t.Helper()
	for name, v := range fakeCgroupFiles {
		p := filepath.Join(h.cgroupRoot, path, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
}

// twoThreadsPerCore makes the host's CPUs two hardware threads of each core (0-1, 2-3), for
// an agent made after it.
func (h *fakeHost) twoThreadsPerCore() {
	h.t.Helper()
	for cpu := range 4 {
		p := filepath.Join(h.sys, fmt.Sprintf("devices/system/cpu/cpu%d/topology/core_id", cpu))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("%d\n", cpu/2)), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	dir := t.TempDir()
	h := &fakeHost{t: t, sys: filepath.Join(dir, "sys"), proc: filepath.Join(dir, "proc"), cgroupRoot: filepath.Join(dir, "cgroup")}
	files := map[string]string{
		"sys/devices/system/cpu/online": "0-3\n",
		"proc/meminfo":                  "MemTotal:       16777216 kB\nMemFree:        12582912 kB\nMemAvailable:   12582912 kB\n",
	}
	for cpu := range 4 {
		d := fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/", cpu)
		files[d+"physical_package_id"], files[d+"core_id"] = "0\n", fmt.Sprintf("%d\n", cpu)
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.writeStat()
	h.cgroup("")
	h.cgroup("tidal")
	for _, tier := range qos.AllTiers() {
		h.cgroup(plugins.TierPath("tidal", tier))
	}
	return h
}

// tick advances the CPU counters by one second of each CPU's busy share (0..100).
func (h *fakeHost) tick(busyPercent [4]int) {
	for i, b := range busyPercent {
		h.busy[i] += b
		h.idle[i] += 100 - b
	}
	h.writeStat()
}

func (h *fakeHost) writeStat() {
	var sb strings.Builder
	fmt.Fprintf(&sb, "cpu  0 0 0 0 0 0 0 0 0 0\n")
	for i := range 4 {
		fmt.Fprintf(&sb, "cpu%d %d 0 0 %d 0 0 0 0 0 0\n", i, h.busy[i], h.idle[i])
	}
	if err := os.WriteFile(filepath.Join(h.proc, "stat"), []byte(sb.String()), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// setCPU sets a cgroup's CPU time counter.
func (h *fakeHost) setCPU(cgroup string, used time.Duration) {
	h.t.Helper()
	stat := fmt.Sprintf("usage_usec %d\n", used.Microseconds())
	if err := os.WriteFile(filepath.Join(h.cgroupRoot, cgroup, "cpu.stat"), []byte(stat), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) read(cgroup, file string) string {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.cgroupRoot, cgroup, file))
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func (h *fakeHost) agent(stateDir string, mechanism plugins.CPUMechanism) *Agent {
	h.t.Helper()
	return h.agentWith(stateDir, func(c *config.Config) { c.CPU.Mechanism = string(mechanism) })
}

func (h *fakeHost) agentWith(stateDir string, set func(*config.Config)) *Agent {
	h.t.Helper()
	cfg := config.Default()
	set(&cfg)
	cfg.Cgroup.Root = "tidal"
	cfg.StateDir, cfg.SocketPath = stateDir, filepath.Join(stateDir, "sock")
	a, err := newAgentOn(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), host{sys: h.sys, proc: h.proc, cgroups: cgroupfs.NewV2(h.cgroupRoot)})
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

// batch admits a reclaimed workload "batch" to a and returns a slow pass of a second with
// every CPU busy busy%.
func (h *fakeHost) batch(a *Agent) (pass func(busy int)) {
	h.t.Helper()
	h.cgroup("tidal-reclaimed/batch")
	if _, err := a.Admit(AdmitRequest{Name: "batch", Tier: "reclaimed", PID: sleeper(h.t)}, 0); err != nil {
		h.t.Fatal(err)
	}
	return func(busy int) {
		h.tick([4]int{busy, busy, busy, busy})
		a.sampler.at = a.sampler.at.Add(-time.Second)
		a.slowPass(context.Background())
	}
}

// A child process of the test: its PID is real, so the OOM score write lands.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// The core end to end on a fake host, no root: admit through the standalone source, the
// settings in the cgroup files, lending grown by the slow loop from the CPU counters and cut
// by the fast path's narrow write, and a restart that adopts the workloads from the
// checkpoint without moving the dedicated one's cores. Under every CPU mechanism: with quota
// the quota is what lending moves, with the others the reclaimed pool's cpuset (placed on the
// pool, cpu.reclaimedCPUs: pool, which this host's one thread per core would not choose).
func TestCoreOnAFakeHost(t *testing.T) {
	for _, m := range plugins.CPUMechanisms() {
		t.Run(string(m), func(t *testing.T) { testCoreOnAFakeHost(t, m) })
	}
}

func testCoreOnAFakeHost(t *testing.T, mechanism plugins.CPUMechanism) {
	h := newFakeHost(t)
	state := t.TempDir()
	onPool := func(c *config.Config) {
		c.CPU.Mechanism, c.CPU.ReclaimedCPUs = string(mechanism), config.ReclaimedOnPool
	}
	a := h.agentWith(state, onPool)
	limit := func() string {
		if mechanism == plugins.MechanismQuota {
			return h.read("tidal-reclaimed", "cpu.max")
		}
		return h.read("tidal-reclaimed", "cpuset.cpus")
	}
	h.cgroup("tidal-reclaimed/batch")
	h.cgroup("tidal/dedicated/db")

	batch := sleeper(t)
	if _, err := a.Admit(AdmitRequest{Name: "batch", Tier: "reclaimed", PID: batch}, 0); err != nil {
		t.Fatal(err)
	}
	db := sleeper(t)
	w, err := a.Admit(AdmitRequest{Name: "db", Tier: "dedicated", CPUs: 1, PID: db}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if w.CPUs != "3" {
		t.Errorf("dedicated cores %q, want 3 (the highest, farthest from system work)", w.CPUs)
	}
	if got := h.read("tidal-reclaimed/batch", "cgroup.procs"); got != fmt.Sprint(batch) {
		t.Errorf("batch's cgroup.procs = %q, want its pid", got)
	}
	if got, want := h.read("tidal-reclaimed", "cpu.idle"), map[bool]string{true: "0", false: "1"}[mechanism == plugins.MechanismShares]; got != want {
		t.Errorf("reclaimed tier cpu.idle = %q, want %s", got, want)
	}
	if got := h.read("tidal/shared", "cpuset.cpus"); got != "0-2" {
		t.Errorf("shared pool %q, want 0-2 (3 is dedicated)", got)
	}
	if _, err := a.Admit(AdmitRequest{Name: "batch", Tier: "reclaimed", PID: batch}, 0); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("a second workload of the same name: %v", err)
	}

	// Online work idle: the slow loop grows lending step by step.
	ctx := context.Background()
	a.slowPass(ctx) // first reading: no rate yet
	for range 4 {
		h.tick([4]int{10, 10, 10, 0})
		a.sampler.at = a.sampler.at.Add(-time.Second) // the tick's second, without sleeping it
		a.slowPass(ctx)
	}
	for range 10 {
		h.tick([4]int{10, 10, 10, 0})
		a.sampler.at = a.sampler.at.Add(-time.Second)
		a.slowPass(ctx)
	}
	grown := limit()

	// Per-workload CPU is the cgroup's own counter over time: batch used 2 s of CPU; the
	// figure is its rate between two samples (round robin: at most workloadSampleEvery
	// passes apart).
	before, _ := a.store.Snapshot().Get("batch")
	h.setCPU("tidal-reclaimed/batch", 2*time.Second)
	for range workloadSampleEvery {
		a.sampler.at = a.sampler.at.Add(-time.Second)
		a.slowPass(ctx)
	}
	after, _ := a.store.Snapshot().Get("batch")
	if !before.Sampled() || after.UsedMilliCPU <= 0 {
		t.Errorf("batch's CPU: sampled %v, %dm after 2s of CPU; want a rate above 0", before.Sampled(), after.UsedMilliCPU)
	}
	// Online uses 300m of the 3000m shared pool: lent 3000 - (300 x 1.1 + 250) = 2420m.
	// (The pass's elapsed time is a second and a few ms: allow for it.)
	if mechanism == plugins.MechanismQuota {
		var quota, period int
		if _, err := fmt.Sscanf(grown, "%d %d", &quota, &period); err != nil || quota < 240000 || quota > 242500 {
			t.Fatalf("reclaimed quota %q after growing, want about 242000 100000", grown)
		}
	} else if cores := mechanism == plugins.MechanismCores; !cores && grown != "0-2" {
		t.Fatalf("reclaimed pool %q after growing, want 0-2 (ceil of 2420m)", grown)
	} else if cores && grown != "1-2" {
		t.Fatalf("reclaimed pool %q after growing, want 1-2 (2420m in whole cores, highest first)", grown)
	}
	if q := h.read("tidal-reclaimed", "cpu.max"); mechanism != plugins.MechanismQuota && q != "max 100000" {
		t.Errorf("reclaimed quota %q under the %s mechanism, want none", q, mechanism)
	}
	// Under cores online work gives up the lent cores; under the others it keeps them all.
	wantOnline := map[bool]string{true: "0", false: "0-2"}[mechanism == plugins.MechanismCores]
	for _, tier := range []string{"tidal/shared", "tidal/system"} {
		if got := h.read(tier, "cpuset.cpus"); got != wantOnline {
			t.Errorf("%s cpuset %q while lending, want %s", tier, got, wantOnline)
		}
	}

	// An online spike: the fast path's narrow write cuts the reclaimed pool's cpuset (of the
	// tier and its workload) and with the quota mechanism the tier's quota, nothing else.
	// Under cores the 100m left is less than a core: the quota holds it on a CPU online work
	// gets back, with the others, in the online tiers' cpusets.
	writes := a.writer.Stats().Writes
	a.spike(time.Now(), 2900, 0)
	if got, want := limit(), map[bool]string{true: "10000 100000", false: "2"}[mechanism == plugins.MechanismQuota]; got != want {
		t.Errorf("reclaimed limit %q after the spike, want %q", got, want)
	}
	wantWrites := map[string]uint64{"cpuset.cpus": 2}
	switch mechanism {
	case plugins.MechanismQuota:
		wantWrites["cpu.quota"] = 1
	case plugins.MechanismCores:
		wantWrites["cpu.quota"], wantWrites["cpuset.cpus"] = 1, 4
		if q := h.read("tidal-reclaimed", "cpu.max"); q != "10000 100000" {
			t.Errorf("reclaimed quota %q under cores with less than a core lent, want 10000 100000", q)
		}
		for _, tier := range []string{"tidal/shared", "tidal/system"} {
			if got := h.read(tier, "cpuset.cpus"); got != "0-2" {
				t.Errorf("%s cpuset %q after the cut, want 0-2 (the cores handed back)", tier, got)
			}
		}
	}
	for knob, n := range a.writer.Stats().Writes {
		if d := n - writes[knob]; d != wantWrites[knob] {
			t.Errorf("the fast path wrote %s %d times, want %d", knob, d, wantWrites[knob])
		}
	}

	// A restart: the checkpoint brings both back, the dedicated one on the same core.
	if err := a.store.Save(); err != nil {
		t.Fatal(err)
	}
	b := h.agent(state, mechanism)
	snap := b.store.Snapshot()
	if len(snap.Workloads) != 2 {
		t.Fatalf("restored %d workloads, want 2", len(snap.Workloads))
	}
	if r, _ := snap.Get("db"); r.DedicatedCPUs.String() != "3" || r.Owner != plugins.OwnerTidal {
		t.Errorf("restored db: cores %s, owner %s", r.DedicatedCPUs, r.Owner)
	}
}

// Under quota-on-cut an arbiter's lease smaller than the plan holds reclaimed work by the
// quota, calm or not: the idle class alone would let it use its whole cpuset, more than the
// grant. (tests/integration's arbiter test pins the quota: a real arbiter's shared-queue grant
// follows what the node publishes, so it binds only now and then.)
func TestQuotaOnCutHoldsALeaseByTheQuota(t *testing.T) {
	h := newFakeHost(t)
	a := h.agentWith(t.TempDir(), func(c *config.Config) { c.CPU.Mechanism = config.MechanismQuotaOnCut })
	pass := h.batch(a)
	for range 14 {
		pass(10)
	}
	if got := h.read("tidal-reclaimed", "cpu.max"); got != "max 100000" {
		t.Fatalf("reclaimed quota %q after growing with no cut and no lease, want none", got)
	}
	far := time.Now().Add(time.Hour)
	a.mu.Lock()
	a.lease = &leasing{expires: far, lease: arbiterapi.Lease{Expires: far,
		Grants: []arbiterapi.Grant{{Queue: "queue-1", MilliCPU: 500, MemoryBytes: 1 << 30, Until: far}}}}
	a.mu.Unlock()
	pass(10)
	if got := h.read("tidal-reclaimed", "cpu.max"); got != "50000 100000" {
		t.Errorf("reclaimed quota %q under a lease of 500m, want 50000 100000", got)
	}
	a.mu.Lock()
	m, why := a.mechanismStatusLocked(time.Now())
	a.mu.Unlock()
	if m != "quota" || !strings.Contains(why, "the arbiter's lease grants 500m") {
		t.Errorf("status says mechanism %s (%s), want quota by the lease's rule", m, why)
	}
}

// Under quota-on-cut reclaimed work has no quota while online work is calm (the idle class
// lets it use the idle time of its CPUs), gets one of exactly what is lent from the fast
// path's cut on, in the same narrow write, and loses it again once cpu.quotaAfterCut has
// passed without another cut; status says which holds and why.
func TestQuotaOnCutHoldsReclaimedWorkToTheQuotaAfterACut(t *testing.T) {
	h := newFakeHost(t)
	a := h.agentWith(t.TempDir(), func(c *config.Config) {
		c.CPU.Mechanism = config.MechanismQuotaOnCut
		c.CPU.QuotaAfterCut = time.Hour
	})
	ctx := context.Background()
	pass := h.batch(a)
	quota := func() string { return h.read("tidal-reclaimed", "cpu.max") }
	mechanism := func() (string, string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.mechanismStatusLocked(time.Now())
	}
	a.slowPass(ctx)
	if got := quota(); got != "10000 100000" {
		t.Errorf("reclaimed quota %q while lending is at its minimum, want 10000 100000", got)
	}
	for range 14 {
		pass(10)
	}
	if got := quota(); got != "max 100000" {
		t.Fatalf("reclaimed quota %q after growing with no cut, want none", got)
	}
	if m, why := mechanism(); m != "idle" || !strings.Contains(why, "no cut for 1h0m0s") {
		t.Errorf("status says mechanism %s (%s), want idle, no cut for 1h0m0s", m, why)
	}

	// An online spike of 1000m: lending falls to 4000 - (1000 x 1.1 + 250) = 2650m, and the
	// fast path writes the quota with the cpusets.
	writes := a.writer.Stats().Writes
	a.spike(time.Now(), 1000, 0)
	if got := quota(); got != "265000 100000" {
		t.Errorf("reclaimed quota %q after the cut, want 265000 100000", got)
	}
	if d := a.writer.Stats().Writes["cpu.quota"] - writes["cpu.quota"]; d == 0 {
		t.Error("the fast path did not write the quota")
	}
	if m, why := mechanism(); m != "quota" || !strings.Contains(why, "after the last cut") {
		t.Errorf("status says mechanism %s (%s) after the cut, want quota, after the last cut", m, why)
	}
	// Every pass and every runtime hook resolves the mechanism: it says why only for status.
	if n := testing.AllocsPerRun(100, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		_ = a.mechanism()
	}); n != 0 {
		t.Errorf("resolving the mechanism allocates %.0f times, want none", n)
	}
	pass(10)
	if got := quota(); got != "265000 100000" {
		t.Errorf("reclaimed quota %q within cpu.quotaAfterCut, want 265000 100000", got)
	}

	// The hold over, the next pass lifts the quota.
	a.mu.Lock()
	a.cfg.CPU.QuotaAfterCut = 0
	a.mu.Unlock()
	pass(10)
	if got := quota(); got != "max 100000" {
		t.Errorf("reclaimed quota %q after cpu.quotaAfterCut, want none", got)
	}
	if got := h.read("tidal-reclaimed", "cpu.idle"); got != "1" {
		t.Errorf("reclaimed cpu.idle %q, want 1", got)
	}
}

// With cpu.poolShrinkAfter under the quota mechanism, a cut lowers the quota at once and
// leaves the reclaimed pool's cpusets alone; they narrow only once lending has stayed within
// fewer CPUs for that long. Widening is never held.
func TestPoolHoldNarrowsTheCpusetLater(t *testing.T) {
	h := newFakeHost(t)
	a := h.agentWith(t.TempDir(), func(c *config.Config) {
		c.CPU.Mechanism = string(plugins.MechanismQuota)
		c.CPU.PoolShrinkAfter = 10 * time.Second
		c.CPU.ReclaimedCPUs = config.ReclaimedOnPool
	})
	pass := growOverEveryCPU(t, h, a)

	writes := a.writer.Stats().Writes
	a.spike(time.Now(), 3900, 0)
	if got := h.read("tidal-reclaimed", "cpu.max"); got != "10000 100000" {
		t.Errorf("reclaimed quota %q after the spike, want 10000 100000", got)
	}
	for _, p := range []string{"tidal-reclaimed", "tidal-reclaimed/batch"} {
		if got := h.read(p, "cpuset.cpus"); got != "0-3" {
			t.Errorf("%s cpuset %q right after the cut, want 0-3 (held)", p, got)
		}
	}
	if d := a.writer.Stats().Writes["cpuset.cpus"] - writes["cpuset.cpus"]; d != 0 {
		t.Errorf("the fast path wrote %d cpusets under the pool hold, want none", d)
	}

	// Online work stays busy: lending stays at its minimum, the pool is still held...
	pass(95)
	if got := h.read("tidal-reclaimed", "cpuset.cpus"); got != "0-3" {
		t.Errorf("reclaimed pool %q within the hold, want 0-3", got)
	}
	// ... until the hold is over.
	a.mu.Lock()
	for node, since := range a.poolHold {
		a.poolHold[node] = since.Add(-10 * time.Second)
	}
	a.mu.Unlock()
	pass(95)
	for _, p := range []string{"tidal-reclaimed", "tidal-reclaimed/batch"} {
		if got := h.read(p, "cpuset.cpus"); got != "3" {
			t.Errorf("%s cpuset %q after the hold, want 3 (ceil of the 100m lent)", p, got)
		}
	}
}

// With cpu.reclaimedCPUs: online, reclaimed work runs on every CPU of the shared pool however
// little is lent: a cut lowers the quota (quota-on-cut) and leaves the cpusets alone, where
// pool narrows them to the ceil(lent) CPUs farthest from system ones. auto, the default, is
// online where each core has one thread and pool where cores have two.
func TestReclaimedOnOnlineCPUsKeepsTheCpuset(t *testing.T) {
	for _, tc := range []struct {
		where    string
		smt      bool
		afterCut string
	}{
		{config.ReclaimedOnPool, false, "3"}, {config.ReclaimedOnOnline, false, "0-3"},
		{config.ReclaimedAuto, false, "0-3"}, {config.ReclaimedAuto, true, "3"}, {config.ReclaimedOnPool, true, "3"},
	} {
		t.Run(fmt.Sprintf("%s-smt-%v", tc.where, tc.smt), func(t *testing.T) {
			h := newFakeHost(t)
			if tc.smt {
				h.twoThreadsPerCore()
			}
			a := h.agentWith(t.TempDir(), func(c *config.Config) { c.CPU.ReclaimedCPUs = tc.where })
			growOverEveryCPU(t, h, a)
			a.spike(time.Now(), 3900, 0)
			if got := h.read("tidal-reclaimed", "cpu.max"); got != "10000 100000" {
				t.Errorf("reclaimed quota %q after the spike, want 10000 100000", got)
			}
			for _, p := range []string{"tidal-reclaimed", "tidal-reclaimed/batch"} {
				if got := h.read(p, "cpuset.cpus"); got != tc.afterCut {
					t.Errorf("%s cpuset %q after the cut, want %s", p, got, tc.afterCut)
				}
			}
		})
	}
}

// growOverEveryCPU runs slow passes with online work at 10% until the reclaimed pool spans
// every CPU (widening is never held), and returns the pass function for more.
func growOverEveryCPU(t *testing.T, h *fakeHost, a *Agent) func(int) {
	t.Helper()
	pass := h.batch(a)
	a.slowPass(context.Background())
	for range 14 {
		pass(10)
	}
	if got := h.read("tidal-reclaimed", "cpuset.cpus"); got != "0-3" {
		t.Fatalf("reclaimed pool %q after growing, want 0-3", got)
	}
	return pass
}
