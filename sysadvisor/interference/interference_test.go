package interference

import (
	"log/slog"
	"os/exec"
	"path"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/perfcount"
)

func TestParseSchedstat(t *testing.T) {
	run, wait, err := parseSchedstat([]byte("171255 1247780 2\n"))
	if err != nil || run != 171255 || wait != 1247780 {
		t.Errorf("parse = %v %v %v", run, wait, err)
	}
	for _, bad := range []string{"", "12", "a b c", "-1 5 1"} {
		if _, _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestRatios(t *testing.T) {
	r := Reading{Run: 10 * time.Millisecond, Wait: time.Millisecond, Periods: 50, Throttled: 5}
	if r.WaitRatio() != 0.1 || r.ThrottledRatio() != 0.1 {
		t.Errorf("ratios %v %v", r.WaitRatio(), r.ThrottledRatio())
	}
	if (Reading{}).WaitRatio() != 0 || (Reading{}).ThrottledRatio() != 0 {
		t.Error("an idle reading has a ratio")
	}
}

// testTree is a writer on this machine's cgroups and a uniquely named root for one test,
// removed when it ends.
func testTree(t testing.TB) (*cgroupfs.Layout, string, *isolation.Writer) {
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	w, err := isolation.NewWriter(layout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return layout, root, w
}

// Two busy loops sharing one CPU each wait about as long as they run; one alone on its CPU
// barely waits; a quota of a quarter CPU throttles it in most periods.
func TestMeterSeesRunQueueWaitAndThrottling(t *testing.T) {
	layout, root, w := testTree(t)
	shared, alone, capped := path.Join(root, "shared"), path.Join(root, "alone"), path.Join(root, "capped")
	one := func(cpu int) plugins.Settings { return plugins.Settings{CPUs: cpuset.New(cpu), Mems: cpuset.New(0)} }
	cappedSettings := one(1)
	cappedSettings.CPUQuota = 250
	if err := w.Apply([]plugins.Cgroup{{Path: root, Settings: plugins.Settings{CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)}},
		{Path: shared, Settings: one(0)}, {Path: alone, Settings: one(1)}, {Path: capped, Settings: cappedSettings}}); err != nil {
		t.Fatal(err)
	}
	var running []*exec.Cmd
	spin := func(cg string) {
		// At the highest priority, so that other processes of a busy machine barely touch
		// the waits measured here.
		cmd := exec.Command("nice", "-n", "-20", "sh", "-c", "read go; while :; do :; done")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		running = append(running, cmd)
		if err := w.Attach(cg, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		_, _ = stdin.Write([]byte("go\n"))
	}
	spin(shared)
	spin(shared)
	spin(alone)
	m := NewMeter("/proc", layout)
	defer m.Close()
	groups := []Group{{Name: "shared", Cgroup: shared}, {Name: "alone", Cgroup: alone}}
	if got := m.Read(groups, 0); got[0].Run != 0 || got[1].Run != 0 {
		t.Errorf("a first reading counted threads seen for the first time: %+v", got)
	}
	time.Sleep(500 * time.Millisecond)
	got := m.Read(groups, 0)
	// The machine is shared: other processes add to both waits alike, so compare the two.
	sharedR, aloneR := got[0], got[1]
	if sharedR.Err != nil || aloneR.Err != nil || sharedR.Run < 100*time.Millisecond || aloneR.Run < 100*time.Millisecond {
		t.Fatalf("readings %+v", got)
	}
	if sharedR.WaitRatio() < 0.7 || sharedR.WaitRatio()-aloneR.WaitRatio() < 0.5 {
		t.Errorf("two loops on one CPU wait %.2f per unit run, one loop alone on its CPU %.2f: want about 1 more", sharedR.WaitRatio(), aloneR.WaitRatio())
	}
	t.Logf("wait per unit of CPU run: two loops on one CPU %.2f, one alone %.2f", sharedR.WaitRatio(), aloneR.WaitRatio())

	// Throttling: the capped group's own quota, a quarter of a CPU, on a CPU of its own.
	for _, cmd := range running {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	spin(capped)
	groups = []Group{{Name: "capped", Cgroup: capped}}
	m.Read(groups, 0)
	time.Sleep(time.Second)
	if r := m.Read(groups, 0)[0]; r.Periods < 3 || r.ThrottledRatio() < 0.5 {
		t.Errorf("a quarter-CPU quota on a busy loop: %d of %d periods throttled", r.Throttled, r.Periods)
	}
	if r := m.Read([]Group{{Name: "gone", Cgroup: path.Join(root, "missing")}}, 0)[0]; r.Err == nil {
		t.Error("a missing cgroup read without error")
	}
}

// With CountCPI, Read also sums the perf counts of a group's threads. Software clocks stand in
// for cycles and instructions (this VM, like most, counts no hardware events): a thread's task
// clock is its CPU time, so the group's count must match the run time schedstat gave.
func TestMeterCountsTheThreadsPerfEvents(t *testing.T) {
	layout, root, w := testTree(t)
	group := path.Join(root, "web")
	all := plugins.Settings{CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)}
	if err := w.Apply([]plugins.Cgroup{{Path: root, Settings: all}, {Path: group, Settings: all}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := w.Attach(group, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	m := NewMeter("/proc", layout)
	defer m.Close()
	// The task clock twice in one group stands in for cycles and instructions: every kernel
	// counts it, and both read alike (see perfcount's test for why not the CPU clock).
	clocks := perfcount.Pair{Name: "task clock per task clock",
		Over: perfcount.Event{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK},
		By:   perfcount.Event{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK}}
	if err := m.CountCPI(clocks); err != nil {
		t.Fatal(err)
	}
	groups := []Group{{Name: "web", Cgroup: group}}
	if r := m.Read(groups, 0)[0]; r.Cycles != 0 || r.Instructions != 0 {
		t.Errorf("a first reading counted threads seen for the first time: %+v", r)
	}
	time.Sleep(400 * time.Millisecond)
	r := m.Read(groups, 0)[0]
	if r.Run < 100*time.Millisecond {
		t.Fatalf("reading %+v", r)
	}
	if counted := time.Duration(r.Cycles); counted < r.Run*8/10 || counted > r.Run*12/10 {
		t.Errorf("the threads' task clock counted %v, schedstat says they ran %v", counted, r.Run)
	}
	if cpi := r.CPI(); cpi < 0.99 || cpi > 1.01 {
		t.Errorf("task clock per task clock %.4f, want 1", cpi)
	}
	if len(m.counted) != 2 {
		t.Errorf("%d threads counted, want the 2 spinners", len(m.counted))
	}
	// A group no longer read lets its threads' counters go.
	m.Read(nil, 0)
	if len(m.counted) != 0 {
		t.Errorf("%d counters left open after their group went", len(m.counted))
	}
}
