package isolation_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// fakeV2 lays out the files a unified hierarchy shows for each cgroup in paths, so the v2 write
// path can be checked on a machine that mounts cgroup v1: file names, units (shares become
// cpu.weight, quota becomes cpu.max) and "max" for unlimited.
func fakeV2(t *testing.T, paths ...string) string {
	t.Helper()
	mount := t.TempDir()
	files := map[string]string{
		"cgroup.controllers": "cpuset cpu memory", "cgroup.subtree_control": "", "cgroup.procs": "",
		"cpuset.cpus": "", "cpuset.mems": "", "cpu.weight": "100", "cpu.idle": "0",
		"cpu.max": "max 100000", "memory.max": "max",
		"cpu.stat": "usage_usec 1500\nuser_usec 1000\n", "memory.current": "4096", "memory.stat": "inactive_file 1024\n",
	}
	for _, p := range append([]string{""}, paths...) {
		dir := filepath.Join(mount, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return mount
}

func TestApplyV2Files(t *testing.T) {
	mount := fakeV2(t, "tidal", "tidal/reclaimed", "tidal/reclaimed/batch")
	l := cgroupfs.NewV2(mount)
	w := newWriter(t, l)
	tree := []plugins.Cgroup{
		{Path: "tidal", Settings: plugins.Settings{CPUs: cpuset.New(0, 1, 2, 3)}},
		{Path: "tidal/reclaimed", Settings: plugins.Settings{CPUs: cpuset.New(2, 3), CPUIdle: plugins.On, CPUQuota: 1500, MemoryLimit: 1 << 30}},
		{Path: "tidal/reclaimed/batch", Settings: plugins.Settings{CPUShares: 2, MemoryLimit: plugins.Unlimited}},
	}
	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tidal/cpuset.cpus":                "0-3",
		"tidal/reclaimed/cpuset.cpus":      "2-3",
		"tidal/reclaimed/cpu.idle":         "1",
		"tidal/reclaimed/cpu.max":          "150000 100000",
		"tidal/reclaimed/memory.max":       strconv.Itoa(1 << 30),
		"tidal/reclaimed/batch/cpu.weight": "1",
		"tidal/reclaimed/batch/memory.max": "max",
	}
	for f, v := range want {
		data, err := os.ReadFile(filepath.Join(mount, f))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(data)); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if got, err := l.CPUUsage("tidal"); err != nil || got != 1500*time.Microsecond {
		t.Errorf("CPUUsage = %v, %v; want 1.5ms", got, err)
	}
	if got, err := l.MemoryUsage("tidal"); err != nil || got != 3072 {
		t.Errorf("MemoryUsage = %v, %v; want 3072", got, err)
	}
	// Unchanged: nothing written.
	before := totalWrites(w)
	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if totalWrites(w) != before {
		t.Error("unchanged v2 settings were written again")
	}
}

// The real unified hierarchy of this machine (on a hybrid host it carries no cpu or memory
// controller): cgroups are created, a process joins one, its CPU time and pressure are read,
// and the cgroup is removed.
func TestRealUnifiedHierarchy(t *testing.T) {
	isolationtest.Layout(t) // root check
	mount := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		mount = "/sys/fs/cgroup/unified"
	}
	l, err := cgroupfs.Detect(mount, "v2")
	if err != nil {
		t.Skipf("no cgroup2 mount: %v", err)
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	path := root + "/reclaimed/spin"
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := w.Attach(path, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := l.Procs(root, true)
	if err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("Procs = %v, %v", pids, err)
	}
	// Wait for the usage rather than sleep a fixed time: on a loaded machine the spinner may
	// get little of any one 200ms.
	var used time.Duration
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if used, err = l.CPUUsage(path); err != nil || used >= 50*time.Millisecond {
			break
		}
	}
	if err != nil || used < 50*time.Millisecond {
		t.Errorf("CPUUsage of a spinning process after 10s = %v, %v", used, err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir("cpu", path), "cpu.pressure")); err != nil {
		t.Errorf("no per-cgroup PSI file: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := w.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// Clearing IO throttles (an empty list: IO isolation off) where the kernel has no throttle
// files (no io.max: blk-throttle not built, or io not enabled for the cgroup) has nothing to
// clear and is no failure; where io.max is there, every device's throttle goes.
func TestClearingIOWithoutThrottleFiles(t *testing.T) {
	mount := fakeV2(t, "tidal", "tidal/reclaimed")
	w := newWriter(t, cgroupfs.NewV2(mount))
	clear := []plugins.Cgroup{{Path: "tidal/reclaimed", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{}}}}
	if err := w.Apply(clear); err != nil {
		t.Fatalf("clearing IO without io.max: %v", err)
	}
	file := filepath.Join(mount, "tidal/reclaimed/io.max")
	if err := os.WriteFile(file, []byte("254:0 rbps=1000 wbps=max riops=max wiops=max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(clear); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); strings.TrimSpace(string(got)) != "254:0 rbps=max wbps=max riops=max wiops=max" {
		t.Errorf("io.max after clearing: %q, want the device's throttle lifted", got)
	}
}

// A cgroup that will not go at once is tried again without the writer's lock: writes (the
// fast path's) go on meanwhile, and the cgroup goes once it can.
func TestRemoveTriesAgainWithoutTheLock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	mount := fakeV2(t, "tidal", "tidal/a", "tidal/a/busy", "tidal/b")
	// A mount point below the cgroup keeps it busy, as a process that has exited and is not
	// yet reaped keeps a real one.
	busy := filepath.Join(mount, "tidal/a/busy")
	if err := unix.Mount("tidal-test", busy, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = unix.Unmount(busy, unix.MNT_DETACH)
		}
	}()
	w := newWriter(t, cgroupfs.NewV2(mount))
	paused := make(chan struct{}, 8)
	resume := make(chan struct{})
	isolation.HoldRemoveTries(w, func(time.Duration) {
		paused <- struct{}{}
		<-resume
	})
	removed := make(chan error, 1)
	go func() { removed <- w.Remove("tidal/a") }()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy cgroup was not tried again")
	}

	written := make(chan error, 1)
	go func() {
		written <- w.ApplyUrgent([]plugins.Cgroup{{Path: "tidal/b", Settings: plugins.Settings{CPUQuota: 500}}})
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(resume)
		t.Fatal("a write waited for a removal's tries")
	}
	if got, _ := os.ReadFile(filepath.Join(mount, "tidal/b/cpu.max")); string(got) != "50000 100000" {
		t.Errorf("tidal/b cpu.max = %q during the removal, want 50000 100000", got)
	}

	if err := unix.Unmount(busy, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	close(resume)
	if err := <-removed; err != nil {
		t.Fatalf("remove once no longer busy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mount, "tidal/a")); !os.IsNotExist(err) {
		t.Errorf("tidal/a still there after Remove: %v", err)
	}
}
