package cgroupv2

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

// node is a standalone `tidal agent` in the VM with its own cgroup root, socket and state.
type node struct {
	t      *testing.T
	layout *cgroupfs.Layout
	root   string
	dir    string
	config string
	socket string
	agent  *exec.Cmd
	log    *testutil.SyncBuffer
	client *agent.Client
}

func newNode(t *testing.T, extra string) *node {
	t.Helper()
	l := unified(t)
	root := isolationtest.RootName(t, l)
	dir := t.TempDir()
	n := &node{t: t, layout: l, root: root, dir: dir, socket: filepath.Join(dir, "tidal.sock"), config: filepath.Join(dir, "tidal.yaml")}
	cfg := fmt.Sprintf("cgroup:\n  root: %s\n  version: auto\nstateDir: %s\nsocketPath: %s\nmetricsAddress: \"\"\nlogLevel: debug\n%s\n",
		root, filepath.Join(dir, "state"), n.socket, extra)
	if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n.client = agent.NewClient(n.socket)
	return n
}

func (n *node) start() {
	n.t.Helper()
	n.log = &testutil.SyncBuffer{}
	n.agent = testutil.StartDaemon(n.t, "agent", n.log, 10*time.Second, tidalBin(n.t), "agent", "--config", n.config)
	n.eventually(60*time.Second, "agent answers", func() error { _, err := n.client.Status(); return err })
}

func (n *node) kill9() {
	_ = n.agent.Process.Kill()
	_, _ = n.agent.Process.Wait()
}

// appendConfig adds YAML lines to the agent's config, for its next start.
func (n *node) appendConfig(yaml string) {
	n.t.Helper()
	testutil.AppendFile(n.t, n.config, yaml)
}

func (n *node) run(args ...string) (*exec.Cmd, *testutil.SyncBuffer) {
	n.t.Helper()
	out := &testutil.SyncBuffer{}
	cmd := exec.Command(tidalBin(n.t), append([]string{"run", "--socket", n.socket}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd, out
}

func (n *node) status() reporter.Status {
	n.t.Helper()
	s, err := n.client.Status()
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

func (n *node) workload(name string) (reporter.Workload, bool) {
	for _, w := range n.status().Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return reporter.Workload{}, false
}

func (n *node) waitWorkload(name string) reporter.Workload {
	n.t.Helper()
	var w reporter.Workload
	n.eventually(60*time.Second, "workload "+name+" running", func() error {
		var ok bool
		if w, ok = n.workload(name); !ok || len(w.PIDs) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	return w
}

func (n *node) file(rel, name string) string {
	n.t.Helper()
	return cg(n.t, n.layout, rel, name)
}

func (n *node) eventually(timeout time.Duration, what string, f func() error) {
	n.t.Helper()
	testutil.Eventually(n.t, timeout, what, f)
}

// waitPasses waits until the agent has completed k more slow-loop passes: a definite event
// to check that something did not happen, instead of a sleep.
func (n *node) waitPasses(k uint64) {
	n.t.Helper()
	want := n.status().SlowPasses + k
	n.eventually(60*time.Second, fmt.Sprintf("%d more slow passes", k), func() error {
		if got := n.status().SlowPasses; got < want {
			return fmt.Errorf("%d passes, want %d", got, want)
		}
		return nil
	})
}

func (n *node) actions(kind, reason string) []string {
	var out []string
	for _, a := range n.status().Actions {
		if a.Kind == kind && strings.Contains(a.Reason, reason) {
			out = append(out, a.Reason)
		}
	}
	return out
}

// The standalone flow on v2: `tidal run` puts each tier's command in its cgroup before its
// first instruction; a reclaimed burner gets cpu.idle, its tier the lent quota (cpu.max) and
// memory (memory.max) and a cpuset inside the reclaimed pool; a dedicated workload's core is
// in no other cgroup's effective cpuset; `tidal status` says v2.
func TestV2StandaloneTiers(t *testing.T) {
	// The idle mechanism, whose files this test checks on v2 (the quota one's: the kubelet
	// layouts test), on the reclaimed pool, whose cpuset it checks (auto would choose every
	// online CPU on this VM's one thread per core).
	n := newNode(t, "cpu:\n  growStepMilliCPU: 1000\n  peakWindow: 2s\n  mechanism: idle\n  reclaimedCPUs: pool\n")
	n.start()
	if s := n.status(); s.CgroupVer != "v2" || !s.CPUIdle {
		t.Fatalf("agent status: cgroup %s, cpu.idle %v; want v2 and true", s.CgroupVer, s.CPUIdle)
	}

	first, out := n.run("--tier", "reclaimed", "--name", "first", "--", "cat", "/proc/self/cgroup")
	if err := first.Wait(); err != nil {
		t.Fatalf("tidal run cat: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(out.String()), "0::/"+n.root+"-reclaimed/first"; got != want {
		t.Errorf("the command's first instruction ran in %q, want %q", got, want)
	}

	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin(t), "workload", "burner", "--threads", "2")
	burn := n.waitWorkload("burn")
	n.eventually(60*time.Second, "fresh metrics", func() error {
		if !n.status().MetricsOK {
			return errors.New("not yet")
		}
		return nil
	})
	n.eventually(30*time.Second, "cgroup files match status", func() error {
		s := n.status()
		var lent int64
		pool := cpuset.New()
		for _, p := range s.Pools {
			lent += p.LentMilliCPU
			set, err := cpuset.Parse(p.Reclaimed)
			if err != nil {
				return err
			}
			pool = pool.Union(set)
		}
		if got := n.file(burn.Cgroup, "cpu.idle"); got != "1" {
			return fmt.Errorf("workload cpu.idle = %s", got)
		}
		if got := n.file(burn.Cgroup, "cpu.weight"); got != "0" {
			return fmt.Errorf("workload cpu.weight = %s, want 0 (idle)", got)
		}
		// The default mechanism (idle): ceil(lent) CPUs at the idle class, no quota.
		if got, want := pool.Size(), int((lent+999)/1000); got != want {
			return fmt.Errorf("reclaimed pool %s has %d CPUs, want %d (lent %dm)", pool, got, want, lent)
		}
		for _, cg := range []string{n.root + "-reclaimed", burn.Cgroup} {
			if got := n.file(cg, "cpu.max"); got != "max 100000" {
				return fmt.Errorf("%s cpu.max = %q, want max (the idle mechanism sets no quota)", cg, got)
			}
		}
		cpus, err := cpuset.Parse(n.file(burn.Cgroup, "cpuset.cpus.effective"))
		if err != nil || cpus.IsEmpty() || !cpus.IsSubsetOf(pool) {
			return fmt.Errorf("effective cpuset %s not inside the reclaimed pool %s", cpus, pool)
		}
		if got, want := n.file(n.root+"-reclaimed", "memory.max"), strconv.FormatInt(s.Lendable.MemoryBytes, 10); got != want {
			return fmt.Errorf("reclaimed tier memory.max = %s, want lent memory %s", got, want)
		}
		return nil
	})
	if oom := readFile(t, fmt.Sprintf("/proc/%d/oom_score_adj", burn.PIDs[0])); oom != "1000" {
		t.Errorf("reclaimed oom_score_adj = %s, want 1000", oom)
	}

	n.run("--tier", "shared", "--name", "web", "--", "sleep", "600")
	web := n.waitWorkload("web")
	if got := n.file(web.Cgroup, "cpu.idle"); got != "0" {
		t.Errorf("shared workload cpu.idle = %s", got)
	}
	n.run("--tier", "dedicated", "--cpus", "1", "--name", "db", "--", "sleep", "600")
	db := n.waitWorkload("db")
	mine, err := cpuset.Parse(db.CPUs)
	if err != nil || mine.Size() != 1 {
		t.Fatalf("db got CPUs %q", db.CPUs)
	}
	if got := n.file(db.Cgroup, "cpuset.cpus.effective"); got != mine.String() {
		t.Errorf("db effective cpuset = %s, want %s", got, mine)
	}
	n.eventually(30*time.Second, "dedicated core exclusive", func() error {
		for _, rel := range []string{n.root + "/shared", web.Cgroup, n.root + "-reclaimed", burn.Cgroup, n.root + "/system"} {
			set, err := cpuset.Parse(n.file(rel, "cpuset.cpus.effective"))
			if err != nil {
				return err
			}
			if !set.Intersection(mine).IsEmpty() {
				return fmt.Errorf("%s effective cpuset %s includes dedicated CPU %s", rel, set, mine)
			}
		}
		return nil
	})

	text, err := exec.Command(tidalBin(t), "status", "--socket", n.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "cgroup v2") {
		t.Errorf("tidal status: %v\n%s", err, text)
	}
	for _, name := range []string{"burn", "web", "db"} {
		if !strings.Contains(string(text), name) {
			t.Errorf("tidal status lacks workload %s:\n%s", name, text)
		}
	}
	if e := n.status().CgroupError; e != "" {
		t.Errorf("cgroup writes failing: %s", e)
	}
}

// The fast path's PSI trigger on the shared tier's cpu.pressure: a reclaimed burner alone
// never fires it (its own stalls are in its own tier); online burners contending for the CPUs
// do, and lending falls to its minimum at once. The utilization spike path is kept out of the
// way (a fast window of minutes) so that what shrinks lending here is PSI.
func TestV2FastPathPSI(t *testing.T) {
	// The run-queue wait feedback off, baselines included: a baseline measurement for the new
	// online workload would cut lending to its minimum first, leaving PSI nothing to cut.
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 2s\nloops:\n  slowInterval: 4s\n  metricsStaleAfter: 30s\n  fastWindow: 10m\n  psiStallThreshold: 100ms\n  psiWindow: 1s\ninterference:\n  shared:\n    runQueueWait: 0\n    runQueueWaitOverBaseline: 0\n")
	n.start()
	n.run("--tier", "reclaimed", "--name", "batch", "--", tidalBin(t), "workload", "burner", "--threads", "2")
	n.waitWorkload("batch")
	n.eventually(90*time.Second, "lending grows past its minimum", func() error {
		if s := n.status(); s.Lendable.MilliCPU < 500 {
			return fmt.Errorf("lendable %dm", s.Lendable.MilliCPU)
		}
		return nil
	})
	// A slow pass (4s) covers several PSI windows (1s) of reclaimed work alone.
	n.waitPasses(1)
	if a := n.actions("throttle", "PSI"); len(a) != 0 {
		t.Fatalf("the shared tier's PSI trigger fired with only reclaimed work running: %v", a)
	}
	lent := n.status().Lendable.MilliCPU
	n.run("--tier", "shared", "--name", "online", "--", tidalBin(t), "workload", "burner", "--threads", "4")
	n.waitWorkload("online")
	n.eventually(60*time.Second, "a PSI throttle", func() error {
		if a := n.actions("throttle", "PSI"); len(a) == 0 {
			return fmt.Errorf("no PSI action yet; shared cpu.pressure: %s", n.file(n.root+"/shared", "cpu.pressure"))
		}
		return nil
	})
	psi := n.actions("throttle", "PSI")
	t.Logf("PSI actions: %v; lending %dm -> %dm", psi, lent, n.status().Lendable.MilliCPU)
	if !strings.Contains(psi[0], "(minimum)") {
		t.Errorf("the PSI throttle did not take lending to its minimum: %s", psi[0])
	}
	if strings.Contains(n.log.String(), "PSI trigger unavailable") || strings.Contains(n.log.String(), "PSI trigger off") {
		t.Errorf("the agent ran without its PSI trigger:\n%s", testutil.Tail(n.log.String(), 40))
	}
}

// Memory short on v2: the lowest reclaim-priority reclaimed workload is stopped first, the
// one that ignores SIGTERM is killed, and online work is never touched. The watermark is above
// what the VM has, so "short" holds without exhausting its memory.
func TestV2Eviction(t *testing.T) {
	n := newNode(t, "eviction:\n  gracePeriod: 2s\n  coolDown: 3s\n")
	n.start()
	web, _ := n.run("--tier", "shared", "--name", "web", "--", tidalBin(t), "workload", "memhog", "--target", "32Mi")
	n.run("--tier", "reclaimed", "--reclaim-priority", "5", "--name", "important", "--", tidalBin(t), "workload", "memhog", "--target", "16Mi")
	n.run("--tier", "reclaimed", "--reclaim-priority", "1", "--name", "cheap", "--", "sh", "-c", "trap '' TERM; while :; do sleep 0.1; done")
	for _, name := range []string{"web", "important", "cheap"} {
		n.waitWorkload(name)
	}
	// Memory turns short only once both reclaimed workloads run: with the watermark from the
	// start, the first pass could find one admitted and the other not yet sampled, and the
	// order would be admission's, not priority's. The agent restarts with it and adopts them.
	n.kill9()
	n.appendConfig("memory:\n  evictAvailableBelowBytes: 1Ti\n")
	n.start()
	var order []string
	n.eventually(120*time.Second, "both reclaimed workloads evicted", func() error {
		order = order[:0]
		for _, a := range n.status().Actions {
			if a.Kind == "evict" {
				order = append(order, strings.Fields(a.Reason)[0])
			}
		}
		if len(order) < 2 {
			return fmt.Errorf("evictions so far: %v", order)
		}
		return nil
	})
	if order[0] != "cheap" || order[1] != "important" {
		t.Errorf("eviction order = %v, want cheap (priority 1) then important (priority 5)", order)
	}
	for _, name := range []string{"cheap", "important"} {
		n.eventually(30*time.Second, name+" gone", func() error {
			if _, ok := n.workload(name); ok {
				return errors.New("still listed")
			}
			return nil
		})
	}
	if pids, err := n.layout.Procs(n.root+"-reclaimed", true); err != nil || len(pids) != 0 {
		t.Errorf("processes left in the reclaimed tier: %v, %v", pids, err)
	}
	if w, ok := n.workload("web"); !ok || len(w.PIDs) == 0 {
		t.Error("the online workload was stopped")
	}
	if web.ProcessState != nil {
		t.Error("online tidal run exited")
	}
}

// After kill -9 and a restart the agent adopts its cgroups from the checkpoint: workloads keep
// their tiers and dedicated cores, the online cpuset is not rewritten, lending restarts at its
// minimum (cpu.max of 100m on the reclaimed tier), and cpu.idle is still on.
func TestV2RestartAdoption(t *testing.T) {
	// On the reclaimed pool, whose cpuset after the restart this test checks.
	n := newNode(t, "cpu:\n  growStepMilliCPU: 1000\n  reclaimedCPUs: pool\nloops:\n  slowInterval: 1s\n  metricsStaleAfter: 4s\n")
	n.start()
	n.run("--tier", "dedicated", "--cpus", "1", "--name", "db", "--", "sleep", "600")
	n.run("--tier", "shared", "--name", "web", "--", "sleep", "600")
	n.run("--tier", "reclaimed", "--name", "batch", "--", tidalBin(t), "workload", "burner", "--threads", "1")
	db := n.waitWorkload("db")
	n.waitWorkload("web")
	batch := n.waitWorkload("batch")
	n.eventually(90*time.Second, "lending grows", func() error {
		if s := n.status(); s.Lendable.MilliCPU <= 100 {
			return fmt.Errorf("lendable %dm", s.Lendable.MilliCPU)
		}
		return nil
	})
	webCPUs := n.file(n.root+"/shared/web", "cpuset.cpus")
	n.kill9()

	cfg, _ := os.ReadFile(n.config)
	_ = os.WriteFile(n.config, []byte(strings.NewReplacer("slowInterval: 1s", "slowInterval: 20s", "metricsStaleAfter: 4s", "metricsStaleAfter: 60s").Replace(string(cfg))), 0o600)
	n.start()
	s := n.status()
	if s.MetricsOK || s.Lendable.MilliCPU != 0 {
		t.Errorf("right after restart: metrics fresh %v, lendable %dm; want stale and 0", s.MetricsOK, s.Lendable.MilliCPU)
	}
	if got := n.file(n.root+"-reclaimed", "cpuset.cpus"); strings.ContainsAny(got, ",-") {
		t.Errorf("reclaimed pool after restart = %q, want one CPU (100m)", got)
	}
	tiers := map[string]string{}
	for _, w := range s.Workloads {
		tiers[w.Name] = w.Tier
	}
	if tiers["db"] != "dedicated" || tiers["web"] != "shared" || tiers["batch"] != "reclaimed" {
		t.Errorf("tiers after restart = %v", tiers)
	}
	dbAfter, _ := n.workload("db")
	if dbAfter.CPUs != db.CPUs || n.file(db.Cgroup, "cpuset.cpus") != db.CPUs {
		t.Errorf("dedicated cores moved: %s -> %s", db.CPUs, dbAfter.CPUs)
	}
	if got := n.file(n.root+"/shared/web", "cpuset.cpus"); got != webCPUs {
		t.Errorf("online cpuset moved on restart: %s -> %s", webCPUs, got)
	}
	if got := n.file(batch.Cgroup, "cpu.idle"); got != "1" {
		t.Errorf("reclaimed cpu.idle after restart = %s", got)
	}
	if pids, err := n.layout.Procs(batch.Cgroup, false); err != nil || len(pids) == 0 {
		t.Errorf("the reclaimed burner's cgroup lost its process across the restart: %v, %v", pids, err)
	}
}

// An agent restarted (kill -9) beside reclaimed work holding more than its minimum lends that
// work what it holds: memory.max and memory.high of the reclaimed tier stay at or above its
// working set (under it, v2 reclaims and, with no swap, OOM-kills), nothing is evicted, and the
// job keeps running with its memory. The VM has 2 GiB, so the reservations are made small
// enough to lend the job its 600 MiB.
func TestV2RestartKeepsWhatReclaimedWorkHolds(t *testing.T) {
	n := newNode(t, "memory:\n  reservedSystemBytes: 256Mi\n  safetyMarginBytes: 128Mi\n  minReclaimedBytes: 64Mi\n  growStepBytes: 512Mi\nloops:\n  slowInterval: 500ms\n")
	n.start()
	const want = 600 << 20
	job, _ := n.run("--tier", "reclaimed", "--name", "hog", "--", tidalBin(t), "workload", "memhog", "--target", "600Mi", "--rate", "256Mi")
	n.waitWorkload("hog")
	held := func() int64 {
		m, err := n.layout.MemoryStat(n.root + "-reclaimed")
		if err != nil {
			t.Fatal(err)
		}
		return m.WorkingSet
	}
	n.eventually(60*time.Second, "the job holds 600MiB", func() error {
		if h := held(); h < want {
			return fmt.Errorf("holds %dMiB", h>>20)
		}
		return nil
	})
	n.kill9()
	n.start()
	for range 8 {
		s := n.status()
		if s.CgroupError != "" {
			t.Fatalf("cgroup writes failing: %s", s.CgroupError)
		}
		h := held()
		if s.Memory == nil || s.Memory.LentBytes < h {
			t.Fatalf("%+v is lent to reclaimed work holding %dMiB", s.Memory, h>>20)
		}
		for _, file := range []string{"memory.max", "memory.high"} {
			if v, _ := strconv.ParseInt(n.file(n.root+"-reclaimed", file), 10, 64); v < h {
				t.Fatalf("reclaimed tier's %s %dMiB, under the %dMiB it holds", file, v>>20, h>>20)
			}
		}
		for _, a := range s.Actions {
			if a.Kind == "evict" {
				t.Fatalf("evicted: %s", a.Reason)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := job.Process.Signal(syscall.Signal(0)); err != nil || job.ProcessState != nil {
		t.Fatalf("the job did not survive: %v", err)
	}
	if h := held(); h < want {
		t.Fatalf("the job holds %dMiB, want its 600MiB", h>>20)
	}
	if ev := n.file(n.root+"-reclaimed", "memory.events"); !strings.Contains(ev, "oom_kill 0") {
		t.Errorf("the reclaimed tier saw an OOM kill: %q", ev)
	}
}

// A v2 host whose root does not enable a controller tidal needs (here cpuset; the host's init
// system owns the root and tidal never writes it): the agent fails safe. It lends only its
// minimum, refuses workloads with the reason, and status shows the cgroup error naming the
// missing files.
func TestV2MissingRootController(t *testing.T) {
	n := newNode(t, "")
	ctl := "/sys/fs/cgroup/cgroup.subtree_control"
	if err := os.WriteFile(ctl, []byte("-cpuset"), 0); err != nil {
		t.Fatalf("disable cpuset at the VM's root: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(ctl, []byte("+cpuset"), 0); err != nil {
			t.Errorf("re-enable cpuset at the VM's root: %v", err)
		}
	})
	n.start()
	cmd, out := n.run("--tier", "shared", "--name", "web", "--", "true")
	if err := cmd.Wait(); err == nil || !strings.Contains(out.String(), "cpuset.cpus") {
		t.Errorf("a workload without the cpuset controller: %v %q; want refused naming cpuset.cpus", err, out)
	}
	n.eventually(30*time.Second, "status shows the cgroup error", func() error {
		s := n.status()
		if !strings.Contains(s.CgroupError, "cpuset") {
			return fmt.Errorf("cgroup error %q", s.CgroupError)
		}
		if s.Lendable.MilliCPU > 100 {
			return fmt.Errorf("lends %dm with failing cgroup writes", s.Lendable.MilliCPU)
		}
		return nil
	})
	if len(n.status().Workloads) != 0 {
		t.Errorf("workloads admitted without their cgroups: %+v", n.status().Workloads)
	}
}
