package isolation_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// CPU burst on a real cgroup: it lands in cpu.cfs_burst_us (v1) or cpu.max.burst (v2) in µs,
// follows its quota down and up in an order the kernel accepts (it refuses a burst above the
// quota, and a quota below the burst), and BurstOff clears it.
func TestBurstRealCgroup(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	file := burstFile(l)
	if err := os.MkdirAll(l.Dir("cpu", root), 0o755); err == nil {
		if _, err := os.Stat(filepath.Join(l.Dir("cpu", root), file)); err != nil {
			isolationtest.Unavailable(t, "this kernel has no %s: %v", file, err)
		}
	}
	w := newWriter(t, l)
	web := root + "/shared/web"
	tree := func(quota, burst int64) []plugins.Cgroup {
		return []plugins.Cgroup{{Path: root}, {Path: root + "/shared"},
			{Path: web, Settings: plugins.Settings{CPUQuota: quota, CPUBurst: burst}}}
	}
	steps := []struct {
		name         string
		quota, burst int64
		want         string
	}{
		{"burst half the quota", 1000, 500, "50000"},
		{"quota and burst down together", 300, 300, "30000"},
		{"quota and burst up together", 2000, 2000, "200000"},
		{"cleared", 2000, plugins.BurstOff, "0"},
	}
	for _, s := range steps {
		if err := w.Apply(tree(s.quota, s.burst)); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := read(t, l, "cpu", web, file); got != s.want {
			t.Errorf("%s: %s = %s, want %s", s.name, file, got, s.want)
		}
	}
	if n := w.Stats().Errors["cpu.burst"]; n != 0 {
		t.Errorf("%d failed burst writes", n)
	}
}

// On a v2 tree: the burst goes to cpu.max.burst; on a kernel without the file the knob is
// skipped without an error, said once in the log, and the other knobs are still written.
func TestBurstV2FileAndMissingFile(t *testing.T) {
	for _, has := range []bool{true, false} {
		mount := fakeV2(t, "tidal", "tidal/shared", "tidal/shared/web")
		for _, p := range []string{"", "tidal", "tidal/shared", "tidal/shared/web"} {
			if has {
				if err := os.WriteFile(filepath.Join(mount, p, "cpu.max.burst"), []byte("0"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		var logs bytes.Buffer
		w, err := isolation.NewWriter(cgroupfs.NewV2(mount), slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		tree := []plugins.Cgroup{
			{Path: "tidal/shared", Settings: plugins.Settings{CPUBurst: plugins.BurstOff}},
			{Path: "tidal/shared/web", Settings: plugins.Settings{CPUQuota: 1500, CPUBurst: 750}},
		}
		for range 2 {
			if err := w.Apply(tree); err != nil {
				t.Fatalf("with cpu.max.burst=%v: %v", has, err)
			}
		}
		quota, _ := os.ReadFile(filepath.Join(mount, "tidal/shared/web/cpu.max"))
		if string(quota) != "150000 100000" {
			t.Errorf("cpu.max = %q: the quota must be written whatever the burst", quota)
		}
		burst, err := os.ReadFile(filepath.Join(mount, "tidal/shared/web/cpu.max.burst"))
		switch {
		case has && string(burst) != "75000":
			t.Errorf("cpu.max.burst = %q, want 75000", burst)
		case !has && err == nil:
			t.Errorf("cpu.max.burst created on a kernel without it")
		}
		if n := strings.Count(logs.String(), "the kernel has no file"); has && n != 0 || !has && n != 1 {
			t.Errorf("cpu.max.burst=%v: said %d times that the file is missing, want once when missing:\n%s", has, n, logs.String())
		}
	}
}

// A pod's burst is a share of the quota the kubelet gave each of its cgroups, read from the
// kernel; a cgroup without a quota gets none.
func TestBurstOfSomeoneElsesQuota(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	file := burstFile(l)
	w := newWriter(t, l)
	pod, limited, unlimited := root+"/kubepods/podA", root+"/kubepods/podA/c1", root+"/kubepods/podA/c2"
	// The "kubelet" makes the pod's cgroups and quotas.
	if err := w.Apply([]plugins.Cgroup{{Path: root}, {Path: root + "/kubepods"},
		{Path: pod, Settings: plugins.Settings{CPUQuota: 1500}},
		{Path: limited, Settings: plugins.Settings{CPUQuota: 500}},
		{Path: unlimited, Settings: plugins.Settings{CPUQuota: plugins.Unlimited}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir("cpu", pod), file)); err != nil {
		isolationtest.Unavailable(t, "this kernel has no %s: %v", file, err)
	}
	tidal := newWriter(t, l)
	burst := plugins.Settings{CPUBurstPercent: 40}
	if err := tidal.Apply([]plugins.Cgroup{{Path: pod, Foreign: true, Settings: burst},
		{Path: limited, Foreign: true, Settings: burst}, {Path: unlimited, Foreign: true, Settings: burst}}); err != nil {
		t.Fatal(err)
	}
	for cgroup, want := range map[string]string{pod: "60000", limited: "20000", unlimited: "0"} {
		if got := read(t, l, "cpu", cgroup, file); got != want {
			t.Errorf("%s %s = %s, want %s", cgroup, file, got, want)
		}
	}
}

// An in-place resize lowers a pod's CPU limit in its spec before the kubelet lowers its
// quota, and the kernel refuses a quota below the burst: a burst sized on the quota alone
// blocks the resize for good. Sized on the spec's limit where that is lower, it lets the
// kubelet's write through.
func TestBurstGivesWayToAResize(t *testing.T) {
	l := isolationtest.Layout(t)
	root := isolationtest.RootName(t, l)
	file := burstFile(l)
	kubelet := newWriter(t, l)
	pod := root + "/kubepods/podA"
	quota := func(milli int64) error {
		return kubelet.Apply([]plugins.Cgroup{{Path: root}, {Path: root + "/kubepods"}, {Path: pod, Settings: plugins.Settings{CPUQuota: milli}}})
	}
	if err := quota(1000); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir("cpu", pod), file)); err != nil {
		isolationtest.Unavailable(t, "this kernel has no %s: %v", file, err)
	}
	tidal := newWriter(t, l)
	burst := func(limitMilli int64, want string) {
		t.Helper()
		s := plugins.Settings{CPUBurstPercent: 50, CPUBurstLimit: limitMilli}
		if err := tidal.Apply([]plugins.Cgroup{{Path: pod, Foreign: true, Settings: s}}); err != nil {
			t.Fatal(err)
		}
		if got := read(t, l, "cpu", pod, file); got != want {
			t.Fatalf("burst sized on a limit of %dm: %s = %s, want %s", limitMilli, file, got, want)
		}
	}

	burst(1000, "50000") // the spec's limit is the quota
	if err := quota(200); err == nil {
		t.Fatal("the kernel took a quota of 20000 under a burst of 50000: this test shows nothing on this kernel")
	}
	burst(200, "10000") // the spec now says 200m; the quota is still 1000m
	if err := quota(200); err != nil {
		t.Fatalf("the kubelet's quota after the resize: %v", err)
	}
	tidal.Forget()
	burst(200, "10000")
	burst(0, "10000") // no limit known: the quota the cgroup has, now 20000
}

// burstFile is the CFS burst's file on the layout's cgroup version.
func burstFile(l *cgroupfs.Layout) string {
	if l.Version == cgroupfs.V2 {
		return "cpu.max.burst"
	}
	return "cpu.cfs_burst_us"
}
