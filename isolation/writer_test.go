package isolation_test

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newWriter(t *testing.T, l *cgroupfs.Layout) *isolation.Writer {
	t.Helper()
	w, err := isolation.NewWriter(l, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func read(t *testing.T, l *cgroupfs.Layout, controller, path, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(l.Dir(controller, path), file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func totalWrites(w *isolation.Writer) uint64 {
	var n uint64
	for _, v := range w.Stats().Writes {
		n += v
	}
	return n
}

// A real cgroup v1 tree: settings land in the files, unchanged settings cost no write, and a
// cpuset that moves between siblings is applied in an order the kernel accepts.
func TestApplyRealCgroupsV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 {
		t.Skip("this host runs cgroup v2; the v2 path is covered by TestApplyV2Files")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	all, err := cpuset.Parse(read(t, l, "cpuset", "", "cpuset.cpus"))
	if err != nil {
		t.Fatal(err)
	}
	if all.Size() < 2 {
		t.Skip("needs two CPUs")
	}
	cpus := all.List()
	first, last := cpuset.New(cpus[0]), cpuset.New(cpus[len(cpus)-1])
	tree := func(sharedCPUs, reclaimedCPUs cpuset.CPUSet, quota int64) []plugins.Cgroup {
		return []plugins.Cgroup{
			{Path: root, Settings: plugins.Settings{CPUs: all}},
			{Path: root + "/shared", Settings: plugins.Settings{CPUs: sharedCPUs, CPUShares: 1024}},
			{Path: root + "/shared/web", Settings: plugins.Settings{CPUs: sharedCPUs}},
			{Path: root + "/reclaimed", Settings: plugins.Settings{CPUs: reclaimedCPUs, CPUIdle: plugins.On, CPUQuota: quota, MemoryLimit: 256 << 20}},
			{Path: root + "/reclaimed/batch", Settings: plugins.Settings{CPUs: reclaimedCPUs, CPUIdle: plugins.On, CPUQuota: quota, MemoryLimit: 256 << 20}},
		}
	}
	if err := w.Apply(tree(first, last, 500)); err != nil {
		t.Fatal(err)
	}
	type check struct{ controller, path, file, want string }
	checks := []check{
		{"cpuset", root + "/shared/web", "cpuset.cpus", first.String()},
		{"cpuset", root + "/reclaimed/batch", "cpuset.cpus", last.String()},
		{"cpu", root + "/reclaimed/batch", "cpu.idle", "1"},
		{"cpu", root + "/reclaimed/batch", "cpu.cfs_quota_us", "50000"},
		{"cpu", root + "/reclaimed", "cpu.cfs_quota_us", "50000"},
		{"cpu", root + "/shared", "cpu.shares", "1024"},
		{"memory", root + "/reclaimed/batch", "memory.limit_in_bytes", "268435456"},
	}
	if read(t, l, "cpuset", "", "cpuset.sched_load_balance") == "1" {
		// The root balances every CPU: tidal's cgroups need not, and then a write to their
		// cpuset.cpus does not rebuild the scheduling domains.
		checks = append(checks,
			check{"cpuset", root + "/reclaimed/batch", "cpuset.sched_load_balance", "0"},
			check{"cpuset", root, "cpuset.sched_load_balance", "0"})
	}
	for _, c := range checks {
		if got := read(t, l, c.controller, c.path, c.file); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.path, c.file, got, c.want)
		}
	}

	// Same settings again: no write at all.
	before := totalWrites(w)
	if err := w.Apply(tree(first, last, 500)); err != nil {
		t.Fatal(err)
	}
	if after := totalWrites(w); after != before {
		t.Errorf("unchanged settings wrote %d times", after-before)
	}

	// Swap the two pools and lower the quota: children must narrow before parents, quotas
	// drop child-first (the v1 kernel refuses a parent quota under a child's).
	if err := w.Apply(tree(last, first, 200)); err != nil {
		t.Fatalf("swap pools: %v", err)
	}
	if got := read(t, l, "cpuset", root+"/reclaimed/batch", "cpuset.cpus"); got != first.String() {
		t.Errorf("after swap reclaimed/batch cpus = %s, want %s", got, first)
	}
	if got := read(t, l, "cpu", root+"/reclaimed", "cpu.cfs_quota_us"); got != "20000" {
		t.Errorf("after shrink quota = %s, want 20000", got)
	}
	// And raise it again: parents first.
	if err := w.Apply(tree(last, first, 1500)); err != nil {
		t.Fatalf("raise quota: %v", err)
	}

	// Drift made by someone else is repaired once the writer forgets its cache.
	if err := os.WriteFile(filepath.Join(l.Dir("cpu", root+"/shared"), "cpu.shares"), []byte("100"), 0); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(tree(last, first, 1500)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "cpu", root+"/shared", "cpu.shares"); got != "1024" {
		t.Errorf("drift not repaired: cpu.shares = %s", got)
	}

	// So is a cpuset changed behind tidal's back: the values read while re-loading the cgroup
	// after Forget are the ones compared, not a stale memory of them.
	if err := os.WriteFile(filepath.Join(l.Dir("cpuset", root+"/reclaimed"), "cpuset.cpus"), []byte(all.String()), 0); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(tree(last, first, 1500)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "cpuset", root+"/reclaimed", "cpuset.cpus"); got != first.String() {
		t.Errorf("cpuset drift not repaired: reclaimed cpus = %s, want %s", got, first)
	}
	if n := w.Stats().Repairs["cpuset.cpus"]; n != 1 {
		t.Errorf("cpuset repairs = %d, want 1", n)
	}
}

func TestAttachAndRemoveV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 {
		t.Skip("v1 only")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	path := root + "/reclaimed/sleeper"
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := w.Attach(path, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cpu", "cpuset", "memory"} {
		pids := read(t, l, c, path, "cgroup.procs")
		if pids != strconv.Itoa(cmd.Process.Pid) {
			t.Errorf("%s cgroup.procs = %q, want the sleeper", c, pids)
		}
	}
	if err := w.Remove(path); err == nil {
		t.Error("removing a cgroup with a live process succeeded")
	}
	if n, err := w.Signal(path, 9); err != nil || n != 1 {
		t.Fatalf("signal reached %d processes: %v", n, err)
	}
	_ = cmd.Wait()
	if err := w.Remove(path); err != nil {
		t.Fatal(err)
	}
	if l.Exists(path) {
		t.Error("cgroup still exists after Remove")
	}
}

// Foreign cgroups (a pod's, made by the kubelet) are written while they exist and never
// created; one that is gone is skipped without an error, so a pod ending fails nothing.
func TestForeignCgroupsAreNeverCreated(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	pod := root + "/kubepods/podA"
	// The "kubelet" makes the pod's cgroup (with the writer, as any owner would) first.
	if err := w.Apply([]plugins.Cgroup{{Path: root}, {Path: root + "/kubepods"}, {Path: pod}}); err != nil {
		t.Fatal(err)
	}
	gone := root + "/kubepods/podGone"
	err := w.Apply([]plugins.Cgroup{
		{Path: pod, Foreign: true, Settings: plugins.Settings{CPUQuota: 500}},
		{Path: gone, Foreign: true, Settings: plugins.Settings{CPUQuota: 500}},
	})
	if err != nil {
		t.Fatalf("a missing foreign cgroup must not fail Apply: %v", err)
	}
	if l.Exists(gone) {
		t.Fatalf("foreign cgroup %s was created", gone)
	}
	quota := "cpu.cfs_quota_us"
	if l.Version == cgroupfs.V2 {
		quota = "cpu.max"
	}
	if got := read(t, l, "cpu", pod, quota); !strings.HasPrefix(got, "50000") {
		t.Fatalf("foreign cgroup not written: %s = %q", quota, got)
	}
	w.ForgetPath(pod)
	if !l.Exists(pod) {
		t.Fatal("ForgetPath removed the cgroup")
	}
}

// Drift someone else makes is found by the next re-read (Forget), written back and counted
// as a repair; tidal's own changes are not repairs.
func TestDriftIsRepairedAndCounted(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	cg := []plugins.Cgroup{{Path: root}, {Path: root + "/pod", Settings: plugins.Settings{CPUQuota: 500}}}
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	cg[1].Settings.CPUQuota = 700 // tidal's own change
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	repairs := func() uint64 {
		var n uint64
		for _, v := range w.Stats().Repairs {
			n += v
		}
		return n
	}
	if n := repairs(); n != 0 {
		t.Fatalf("%d repairs after tidal's own writes", n)
	}
	// Someone else (the kubelet) rewrites the quota.
	file, value := "cpu.cfs_quota_us", "-1"
	if l.Version == cgroupfs.V2 {
		file, value = "cpu.max", "max 100000"
	}
	if err := os.WriteFile(filepath.Join(l.Dir("cpu", root+"/pod"), file), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "cpu", root+"/pod", file); !strings.HasPrefix(got, "70000") {
		t.Fatalf("drift not repaired: %s = %q", file, got)
	}
	if n := repairs(); n != 1 {
		t.Fatalf("repairs = %d, want 1", n)
	}
}

// An unchanged tree costs nothing after a clean Apply, yet whatever makes the writer's memory
// doubtful (a removed cgroup, Forget) or a changed setting brings the files to it again.
func TestUnchangedTreeAfterRemoveAndForget(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	cg := []plugins.Cgroup{{Path: root}, {Path: root + "/a", Settings: plugins.Settings{CPUQuota: 500}}}
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	// The caller's slice changing in place is a changed tree.
	cg[1].Settings.CPUQuota = 700
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	file, want := "cpu.cfs_quota_us", "70000"
	if l.Version == cgroupfs.V2 {
		file = "cpu.max"
	}
	if got := read(t, l, "cpu", root+"/a", file); !strings.HasPrefix(got, want) {
		t.Fatalf("changed quota not written: %s = %q", file, got)
	}
	// A cgroup removed through the writer is created again by the same tree.
	if err := w.Remove(root + "/a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "cpu", root+"/a", file); !strings.HasPrefix(got, want) {
		t.Fatalf("removed cgroup not re-created: %s = %q", file, got)
	}
	// Drift under the same tree is repaired after Forget.
	drift := "-1"
	if l.Version == cgroupfs.V2 {
		drift = "max 100000"
	}
	if err := os.WriteFile(filepath.Join(l.Dir("cpu", root+"/a"), file), []byte(drift), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "cpu", root+"/a", file); !strings.HasPrefix(got, want) {
		t.Fatalf("drift not repaired: %s = %q", file, got)
	}
}

// A cgroup removed behind tidal's back from one hierarchy is created again by the next
// re-read (Forget), while ones still there everywhere are only looked up.
func TestForgetRecreatesAMissingHierarchyV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 {
		t.Skip("cgroup v1 only")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	cg := []plugins.Cgroup{{Path: root}, {Path: root + "/a"}, {Path: root + "/b"}}
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(l.Dir("memory", root+"/a")); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(cg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory"} {
		for _, p := range []string{root + "/a", root + "/b"} {
			if _, err := os.Stat(l.Dir(c, p)); err != nil {
				t.Errorf("%s in %s: %v", p, c, err)
			}
		}
	}
	if got := read(t, l, "cpuset", root+"/a", "cpuset.cpus"); got == "" {
		t.Error("re-created cgroup has no CPUs")
	}
}

// An Apply stops at its next cgroup when an urgent write waits (the fast path must not wait
// for hundreds of cgroups), the urgent write itself is never stopped, and the next Apply
// completes what the stopped one left.
func TestApplyHandsOverToAnUrgentWrite(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	tree := func(quota int64) []plugins.Cgroup {
		out := []plugins.Cgroup{{Path: root + "/reclaimed", Settings: plugins.Settings{CPUQuota: 4000}}}
		for i := range 20 {
			out = append(out, plugins.Cgroup{Path: root + "/reclaimed/w" + strconv.Itoa(i), Settings: plugins.Settings{CPUQuota: quota}})
		}
		return out
	}
	quotaFile := "cpu.cfs_quota_us"
	if l.Version == cgroupfs.V2 {
		quotaFile = "cpu.max"
	}
	if err := w.Apply(tree(1000)); err != nil {
		t.Fatal(err)
	}
	want := read(t, l, "cpu", root+"/reclaimed/w7", quotaFile)

	done := isolation.WaitingUrgent(w)
	before := totalWrites(w)
	if err := w.Apply(tree(500)); !errors.Is(err, isolation.ErrPreempted) {
		t.Fatalf("Apply with an urgent write waiting: %v, want ErrPreempted", err)
	}
	if n := totalWrites(w) - before; n != 0 {
		t.Errorf("the preempted Apply wrote %d files before handing over", n)
	}
	if err := w.ApplyUrgent([]plugins.Cgroup{{Path: root + "/reclaimed", Settings: plugins.Settings{CPUQuota: 3000}}}); err != nil {
		t.Fatalf("ApplyUrgent while another waits: %v", err)
	}
	done()
	if got := read(t, l, "cpu", root+"/reclaimed/w7", quotaFile); got != want {
		t.Errorf("w7 quota %q after the preempted Apply, want it untouched (%q)", got, want)
	}
	if err := w.Apply(tree(500)); err != nil {
		t.Fatalf("Apply after the urgent write: %v", err)
	}
	for _, c := range []string{"/reclaimed/w0", "/reclaimed/w19"} {
		if got := read(t, l, "cpu", root+c, quotaFile); !strings.HasPrefix(got, "50000") {
			t.Errorf("%s quota %q after the next Apply, want 50000", c, got)
		}
	}
}

// Drift repair spread over passes: an unchanged tree is not re-read, Recheck(turn, of) has the
// next Apply re-read a share of the cgroups, and over `of` turns every drifted file is repaired
// and a cgroup removed behind the writer's back is made again.
func TestRecheckRepairsDriftInTurns(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	file, drift := "cpu.shares", "1000"
	if l.Version == cgroupfs.V2 {
		file, drift = "cpu.weight", "500"
	}
	const n, of = 24, 4
	tree := []plugins.Cgroup{{Path: root, Settings: plugins.Settings{CPUShares: 1024}}}
	for i := range n {
		tree = append(tree, plugins.Cgroup{Path: root + "/w-" + strconv.Itoa(i), Settings: plugins.Settings{CPUShares: 100}})
	}
	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	want := read(t, l, "cpu", tree[1].Path, file)
	for _, c := range tree[1:] {
		if err := os.WriteFile(filepath.Join(l.Dir("cpu", c.Path), file), []byte(drift), 0); err != nil {
			t.Fatal(err)
		}
	}
	removed := tree[n].Path
	isolationtest.Cleanup(t, l, removed)
	repaired := func() int {
		k := 0
		for _, c := range tree[1:] {
			if data, err := os.ReadFile(filepath.Join(l.Dir("cpu", c.Path), file)); err == nil && strings.TrimSpace(string(data)) == want {
				k++
			}
		}
		return k
	}

	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if k := repaired(); k != 0 {
		t.Fatalf("an unchanged tree with nothing to recheck re-read %d cgroups", k)
	}
	for turn := range of {
		w.Recheck(turn, of)
		if err := w.Apply(tree); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if k := repaired(); turn == 0 && (k == 0 || k == n) {
			t.Errorf("after the first of %d turns %d of %d cgroups were repaired, want a share", of, k, n)
		}
	}
	if k := repaired(); k != n {
		t.Errorf("after %d turns %d of %d cgroups repaired", of, k, n)
	}
	if !l.Exists(removed) {
		t.Errorf("cgroup %s removed behind the writer's back was not made again", removed)
	}
}
