package integration

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

// A reclaimed burner runs in its own cgroup with the lowest CPU priority, a quota equal to
// the lent CPU, a cpuset inside the reclaimed pool and a memory limit equal to lent memory;
// and the command's very first instruction already runs in that cgroup.
func TestReclaimedWorkloadIsConfined(t *testing.T) {
	// The idle mechanism, whose files this test checks (the quota one's: tests/integration
	// TestArbiterLeases, tests/faults).
	n := newNode(t, "cpu:\n  growStepMilliCPU: 1000\n  peakWindow: 2s\n  mechanism: idle\n")
	n.start()

	// The first thing the command does is print its own cgroups.
	first, out := n.run("--tier", "reclaimed", "--name", "first", "--", "cat", "/proc/self/cgroup")
	if err := first.Wait(); err != nil {
		t.Fatalf("tidal run cat: %v\n%s", err, out)
	}
	wantPath := "/" + n.root + "-reclaimed/first"
	for _, c := range []string{"cpu", "cpuset", "memory"} {
		if !strings.Contains(out.String(), ":"+c+":"+wantPath) && !strings.Contains(out.String(), ","+c+":"+wantPath) && !strings.Contains(out.String(), ":"+c+",") {
			t.Errorf("first instruction ran outside %s for %s:\n%s", wantPath, c, out)
		}
	}

	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin, "workload", "burner", "--threads", "2")
	w := n.waitWorkload("burn")
	// Compare the files with what status says the node lends, whatever it lends now.
	n.eventually(5*time.Second, "fresh metrics", func() error {
		if !n.status().MetricsOK {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	n.eventually(5*time.Second, "cgroup files match status", func() error {
		s := n.status()
		var lent int64
		reclaimedPool := cpuset.New()
		for _, p := range s.Pools {
			lent += p.LentMilliCPU
			set, err := cpuset.Parse(p.Reclaimed)
			if err != nil {
				return err
			}
			reclaimedPool = reclaimedPool.Union(set)
		}
		if got := n.file("cpu", w.Cgroup, "cpu.idle"); got != "1" {
			return fmt.Errorf("cpu.idle = %s", got)
		}
		// The default mechanism (idle): what is lent is the reclaimed pool, ceil(lent) CPUs
		// at the idle class; no CFS quota on the tier or the workload (none asked).
		if got, want := reclaimedPool.Size(), int((lent+999)/1000); got != want {
			return fmt.Errorf("reclaimed pool %s has %d CPUs, want %d (lent %dm)", reclaimedPool, got, want, lent)
		}
		if got := n.file("cpuset", n.root+"-reclaimed", "cpuset.cpus"); got != reclaimedPool.String() {
			return fmt.Errorf("tier cpuset %s, want the reclaimed pool %s", got, reclaimedPool)
		}
		for _, cg := range []string{n.root + "-reclaimed", w.Cgroup} {
			if got := n.file("cpu", cg, "cpu.cfs_quota_us"); got != "-1" {
				return fmt.Errorf("%s quota = %s, want -1 (the idle mechanism sets none)", cg, got)
			}
		}
		if cpus := n.cpus(w.Cgroup); cpus.IsEmpty() || !cpus.IsSubsetOf(reclaimedPool) {
			return fmt.Errorf("cpuset %s not inside the reclaimed pool %s", cpus, reclaimedPool)
		}
		if got, want := n.file("memory", n.root+"-reclaimed", "memory.limit_in_bytes"), strconv.FormatInt(s.Lendable.MemoryBytes, 10); got != want {
			return fmt.Errorf("reclaimed tier memory limit = %s, want lent memory %s", got, want)
		}
		if got := n.file("memory", n.root, "memory.use_hierarchy"); got != "1" {
			return fmt.Errorf("memory.use_hierarchy = %s: the tier limit would not cover its workloads", got)
		}
		return nil
	})
	oom, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", w.PIDs[0]))
	if err != nil || strings.TrimSpace(string(oom)) != "1000" {
		t.Errorf("reclaimed oom_score_adj = %q, %v; want 1000", oom, err)
	}
}

// A dedicated workload gets whole cores that no shared or reclaimed cgroup may use, and a
// request the node cannot satisfy is refused with the reason.
func TestDedicatedCoresAreExclusive(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	n := newNode(t, "")
	n.start()
	n.run("--tier", "shared", "--name", "web", "--", "sleep", "60")
	n.run("--tier", "reclaimed", "--name", "batch", "--", "sleep", "60")
	n.waitWorkload("web")
	n.waitWorkload("batch")
	n.run("--tier", "dedicated", "--cpus", "1", "--name", "db", "--", "sleep", "60")
	db := n.waitWorkload("db")
	mine, err := cpuset.Parse(db.CPUs)
	if err != nil || mine.Size() != 1 {
		t.Fatalf("db got CPUs %q", db.CPUs)
	}
	if got := n.file("cpuset", db.Cgroup, "cpuset.cpus"); got != mine.String() {
		t.Errorf("db cgroup cpuset = %s, want %s", got, mine)
	}
	for _, rel := range []string{n.root + "/shared", n.root + "/shared/web", n.root + "-reclaimed", n.root + "-reclaimed/batch", n.root + "/system"} {
		if set := n.cpus(rel); !set.Intersection(mine).IsEmpty() {
			t.Errorf("%s cpuset %s includes dedicated CPU %s", rel, set, mine)
		}
	}
	// Every CPU but one is now taken: another dedicated request must be refused, with why.
	cmd, out := n.run("--tier", "dedicated", "--cpus", strconv.Itoa(runtime.NumCPU()), "--name", "db2", "--", "true")
	if err := cmd.Wait(); err == nil || !strings.Contains(out.String(), "cannot dedicate") {
		t.Errorf("an impossible dedicated request: err %v, output %q", err, out)
	}
}

// Raising online load shrinks the reclaimed pool at once and the burner's CPU share falls.
func TestOnlineLoadShrinksReclaimed(t *testing.T) {
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 3s\n  spikeThreshold: 0.5\n")
	n.start()
	burn := n.lendToABurner()
	before := n.cpuUsage(burn.Cgroup, time.Second)
	lentBefore := n.status().Lendable.MilliCPU
	n.cutByOnlineLoad(lentBefore)
	after := n.cpuUsage(burn.Cgroup, time.Second)
	t.Logf("burner CPU per second: %v before online load, %v during it; lent %dm -> %dm", before, after, lentBefore, n.status().Lendable.MilliCPU)
	if after > before/2 {
		t.Errorf("burner CPU fell only from %v to %v per second under online load", before, after)
	}
	throttled := false
	for _, a := range n.status().Actions {
		throttled = throttled || a.Kind == "throttle"
		if a.Trigger == "" {
			t.Errorf("an action without its trigger: %+v", a)
		}
	}
	if !throttled {
		t.Error("no throttle action recorded by the fast path")
	}
}

// Under cpu.mechanism quota-on-cut the reclaimed tier has no CFS quota while online work is
// calm, so reclaimed work may use the idle time beside what is lent; an online spike puts the
// quota of what is lent on it at once, and it stays while lending is at its minimum.
func TestQuotaOnCutQuotasReclaimedWorkOnlyAfterACut(t *testing.T) {
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 3s\n  spikeThreshold: 0.5\n  mechanism: quota-on-cut\n  quotaAfterCut: 1s\n")
	n.start()
	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	burn := n.waitWorkload("burn")
	quota := func() string { return n.file("cpu", n.root+"-reclaimed", "cpu.cfs_quota_us") }
	n.eventually(20*time.Second, "lending past its minimum with no quota", func() error {
		s := n.status()
		if c := s.Pools[0].Control; s.Lendable.MilliCPU < 500 || quota() != "-1" || c.Mechanism != "idle" {
			return fmt.Errorf("lendable %dm, reclaimed quota %s, mechanism %s (%s)", s.Lendable.MilliCPU, quota(), c.Mechanism, c.MechanismChoice)
		}
		return nil
	})
	t.Logf("calm: burner CPU %v per second with %dm lent", n.cpuUsage(burn.Cgroup, time.Second), n.status().Lendable.MilliCPU)

	n.run("--tier", "shared", "--name", "online", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	n.waitWorkload("online")
	n.eventually(5*time.Second, "the quota of what is lent on the reclaimed tier", func() error {
		s := n.status()
		q, err := strconv.ParseInt(quota(), 10, 64)
		if c := s.Pools[0].Control; err != nil || q <= 0 || q > s.Pools[0].LentMilliCPU*100 || c.Mechanism != "quota" {
			return fmt.Errorf("reclaimed quota %s with %dm lent, mechanism %s (%s)", quota(), s.Pools[0].LentMilliCPU, c.Mechanism, c.MechanismChoice)
		}
		return nil
	})
	// Online work stays busy: lending at its minimum keeps the quota past quotaAfterCut.
	time.Sleep(2 * time.Second)
	if q := quota(); q != "10000" {
		t.Errorf("reclaimed quota %s with online work busy 2 s after the cut, want 10000 (the 100m minimum)", q)
	}
	if c := n.status().Pools[0].Control; !strings.Contains(c.MechanismChoice, "lends its minimum") {
		t.Errorf("status does not say why the quota holds: %s", c.MechanismChoice)
	}
}

// Under cpu.mechanism cores reclaimed work gets whole cores that online work is taken off
// (the cgroups' cpusets and the processes' affinity say so) with no quota; online load hands
// the cores back at once, to the online cgroups too, and the quota holds what is left.
func TestCoresMechanismKeepsOnlineOffLentCores(t *testing.T) {
	n, web, burn := idleWebBesideABurner(t, "cpu:\n  peakWindow: 3s\n  mechanism: cores\n")
	affinity := func(pid int) cpuset.CPUSet {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &set); err != nil {
			t.Fatal(err)
		}
		var ids []int
		for c := range runtime.NumCPU() {
			if set.IsSet(c) {
				ids = append(ids, c)
			}
		}
		return cpuset.New(ids...)
	}
	var lent, online cpuset.CPUSet
	n.eventually(20*time.Second, "a whole core lent, online work off it", func() error {
		p := n.status().Pools[0]
		if !p.Exclusive || !strings.Contains(p.Control.MechanismChoice, "of their own") {
			return fmt.Errorf("reclaimed %s not exclusive (%dm lent, %s)", p.Reclaimed, p.LentMilliCPU, p.Control.MechanismChoice)
		}
		var err error
		if lent, err = cpuset.Parse(p.Reclaimed); err != nil {
			return err
		}
		online, err = cpuset.Parse(p.Online)
		return err
	})
	if p := n.status().Pools[0]; p.LentMilliCPU%1000 != 0 || int64(lent.Size())*1000 != p.LentMilliCPU {
		t.Errorf("lends %dm on %s: want whole cores, one per CPU of the pool", p.LentMilliCPU, lent)
	}
	for _, rel := range []string{n.root + "/shared", web.Cgroup, n.root + "/system"} {
		if got := n.cpus(rel); !got.Equals(online) {
			t.Errorf("%s cpuset %s, want %s (online CPUs, none of the lent %s)", rel, got, online, lent)
		}
	}
	for _, rel := range []string{n.root + "-reclaimed", burn.Cgroup} {
		if got := n.cpus(rel); !got.Equals(lent) {
			t.Errorf("%s cpuset %s, want the lent cores %s", rel, got, lent)
		}
	}
	if got := affinity(web.PIDs[0]); !got.Intersection(lent).IsEmpty() {
		t.Errorf("web may run on %s, lent cores %s among them", got, lent)
	}
	if got := affinity(burn.PIDs[0]); !got.IsSubsetOf(lent) {
		t.Errorf("the burner may run on %s, outside the lent cores %s", got, lent)
	}

	// Online load: the fast path hands the cores back.
	n.run("--tier", "shared", "--name", "online", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	n.waitWorkload("online")
	n.eventually(5*time.Second, "the lent cores handed back to online work", func() error {
		p := n.status().Pools[0]
		shared, err := cpuset.Parse(p.Shared)
		if err != nil || p.Exclusive || !n.cpus(n.root+"/shared").Equals(shared) || !n.cpus(web.Cgroup).Equals(shared) || !affinity(web.PIDs[0]).Equals(shared) {
			return fmt.Errorf("pool %+v; shared tier on %s, web on %s", p, n.cpus(n.root+"/shared"), n.cpus(web.Cgroup))
		}
		if p.Control.Mechanism != "cores" || !strings.Contains(p.Control.MechanismChoice, "held by the quota") {
			return fmt.Errorf("mechanism %s (%s)", p.Control.Mechanism, p.Control.MechanismChoice)
		}
		return nil
	})
	throttled := false
	for _, a := range n.status().Actions {
		throttled = throttled || a.Kind == "throttle"
	}
	if !throttled {
		t.Error("no throttle action recorded for the hand-back")
	}
}

// A reclaimed job at its own --memory limit is killed by the kernel, as in any tier: lending
// growing would not lift that limit, so waiting there (v1's oom_kill_disable, which the
// reclaimed tier uses for the limit lending sets) would hold it for ever.
func TestReclaimedAtItsOwnMemoryLimitIsKilled(t *testing.T) {
	n := newNode(t, "")
	n.start()
	cmd, out := n.run("--tier", "reclaimed", "--name", "hog", "--memory", "32Mi", "--", tidalBin, "workload", "memhog", "--target", "100Mi")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 137 {
			t.Errorf("tidal run: %v, want exit 137 (killed at its own limit); output %q", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("a reclaimed job over its own 32Mi limit still runs after 30s (oom_control: %s); output %q",
			n.file("memory", n.root+"-reclaimed/hog", "memory.oom_control"), out)
		if w, ok := n.workload("hog"); ok {
			for _, pid := range w.PIDs { // a task waiting at the limit still dies of SIGKILL
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // tidal run's group
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("tidal run still not ended 10 s after SIGKILL")
		}
	}
}

// Memory short: the lowest reclaim-priority reclaimed workload is stopped first, one at a time,
// and online work is never touched. The watermark is set above what this machine has
// available, so "short" holds without exhausting the CI machine's memory.
func TestMemoryShortEvictsLowestPriorityFirst(t *testing.T) {
	n := newNode(t, "eviction:\n  gracePeriod: 1s\n  coolDown: 2s\n")
	n.start()
	web, _ := n.run("--tier", "shared", "--name", "web", "--", tidalBin, "workload", "memhog", "--target", "32Mi")
	n.run("--tier", "reclaimed", "--reclaim-priority", "5", "--name", "important", "--", tidalBin, "workload", "memhog", "--target", "16Mi")
	// Ignores SIGTERM: must be SIGKILLed after the grace period.
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
	n.eventually(30*time.Second, "both reclaimed workloads evicted", func() error {
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
		n.eventually(10*time.Second, name+" gone", func() error {
			if _, ok := n.workload(name); ok {
				return fmt.Errorf("still listed")
			}
			return nil
		})
	}
	if w, ok := n.workload("web"); !ok || len(w.PIDs) == 0 {
		t.Error("the online workload was stopped")
	}
	if web.ProcessState != nil {
		t.Error("online tidal run exited")
	}
}

// A bad config stops start-up with the key, its line and what is allowed; a malformed request
// is refused with a message and the agent carries on.
func TestBadInputIsRejectedClearly(t *testing.T) {
	n := newNode(t, "cpu:\n  spikeThreshold: 1.7\n")
	out, err := exec.Command(tidalBin, "agent", "--config", n.config).CombinedOutput()
	if err == nil {
		t.Fatal("agent started with spikeThreshold 1.7")
	}
	for _, want := range []string{"tidal.yaml:", "cpu.spikeThreshold", "1.7", "(0, 1]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("config error %q lacks %q", out, want)
		}
	}

	// A problem only the host shows (reserved CPUs it does not have) is found at start, and
	// still points at the line that set it.
	n = newNode(t, "cpu:\n  reservedSystemCPUs: 0-4095\n")
	out, err = exec.Command(tidalBin, "agent", "--config", n.config).CombinedOutput()
	if err == nil {
		t.Fatal("agent started reserving CPUs 0-4095")
	}
	if !regexp.MustCompile(`tidal\.yaml:\d+: cpu\.reservedSystemCPUs: 0-4095: not all of them are online CPUs`).Match(out) {
		t.Errorf("start error %q does not point at the key's line", out)
	}

	n = newNode(t, "")
	n.start()
	cases := map[string][]string{
		"unknown tier":      {"--tier", "gold", "--", "true"},
		"dedicated no cpus": {"--tier", "dedicated", "--", "true"},
		"numa on shared":    {"--tier", "shared", "--numa-binding", "--", "true"},
		"bad name":          {"--tier", "shared", "--name", "Bad/Name", "--", "true"},
		"bad memory":        {"--tier", "shared", "--memory", "lots", "--", "true"},
		"missing command":   {"--tier", "shared", "--", "/no/such/command"},
		"negative cpus":     {"--tier", "shared", "--cpus", "-2", "--", "true"},
		// Flags that would do nothing.
		"burst without cpus":      {"--tier", "shared", "--cpu-burst-percent", "50", "--", "true"},
		"priority of online work": {"--tier", "shared", "--reclaim-priority", "3", "--", "true"},
		// Names of files the kernel keeps in every cgroup folder: a request error (400),
		// not the agent's (500).
		"a cgroup file's name":     {"--tier", "reclaimed", "--name", "tasks", "--", "true"},
		"a controller file's name": {"--tier", "shared", "--name", "cpu.shares", "--", "true"},
	}
	for name, args := range cases {
		cmd, out := n.run(args...)
		if err := cmd.Wait(); err == nil {
			t.Errorf("%s: accepted: %s", name, out)
		} else if out.Len() == 0 || strings.Contains(out.String(), "500") {
			t.Errorf("%s: refused without a message, or as the agent's own failure: %q", name, out)
		}
	}
	if _, err := n.client.Status(); err != nil {
		t.Fatalf("agent died after bad requests: %v", err)
	}
	if s := n.status(); len(s.Workloads) != 0 {
		t.Errorf("refused requests left workloads: %+v", s.Workloads)
	}
}

// After kill -9 and a restart, workloads keep their tiers and dedicated cores, online cgroups
// are not rewritten, and lending sits at its minimum until fresh metrics arrive.
func TestRestartAfterKill9(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	n := newNode(t, "cpu:\n  growStepMilliCPU: 1000\nloops:\n  slowInterval: 500ms\n  metricsStaleAfter: 2s\n")
	n.start()
	n.run("--tier", "dedicated", "--cpus", "1", "--name", "db", "--", "sleep", "120")
	n.run("--tier", "shared", "--name", "web", "--", "sleep", "120")
	n.run("--tier", "reclaimed", "--name", "batch", "--", tidalBin, "workload", "burner", "--threads", "1")
	db := n.waitWorkload("db")
	n.waitWorkload("web")
	n.waitWorkload("batch")
	n.eventually(10*time.Second, "lending grows", func() error {
		if s := n.status(); s.Lendable.MilliCPU <= 100 {
			return fmt.Errorf("lendable %dm", s.Lendable.MilliCPU)
		}
		return nil
	})
	webCPUs := n.file("cpuset", n.root+"/shared/web", "cpuset.cpus")
	n.kill9()

	// Restart with a long slow interval so the check below sees the state before fresh metrics.
	cfg, _ := os.ReadFile(n.config)
	_ = os.WriteFile(n.config, []byte(strings.NewReplacer("slowInterval: 500ms", "slowInterval: 5s", "metricsStaleAfter: 2s", "metricsStaleAfter: 10s").Replace(string(cfg))), 0o600)
	n.start()
	s := n.status()
	if s.MetricsOK || s.Lendable.MilliCPU != 0 {
		t.Errorf("right after restart: metrics fresh %v, lendable %dm; want stale and 0", s.MetricsOK, s.Lendable.MilliCPU)
	}
	for _, p := range s.Pools {
		if p.LentMilliCPU > 100 {
			t.Errorf("numa %d lends %dm right after restart, want the 100m minimum", p.NUMANode, p.LentMilliCPU)
		}
	}
	if got := n.file("cpuset", n.root+"-reclaimed", "cpuset.cpus"); strings.ContainsAny(got, ",-") {
		t.Errorf("reclaimed pool after restart = %s, want one CPU (100m)", got)
	}
	tiers := map[string]string{}
	for _, w := range s.Workloads {
		tiers[w.Name] = w.Tier
	}
	if tiers["db"] != "dedicated" || tiers["web"] != "shared" || tiers["batch"] != "reclaimed" {
		t.Errorf("tiers after restart = %v", tiers)
	}
	dbAfter, _ := n.workload("db")
	if dbAfter.CPUs != db.CPUs || n.file("cpuset", db.Cgroup, "cpuset.cpus") != db.CPUs {
		t.Errorf("dedicated cores moved: %s -> %s", db.CPUs, dbAfter.CPUs)
	}
	if got := n.file("cpuset", n.root+"/shared/web", "cpuset.cpus"); got != webCPUs {
		t.Errorf("online cpuset moved on restart: %s -> %s", webCPUs, got)
	}
}

// An agent restarted beside reclaimed work that holds more memory than the minimum lends it
// what it holds: lending starts at its minimum for CPU, which takes nothing a process holds,
// but a memory limit under what the work holds is refused by v1 (and OOM-kills on v2), and the
// work would be evicted as holding more than is lent. Before, an agent restarted beside a job
// holding 1.5GiB on a node with 20GiB free evicted it within two passes.
func TestRestartKeepsWhatReclaimedWorkHolds(t *testing.T) {
	n := newNode(t, "memory:\n  growStepBytes: 512Mi\nloops:\n  slowInterval: 500ms\n")
	n.start()
	hog := n.startMemoryHog()
	n.kill9()
	n.start()
	hog.keptFor(8)
}

// memoryHog is reclaimed work holding 1GiB.
type memoryHog struct {
	n   *node
	cmd *exec.Cmd
}

// startMemoryHog runs a reclaimed job that allocates 1GiB and holds it, and waits until it does.
func (n *node) startMemoryHog() memoryHog {
	n.t.Helper()
	cmd, _ := n.run("--tier", "reclaimed", "--name", "hog", "--", tidalBin, "workload", "memhog", "--target", "1Gi", "--rate", "512Mi")
	n.waitWorkload("hog")
	h := memoryHog{n: n, cmd: cmd}
	n.eventually(20*time.Second, "the job holds 1GiB", func() error {
		if held := h.held(); held < 1<<30 {
			return fmt.Errorf("holds %dMiB", held>>20)
		}
		return nil
	})
	return h
}

// held is what reclaimed work holds: the working set of tidal's reclaimed tier.
func (h memoryHog) held() int64 {
	h.n.t.Helper()
	m, err := h.n.layout.MemoryStat(h.n.root + "-reclaimed")
	if err != nil {
		h.n.t.Fatal(err)
	}
	return m.WorkingSet
}

// keptFor checks, every 500 ms for passes times, that the agent writes its cgroups, lends the
// job at least what it holds (v1: the tier's limit is not under it) and evicts nothing; then
// that the job still runs and holds its 1GiB.
func (h memoryHog) keptFor(passes int) {
	n := h.n
	n.t.Helper()
	for range passes {
		s := n.status()
		if s.CgroupError != "" {
			n.t.Fatalf("cgroup writes failing: %s", s.CgroupError)
		}
		if held := h.held(); s.Memory == nil || s.Memory.LentBytes < held {
			n.t.Fatalf("%+v is lent to reclaimed work holding %dMiB", s.Memory, held>>20)
		}
		if n.layout.Version == cgroupfs.V1 {
			if limit, _ := strconv.ParseInt(n.file("memory", n.root+"-reclaimed", "memory.limit_in_bytes"), 10, 64); limit < h.held() {
				n.t.Fatalf("reclaimed tier's memory limit %dMiB, under the %dMiB it holds", limit>>20, h.held()>>20)
			}
		}
		for _, a := range s.Actions {
			if a.Kind == "evict" {
				n.t.Fatalf("evicted: %s", a.Reason)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := h.cmd.Process.Signal(syscall.Signal(0)); err != nil || h.cmd.ProcessState != nil {
		n.t.Fatalf("the job did not survive: %v", err)
	}
	if held := h.held(); held < 1<<30 {
		n.t.Fatalf("the job holds %dMiB, want its 1GiB", held>>20)
	}
}

// Without NVML (these machines have no GPU) the node lends no GPU, reclaimed work is told it
// may see none, a request for GPUs is refused with the reason, and online work's environment
// is left alone.
func TestGPUVisibilityWithoutGPUs(t *testing.T) {
	n := newNode(t, "")
	n.start()
	cmd, out := n.run("--tier", "reclaimed", "--", "sh", "-c", "echo visible=$NVIDIA_VISIBLE_DEVICES cuda=[$CUDA_VISIBLE_DEVICES]")
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "visible=void cuda=[]") {
		t.Errorf("reclaimed work's GPU environment: %v %q", err, out)
	}
	cmd, out = n.run("--tier", "shared", "--", "sh", "-c", "echo visible=${NVIDIA_VISIBLE_DEVICES-unset}")
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "visible=unset") {
		t.Errorf("online work's GPU environment touched: %v %q", err, out)
	}
	cmd, out = n.run("--tier", "reclaimed", "--gpus", "1", "--", "true")
	if err := cmd.Wait(); err == nil || !strings.Contains(out.String(), "GPU") {
		t.Errorf("a GPU request on a node without GPUs: %v %q", err, out)
	}
	if s := n.status(); s.Lendable.GPUs != 0 || len(s.GPUs) != 0 {
		t.Errorf("status shows GPUs on a machine without: %+v %+v", s.Lendable, s.GPUs)
	}
}

// The device cgroup keeps reclaimed work away from GPUs not lent to it: with none lent here, a
// reclaimed workload cannot open an NVIDIA device node (char 195:N), while online work reaches
// the device (and finds no driver behind it).
func TestReclaimedWorkCannotOpenUnlentGPUs(t *testing.T) {
	n := newNode(t, "")
	if !n.layout.Has("devices") || n.layout.Version != cgroupfs.V1 {
		t.Skip("needs the cgroup v1 devices controller")
	}
	dev := filepath.Join(t.TempDir(), "nvidia0")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(unix.Mkdev(195, 0))); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	n.start()
	open := "exec 3<" + dev + " && echo opened || echo failed"
	cmd, out := n.run("--tier", "reclaimed", "--", "sh", "-c", open)
	_ = cmd.Wait()
	if !strings.Contains(out.String(), "Operation not permitted") {
		t.Errorf("reclaimed work opening %s: %q, want Operation not permitted (device cgroup)", dev, out)
	}
	cmd, out = n.run("--tier", "shared", "--", "sh", "-c", open)
	_ = cmd.Wait()
	if strings.Contains(out.String(), "Operation not permitted") {
		t.Errorf("online work was denied the device: %q", out)
	}
}

// Every per-workload figure in status is the cgroup's own: a busy loop's CPU rate in status
// matches what its cgroup's counter grows by, a sleeping process shows next to none, and the
// CPU limit shown is the quota in the workload's cgroup (none for one without a cap).
func TestStatusCPUMatchesTheCgroupCounters(t *testing.T) {
	n := newNode(t, "loops:\n  slowInterval: 200ms\n")
	n.start()
	n.run("--tier", "shared", "--name", "busy", "--cpus", "2", "--", tidalBin, "workload", "burner", "--threads", "1")
	n.run("--tier", "shared", "--name", "idle", "--", "sleep", "60")
	busy := n.waitWorkload("busy")
	n.waitWorkload("idle")
	measured := n.cpuUsage(busy.Cgroup, 2*time.Second)
	rate := measured.Milliseconds() * 1000 / 2000 // millicores over the 2 s
	n.eventually(10*time.Second, "status CPU near the cgroup's counter", func() error {
		w, _ := n.workload("busy")
		if lo, hi := rate*6/10, rate*14/10+50; w.MilliCPU < lo || w.MilliCPU > hi {
			return fmt.Errorf("status says %dm, the cgroup's counter %dm", w.MilliCPU, rate)
		}
		return nil
	})
	if w, _ := n.workload("idle"); w.MilliCPU > 50 {
		t.Errorf("a sleeping process shows %dm", w.MilliCPU)
	}
	quota := func(cgroup string) string {
		if n.layout.Version == cgroupfs.V2 {
			return strings.Fields(n.file("cpu", cgroup, "cpu.max"))[0]
		}
		return n.file("cpu", cgroup, "cpu.cfs_quota_us")
	}
	if w, _ := n.workload("busy"); w.CPULimitMilliCPU != 2000 || quota(busy.Cgroup) != "200000" {
		t.Errorf("busy (--cpus 2): status CPU limit %dm, its cgroup's quota %s µs a 100 ms period", w.CPULimitMilliCPU, quota(busy.Cgroup))
	}
	if w, _ := n.workload("idle"); w.CPULimitMilliCPU != 0 || !slices.Contains([]string{"-1", "max"}, quota(w.Cgroup)) {
		t.Errorf("idle (no cap): status CPU limit %dm, its cgroup's quota %s", w.CPULimitMilliCPU, quota(w.Cgroup))
	}
}

// Status shows what the fast path did: with over a core lent, the watch's limits are in
// force; a spinning online workload crosses them, and every cut it made is one online-spike
// throttle among the actions, each crossing counted, the latest with its figures.
func TestStatusShowsTheFastPath(t *testing.T) {
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 1s\nloops:\n  slowInterval: 200ms\n")
	n.start()
	n.eventually(20*time.Second, "lending over a core, the watch's limits in force", func() error {
		s := n.status()
		if f := s.FastPath; s.Lendable.MilliCPU <= 1000 || f == nil || f.WindowLimitMilliCPU <= 0 || f.BurstLimitMilliCPU <= 0 {
			return fmt.Errorf("lendable %dm, fast path %+v", s.Lendable.MilliCPU, s.FastPath)
		}
		return nil
	})
	n.run("--tier", "shared", "--name", "spin", "--", tidalBin, "workload", "burner", "--threads", "1")
	n.eventually(10*time.Second, "the spike cut, as status counts it", func() error {
		s := n.status()
		cuts := 0
		for _, a := range s.Actions {
			if a.Kind == "throttle" && a.Trigger == "online-spike" {
				cuts++
			}
		}
		f := s.FastPath
		switch {
		case cuts == 0:
			return fmt.Errorf("no online-spike throttle yet")
		case f.Cuts != uint64(cuts) || f.Crossings < f.Cuts:
			return fmt.Errorf("fast path %+v, %d online-spike throttles among the actions", f, cuts)
		case f.LastAt.IsZero() || f.LastWindowMilliCPU <= 0 && f.LastBurstMilliCPU <= 0:
			return fmt.Errorf("fast path %+v: no latest crossing", f)
		}
		return nil
	})
}

// When online load ends, reclaimed work's limits grow back once the spike is older than
// cpu.limitWindow, and the burner runs on what is freed; what the node publishes stays down
// until the spike has left cpu.peakWindow.
func TestLimitsUseADipWhilePublishingStaysDamped(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 60s\n  limitWindow: 2s\n")
	n.start()
	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	burn := n.waitWorkload("burn")
	n.eventually(20*time.Second, "lending grows well past its minimum", func() error {
		if s := n.status(); s.Pools[0].LentMilliCPU < 1000 {
			return fmt.Errorf("lends %dm", s.Pools[0].LentMilliCPU)
		}
		return nil
	})
	online, _ := n.run("--tier", "shared", "--name", "online", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	n.waitWorkload("online")
	n.eventually(5*time.Second, "online load cuts lending to its minimum", func() error {
		if s := n.status(); s.Pools[0].LentMilliCPU > 100 {
			return fmt.Errorf("lends %dm", s.Pools[0].LentMilliCPU)
		}
		return nil
	})
	during := n.cpuUsage(burn.Cgroup, time.Second)
	_ = syscall.Kill(online.Process.Pid, syscall.SIGTERM)
	_ = online.Wait()

	n.eventually(15*time.Second, "the limits grow back within the limit window", func() error {
		if s := n.status(); s.Pools[0].LentMilliCPU < 1000 {
			return fmt.Errorf("lends %dm (%s)", s.Pools[0].LentMilliCPU, s.Pools[0].Control.Formula)
		}
		return nil
	})
	after := n.cpuUsage(burn.Cgroup, time.Second)
	s := n.status()
	c := s.Pools[0].Control
	t.Logf("burner CPU per second: %v under online load, %v after it; lent %dm, published %dm; %s; published %s",
		during, after, s.Pools[0].LentMilliCPU, s.Lendable.MilliCPU, c.Formula, c.PublishedFormula)
	if after < 2*during || after < 500*time.Millisecond {
		t.Errorf("the burner got %v per second after online load ended (%v during it): the freed CPU was not lent", after, during)
	}
	if s.Lendable.MilliCPU >= s.Pools[0].LentMilliCPU || c.PublishedCeilingMilliCPU >= c.UsageCeilingMilliCPU {
		t.Errorf("published %dm (ceiling %dm: %s) within the peak window, want under what the limits allow (%dm, ceiling %dm)",
			s.Lendable.MilliCPU, c.PublishedCeilingMilliCPU, c.PublishedFormula, s.Pools[0].LentMilliCPU, c.UsageCeilingMilliCPU)
	}
	if !strings.Contains(c.Formula, "over 2s") || !strings.Contains(c.PublishedFormula, "over 1m0s") {
		t.Errorf("formulas %q and %q do not name their windows", c.Formula, c.PublishedFormula)
	}
}

// An agent whose log nobody reads (its stderr a pipe that is full) still answers, lends and
// cuts: it logs from a goroutine of its own and drops what does not fit, so no lock its fast
// path or its API needs waits on the reader. What it kept is written once the log is read.
func TestAStalledLogHoldsNothing(t *testing.T) {
	n := newNode(t, "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 3s\n  spikeThreshold: 0.5\n")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fillPipe(t, w)
	cmd := exec.Command(tidalBin, "agent", "--config", n.config)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	var drained syncBuffer
	read := make(chan struct{})
	t.Cleanup(func() {
		// Read the log again, so the agent can write what it kept and stop.
		go func() {
			defer close(read)
			_, _ = io.Copy(&drained, r)
		}()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
		<-read
		_ = r.Close()
		for _, want := range []string{`msg="agent running"`, `msg=action kind=throttle`, `msg="agent stopped`} {
			if !strings.Contains(drained.String(), want) {
				t.Errorf("the agent's log, read again, lacks %s:\n%s", want, testutil.Tail(drained.String(), 40))
			}
		}
	})
	n.eventually(10*time.Second, "agent answers with its log stalled", func() error { _, err := n.client.Status(); return err })

	n.lendToABurner()
	n.cutByOnlineLoad(n.status().Lendable.MilliCPU)
}

// fillPipe writes into w until the pipe holds all it can, then makes w block again: the next
// write by whoever holds w waits for a reader.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	fd := int(w.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := unix.Write(fd, chunk); err != nil {
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			t.Fatal(err)
		}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
}
