package cgroupv2

import (
	"slices"
	"testing"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
)

// CPU burst on a real unified hierarchy: cpu.max.burst in µs, lowered before its quota and
// raised after it (the kernel refuses a burst above the quota), cleared by BurstOff.
func TestV2CPUBurst(t *testing.T) {
	l := unified(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	web := root + "/shared/web"
	tree := func(quota, burst int64) []plugins.Cgroup {
		return []plugins.Cgroup{{Path: root}, {Path: root + "/shared"},
			{Path: web, Settings: plugins.Settings{CPUQuota: quota, CPUBurst: burst}}}
	}
	for _, s := range []struct {
		quota, burst int64
		max, want    string
	}{
		{1000, 500, "100000 100000", "50000"},
		{300, 300, "30000 100000", "30000"},
		{2000, 2000, "200000 100000", "200000"},
		{2000, plugins.BurstOff, "200000 100000", "0"},
	} {
		apply(t, w, tree(s.quota, s.burst)...)
		wantFiles(t, l, map[string]string{web + "/cpu.max": s.max, web + "/cpu.max.burst": s.want})
	}
	if n := w.Stats().Errors["cpu.burst"]; n != 0 {
		t.Errorf("%d failed burst writes", n)
	}
}

// The threads of a cgroup (cgroup.threads), which the starvation trigger reads the
// scheduler's counters of, include a process's every thread.
func TestV2Threads(t *testing.T) {
	l := unified(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	leaf := root + "/reclaimed/batch"
	p := sleeper(t)
	if err := w.Attach(leaf, p.Process.Pid); err != nil {
		t.Fatal(err)
	}
	tids, err := l.Threads(root, true)
	if err != nil || !slices.Contains(tids, p.Process.Pid) {
		t.Fatalf("threads under %s: %v, %v; want the sleeper %d", root, tids, err, p.Process.Pid)
	}
}
