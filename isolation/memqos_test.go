package isolation_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// On cgroup v1 the throttle point is the soft limit and oom-wait is oom_kill_disable; v2's
// protection knobs (memory.low, memory.min) do not exist and are left out, not failed. The
// values read back as written (no drift after Forget), and "unlimited" round-trips.
func TestMemoryQoSRealCgroupsV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 {
		t.Skip("this host runs cgroup v2; tests/cgroupv2 covers memory.high/low/min")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	tree := func(high int64, wait plugins.Toggle) []plugins.Cgroup {
		return []plugins.Cgroup{
			{Path: root, Settings: plugins.Settings{}},
			{Path: root + "/shared", Settings: plugins.Settings{MemoryHigh: plugins.Unlimited, MemoryLow: plugins.Unlimited, MemoryMin: plugins.Unlimited, MemoryOOMWait: plugins.Off}},
			{Path: root + "/reclaimed", Settings: plugins.Settings{MemoryLimit: 512 << 20, MemoryHigh: high, MemoryOOMWait: wait}},
		}
	}
	if err := w.Apply(tree(256<<20, plugins.On)); err != nil {
		t.Fatal(err)
	}
	oomDisable := func(path string) string {
		for _, line := range strings.Split(read(t, l, "memory", path, "memory.oom_control"), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill_disable "); ok {
				return v
			}
		}
		return "?"
	}
	if got := read(t, l, "memory", root+"/reclaimed", "memory.soft_limit_in_bytes"); got != "268435456" {
		t.Errorf("reclaimed soft limit = %s, want 268435456", got)
	}
	if got := oomDisable(root + "/reclaimed"); got != "1" {
		t.Errorf("reclaimed oom_kill_disable = %s, want 1", got)
	}
	if got := oomDisable(root + "/shared"); got != "0" {
		t.Errorf("shared oom_kill_disable = %s, want 0", got)
	}
	// Forget re-reads every file: what was written reads back the same, so nothing is
	// written again (unlimited included).
	w.Forget()
	before := totalWrites(w)
	if err := w.Apply(tree(256<<20, plugins.On)); err != nil {
		t.Fatal(err)
	}
	if after := totalWrites(w); after != before {
		t.Errorf("re-reading the memory QoS files found drift: %d writes", after-before)
	}
	// Changes are written; drift is repaired.
	if err := w.Apply(tree(plugins.Unlimited, plugins.Off)); err != nil {
		t.Fatal(err)
	}
	if got := oomDisable(root + "/reclaimed"); got != "0" {
		t.Errorf("after turning oom-wait off: oom_kill_disable = %s", got)
	}
	if err := os.WriteFile(filepath.Join(l.Dir("memory", root+"/reclaimed"), "memory.soft_limit_in_bytes"), []byte("4096"), 0); err != nil {
		t.Fatal(err)
	}
	w.Forget()
	if err := w.Apply(tree(plugins.Unlimited, plugins.Off)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, l, "memory", root+"/reclaimed", "memory.soft_limit_in_bytes"); got == "4096" {
		t.Errorf("soft limit drift not repaired: reads %s", got)
	}
	if s := w.Stats(); s.Repairs["memory.high"] != 1 {
		t.Errorf("memory.high repairs = %d, want 1", s.Repairs["memory.high"])
	}
}
