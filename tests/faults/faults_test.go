package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/tests/testutil"
)

// slow loops so that "right after a restart" is observable before fresh metrics arrive.
const restartConfig = "cpu:\n  growStepMilliCPU: 1000\nloops:\n  slowInterval: 3s\n  metricsStaleAfter: 6s\n"

// The agent SIGKILLed 8 times under load, at random moments (some in the middle of a cgroup
// write pass or a checkpoint write, while workloads are admitted and released). Between kills
// and after each restart: every workload's processes stay in their cgroups; the online
// workload's cpuset and tasks never move; reclaimed work keeps the lowest CPU priority even
// while no agent runs; after each restart lending starts at its minimum, the checkpoint loads
// (never torn) and every workload is known again with its tier.
func TestAgentSIGKILLedRepeatedlyUnderLoad(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	o := testutil.Record(t, "agent SIGKILLed repeatedly under load, mid write pass and mid checkpoint")
	a := testutil.NewAgent(t, tidalBin, restartConfig, "", false)
	a.Start()
	a.Run("--tier", "shared", "--name", "web", "--", "sleep", "600")
	a.Run("--tier", "reclaimed", "--name", "batch", "--", tidalBin, "workload", "burner", "--threads", "1")
	web := a.WaitWorkload("web")
	batch := a.WaitWorkload("batch")
	webCPUs, _ := a.File("cpuset", web.Cgroup, "cpuset.cpus")
	webPIDs := procs(a, "cpu", web.Cgroup)

	// Churn beside the kills: short-lived reclaimed workloads admitted and released through
	// the API, so kills land in the middle of admissions, cgroup writes and checkpoint writes.
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command("sleep", "30")
			if cmd.Start() != nil {
				continue
			}
			name := fmt.Sprintf("churn-%d", i)
			if _, err := a.Client.Admit(agent.AdmitRequest{Name: name, Tier: "reclaimed", PID: cmd.Process.Pid}); err == nil {
				n++
			}
			time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = a.Client.Release(name) // may fail while the agent is down: restore drops it
		}
	}()

	kills, minLendOK := 8, 0
	var worstRestart time.Duration
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		a.Kill9()
		// No agent now: what the kernel holds must still be right.
		if got := procs(a, "cpu", web.Cgroup); !contains(got, webPIDs[0]) {
			t.Errorf("kill %d: online pid %d left its cgroup (procs %v)", i, webPIDs[0], got)
		}
		if v, ok := lowestPriority(a, batch.Cgroup); !ok {
			t.Errorf("kill %d: reclaimed %s while no agent runs", i, v)
		}
		start := time.Now()
		a.Start()
		worstRestart = max(worstRestart, time.Since(start))
		s := a.Status()
		if !s.MetricsOK && s.Lendable.MilliCPU == 0 {
			minLendOK++
		} else {
			t.Errorf("restart %d: metrics fresh %v, lendable %dm; want lending at its minimum", i, s.MetricsOK, s.Lendable.MilliCPU)
		}
		for _, p := range s.Pools {
			if p.LentMilliCPU > 100 {
				t.Errorf("restart %d: numa %d lends %dm, want the 100m minimum", i, p.NUMANode, p.LentMilliCPU)
			}
		}
		tiers := map[string]string{}
		for _, w := range s.Workloads {
			tiers[w.Name] = w.Tier
		}
		if tiers["web"] != "shared" || tiers["batch"] != "reclaimed" {
			t.Errorf("restart %d: workloads %v", i, tiers)
		}
		if got, _ := a.File("cpuset", web.Cgroup, "cpuset.cpus"); got != webCPUs {
			t.Errorf("restart %d: online cpuset moved %s -> %s", i, webCPUs, got)
		}
	}
	close(stop)
	n := <-churned
	if !a.Alive() {
		t.Fatal("agent died")
	}
	if strings.Contains(a.Log.String(), "ignoring checkpoint") {
		t.Errorf("a checkpoint was torn by a kill:\n%s", testutil.Tail(a.Log.String(), 20))
	}
	if got := procs(a, "cpu", web.Cgroup); len(got) != len(webPIDs) || got[0] != webPIDs[0] {
		t.Errorf("online tasks changed: %v -> %v", webPIDs, got)
	}
	// Churned workloads that were released while the agent was down are dropped: only the two
	// long-lived workloads remain once the churn stopped.
	testutil.Eventually(t, 20*time.Second, "churned workloads gone", func() error {
		var extra []string
		for _, w := range a.Status().Workloads {
			if strings.HasPrefix(w.Name, "churn-") && len(w.PIDs) == 0 {
				_ = a.Client.Release(w.Name)
				extra = append(extra, w.Name)
			} else if strings.HasPrefix(w.Name, "churn-") {
				extra = append(extra, w.Name+"(running)")
			}
		}
		if len(extra) > 0 {
			return fmt.Errorf("left: %v", extra)
		}
		return nil
	})
	o.Add(t, "%d SIGKILLs, %d churned admissions beside them; %d/%d restarts began at the lending minimum; slowest restart to an answering API %s", kills, n, minLendOK, kills, worstRestart.Round(time.Millisecond))
	o.Add(t, "online pid and cpuset unchanged through every kill; reclaimed %s throughout; no torn checkpoint", func() string { v, _ := lowestPriority(a, batch.Cgroup); return v }())
}

// mountTmpfs mounts a small tmpfs of the test's own at dir and unmounts it at the end.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tidal-test", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		for i := 0; i < 50; i++ {
			if err := syscall.Unmount(dir, 0); err == nil || err == syscall.EINVAL {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cannot unmount %s", dir)
	})
}

// The state folder full (a 64 KiB tmpfs filled up) and then read-only (remounted): the agent
// keeps running and admitting, logs each failed checkpoint write, keeps the last good
// checkpoint; once there is room again the next change writes it.
func TestStateFolderFullOrReadOnly(t *testing.T) {
	o := testutil.Record(t, "state folder full, then read-only")
	state := filepath.Join(t.TempDir(), "state")
	mountTmpfs(t, state, "64k")
	a := testutil.NewAgent(t, tidalBin, "cpu:\n  mechanism: quota\n", state, false)
	a.Start()
	a.Run("--tier", "shared", "--name", "before", "--", "sleep", "600")
	a.WaitWorkload("before")
	good, err := os.ReadFile(filepath.Join(state, "agent_state.json"))
	if err != nil || !strings.Contains(string(good), `"before"`) {
		t.Fatalf("checkpoint before the fault: %v", err)
	}

	// Full.
	fill := filepath.Join(state, "filler")
	_ = os.WriteFile(fill, make([]byte, 1<<20), 0o600) // ENOSPC part way: the disk is full
	a.Run("--tier", "reclaimed", "--name", "full", "--", "sleep", "600")
	a.WaitWorkload("full")
	testutil.Eventually(t, 5*time.Second, "failed checkpoint write logged", func() error {
		if !strings.Contains(a.Log.String(), "cannot write checkpoint") {
			return fmt.Errorf("not logged")
		}
		return nil
	})
	if now, _ := os.ReadFile(filepath.Join(state, "agent_state.json")); string(now) != string(good) {
		t.Error("the last good checkpoint changed while the disk was full")
	}
	leftovers, _ := filepath.Glob(filepath.Join(state, "agent_state.json.tmp-*"))
	o.Add(t, "full: admission still works, checkpoint write fails and is logged, last good checkpoint kept, %d temp files left", len(leftovers))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}

	// Read-only: a read-only bind mount of the folder over itself (the agent's open lock file
	// stays on the writable mount beneath, as with a file system remounted read-only).
	_ = os.Remove(fill)
	if err := syscall.Mount(state, state, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	bound := true
	unbind := func() {
		if bound {
			if err := syscall.Unmount(state, 0); err != nil {
				t.Errorf("unmount the read-only bind: %v", err)
			}
			bound = false
		}
	}
	t.Cleanup(unbind)
	if err := syscall.Mount("", state, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	a.Run("--tier", "reclaimed", "--name", "readonly", "--", "sleep", "600")
	a.WaitWorkload("readonly")
	if !a.Alive() {
		t.Fatal("agent died")
	}
	o.Add(t, "read-only while running: admission still works, the failed checkpoint write is logged")

	// A restart while the folder is still read-only: the agent cannot take its lock and
	// exits with an error naming the folder (no panic, no crash loop of half-started agents);
	// the workloads keep their cgroups and the last settings written.
	a.Kill9()
	quota, _ := a.File("cpu", a.Root+"-reclaimed", "cpu.cfs_quota_us")
	out, err := exec.Command(tidalBin, "agent", "--config", a.Config).CombinedOutput()
	if err == nil || strings.Contains(string(out), "panic") || !strings.Contains(string(out), state) {
		t.Errorf("agent on a read-only state folder: %v\n%s", err, out)
	}
	for _, name := range []string{"before", "full"} {
		if len(procs(a, "cpu", plugins.WorkloadPath(a.Root, map[string]qos.Tier{"before": qos.Shared, "full": qos.Reclaimed}[name], name))) == 0 {
			t.Errorf("workload %s lost its processes while no agent could start", name)
		}
	}
	after, _ := a.File("cpu", a.Root+"-reclaimed", "cpu.cfs_quota_us")
	if after != quota {
		t.Errorf("reclaimed quota changed with no agent running: %s -> %s", quota, after)
	}
	o.Add(t, "restart on a read-only folder: exits with %q; workloads keep their cgroups and the last settings written (reclaimed cpu.cfs_quota_us %s)",
		lastLine(string(out)), after)

	unbind()
	a.Start()
	a.Run("--tier", "shared", "--name", "after", "--", "sleep", "600")
	a.WaitWorkload("after")
	testutil.Eventually(t, 5*time.Second, "checkpoint written again", func() error {
		data, _ := os.ReadFile(filepath.Join(state, "agent_state.json"))
		for _, n := range []string{"before", "full", "readonly", "after"} {
			if !strings.Contains(string(data), `"`+n+`"`) {
				return fmt.Errorf("%s missing", n)
			}
		}
		return nil
	})
	o.Add(t, "writable again: the agent starts, rebuilds all workloads from cgroups and checkpoints all 4")

	// And the checkpoint is good: a restart keeps all four.
	a.Kill9()
	a.Start()
	if n := len(a.Status().Workloads); n != 4 {
		t.Errorf("after restart %d workloads, want 4", n)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// A workload's cgroup removed behind the agent (its process gone, its directories rmdir'ed
// in every hierarchy), and a controller file that refuses writes: the agent does not crash,
// keeps managing the others, forgets the gone workload and reports no stuck error.
func TestCgroupRemovedBehindTheAgent(t *testing.T) {
	o := testutil.Record(t, "a workload cgroup removed behind the agent")
	a := testutil.NewAgent(t, tidalBin, "loops:\n  slowInterval: 500ms\n", "", true)
	a.Start()
	a.Run("--tier", "shared", "--name", "bystander", "--", "sleep", "600")
	by := a.WaitWorkload("bystander")

	// Kill the victim's processes and remove its cgroup from under the agent. The agent itself
	// collects an emptied workload within a pass: when it got there first, the fault did not
	// happen, so try again with a new victim.
	var w reporter.Workload
	removed := 0
	for try := 0; try < 5 && removed == 0; try++ {
		name := fmt.Sprintf("victim-%d", try)
		victim := a.Run("--tier", "reclaimed", "--name", name, "--", "sleep", "600")
		w = a.WaitWorkload(name)
		for _, pid := range procs(a, "cpu", w.Cgroup) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-victim.Process.Pid, syscall.SIGKILL)
		_ = victim.Wait()
		for _, mount := range a.Layout.Mounts() {
			dir := filepath.Join(mount, w.Cgroup)
			for i := 0; i < 50; i++ {
				if err := os.Remove(dir); err == nil {
					removed++
					break
				} else if os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	if removed == 0 {
		t.Fatal("could not remove a victim's cgroup before the agent collected it, 5 times")
	}
	testutil.Eventually(t, 15*time.Second, "victim forgotten", func() error {
		if _, ok := a.Workload(w.Name); ok {
			return fmt.Errorf("still listed")
		}
		return nil
	})
	if !a.Alive() {
		t.Fatal("agent died")
	}
	if got := procs(a, "cpu", by.Cgroup); !contains(got, by.PIDs[0]) {
		t.Errorf("bystander left its cgroup: %v", got)
	}
	time.Sleep(1500 * time.Millisecond) // a few passes after it went
	s := a.Status()
	if s.CgroupError != "" {
		t.Errorf("stuck cgroup error: %s", s.CgroupError)
	}
	m, _ := a.Scrape()
	errs := 0
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "tidal_cgroup_write_errors_total{") && !strings.HasSuffix(line, " 0") {
			errs++
		}
	}
	o.Add(t, "cgroup removed in %d hierarchies: agent alive, victim forgotten, bystander untouched, no stuck cgroup error (%d knobs with write errors counted)", removed, errs)
}

// The arbiter SIGKILLed and restarted: while it is gone the lease expires and the node lends
// the queue nothing (the safe state); the agent never crashes; once the arbiter is back (same
// state folder) the lease is granted again.
func TestArbiterKilledAndRestarted(t *testing.T) {
	o := testutil.Record(t, "arbiter SIGKILLed and restarted")
	arb := testutil.NewArbiter(t, tidalBin, "node-a")
	a := testutil.NewAgent(t, tidalBin, arb.AgentConfig("node-a")+"loops:\n  slowInterval: 500ms\n", "", false)
	a.Start()
	a.Run("--tier", "reclaimed", "--queue", "queue-1", "--name", "q", "--", "sleep", "600")
	a.WaitWorkload("q")
	active := func() bool {
		s := a.Status()
		return s.Lease != nil && s.Lease.Active
	}
	testutil.Eventually(t, 20*time.Second, "lease active", func() error {
		if !active() {
			return fmt.Errorf("no active lease")
		}
		return nil
	})
	arb.Kill9()
	killed := time.Now()
	testutil.Eventually(t, 20*time.Second, "lease expired", func() error {
		if active() {
			return fmt.Errorf("lease still active")
		}
		return nil
	})
	expiredAfter := time.Since(killed)
	if !a.Alive() {
		t.Fatal("agent died")
	}
	arb.Start()
	back := time.Now()
	testutil.Eventually(t, 20*time.Second, "lease active again", func() error {
		if !active() {
			return fmt.Errorf("no active lease")
		}
		return nil
	})
	o.Add(t, "lease inactive %s after the kill (TTL 3s); active again %s after the restart; agent alive throughout",
		expiredAfter.Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond))
}

// A cgroup file that refuses writes: the reclaimed tier's cpu.cfs_quota_us is covered by a
// read-only bind mount of a file holding "-1" (no cap), so every write of it fails (EROFS) while
// reads see a value the agent did not write. The documented safe state: the agent does not
// crash, reports the failing writes (status, tidal_cgroup_write_errors_total), lends nothing
// (published lendable 0, lending at its minimum) for as long as writes fail, and recovers by
// itself once the file takes writes again.
func TestCgroupFileRefusesWrites(t *testing.T) {
	o := testutil.Record(t, "a cgroup file refusing writes (read-only bind mount over cpu.cfs_quota_us)")
	// The quota mechanism: the refusing file is one the agent writes whenever lending moves.
	a := testutil.NewAgent(t, tidalBin, "cpu:\n  mechanism: quota\nloops:\n  slowInterval: 300ms\n", "", true)
	a.Start()
	a.Run("--tier", "reclaimed", "--name", "batch", "--", "sleep", "600")
	a.WaitWorkload("batch")
	testutil.Eventually(t, 20*time.Second, "lending grows", func() error {
		if s := a.Status(); s.Lendable.MilliCPU <= 100 {
			return fmt.Errorf("lendable %dm", s.Lendable.MilliCPU)
		}
		return nil
	})
	target := filepath.Join(a.Layout.Dir("cpu", a.Root+"-reclaimed"), "cpu.cfs_quota_us")
	fake := filepath.Join(t.TempDir(), "quota")
	if err := os.WriteFile(fake, []byte("-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(fake, target, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount over a cgroup file: %v", err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			if err := syscall.Unmount(target, 0); err != nil {
				t.Errorf("unmount %s: %v", target, err)
			}
			mounted = false
		}
	}
	t.Cleanup(unmount) // before the cgroup root is removed (cleanups run last-in first-out)
	if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	broke := time.Now()
	var cgErr string
	testutil.Eventually(t, 20*time.Second, "failing writes reported and lending at its minimum", func() error {
		s := a.Status()
		if s.CgroupError == "" || s.Lendable.MilliCPU != 0 {
			return fmt.Errorf("cgroup error %q, lendable %dm", s.CgroupError, s.Lendable.MilliCPU)
		}
		cgErr = s.CgroupError
		return nil
	})
	safeAfter := time.Since(broke)
	// It stays safe while writes keep failing.
	for i := 0; i < 5; i++ {
		time.Sleep(300 * time.Millisecond)
		if s := a.Status(); s.Lendable.MilliCPU != 0 || s.CgroupError == "" {
			t.Errorf("while writes fail: lendable %dm, cgroup error %q", s.Lendable.MilliCPU, s.CgroupError)
		}
	}
	m, _ := a.Scrape()
	counted := strings.Contains(m, `tidal_cgroup_write_errors_total{knob="cpu.quota"}`) && !strings.Contains(m, `tidal_cgroup_write_errors_total{knob="cpu.quota"} 0`+"\n")
	if !counted {
		t.Error("the failing cpu.quota writes are not counted in tidal_cgroup_write_errors_total")
	}
	if !a.Alive() {
		t.Fatal("agent died")
	}
	unmount()
	fixed := time.Now()
	testutil.Eventually(t, 30*time.Second, "recovered: no error, lending again", func() error {
		s := a.Status()
		if s.CgroupError != "" || s.Lendable.MilliCPU <= 100 {
			return fmt.Errorf("cgroup error %q, lendable %dm", s.CgroupError, s.Lendable.MilliCPU)
		}
		return nil
	})
	q, _ := a.File("cpu", a.Root+"-reclaimed", "cpu.cfs_quota_us")
	o.Add(t, "safe state (error reported, lendable 0) %s after the file refused writes; held while it refused; write errors counted: %v", safeAfter.Round(100*time.Millisecond), counted)
	o.Add(t, "status said %q", firstN(cgErr, 140))
	o.Add(t, "recovered by itself %s after the file took writes again (quota %s)", time.Since(fixed).Round(100*time.Millisecond), q)
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
