package isolation_test

import (
	"testing"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// While cpu.idle is 1 the kernel reports a group's weight as its minimum (v1 cpu.shares 3, v2
// cpu.weight 0) and refuses writes to it; when idle goes back to 0 the weight is the default
// (1024, 100), not what was written before. The writer must write the shares again then
// (tests/cgroupv2 checks the same on a real v2 kernel).
func TestSharesRewrittenAfterIdleGoesOff(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 {
		t.Skip("the v2 case runs in tests/cgroupv2")
	}
	w := newWriter(t, l)
	if !w.SupportsIdle() {
		t.Skip("no cpu.idle on this kernel")
	}
	g := isolationtest.RootName(t, l) + "/g"
	steps := []struct {
		s            plugins.Settings
		shares, idle string
	}{
		{plugins.Settings{CPUShares: 512}, "512", "0"},
		{plugins.Settings{CPUIdle: plugins.On}, "3", "1"},
		{plugins.Settings{CPUIdle: plugins.Off, CPUShares: 512}, "512", "0"},
	}
	for i, step := range steps {
		if err := w.Apply([]plugins.Cgroup{{Path: g, Settings: step.s}}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := read(t, l, "cpu", g, "cpu.shares"); got != step.shares {
			t.Errorf("step %d: cpu.shares = %s, want %s", i, got, step.shares)
		}
		if got := read(t, l, "cpu", g, "cpu.idle"); got != step.idle {
			t.Errorf("step %d: cpu.idle = %s, want %s", i, got, step.idle)
		}
	}
	if r := w.Stats().Repairs["cpu.shares"]; r != 0 {
		t.Errorf("the kernel's own reset of shares counted as %d drift repairs", r)
	}
}
