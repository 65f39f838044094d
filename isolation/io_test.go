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

// aDisk is the MAJ:MIN of a whole block device of this machine: throttle rules name one
// the kernel knows. Only the test's own cgroups get rules.
func aDisk(t *testing.T) string {
	t.Helper()
	entries, _ := os.ReadDir("/sys/block")
	for _, e := range entries {
		if data, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "dev")); err == nil {
			return strings.TrimSpace(string(data))
		}
	}
	t.Skip("no block device")
	return ""
}

// On cgroup v1 a reclaimed tier's IO throttles land in the four blkio.throttle files, read
// back as written (no drift after Forget), and a device no longer wanted is cleared; the
// online tier's files hold no rule.
func TestIOThrottlesRealCgroupsV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 || !l.Has("blkio") {
		t.Skip("needs the v1 blkio hierarchy; tests/cgroupv2 covers v2")
	}
	dev := aDisk(t)
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	tree := func(lim plugins.IOLimit) []plugins.Cgroup {
		return []plugins.Cgroup{
			{Path: root},
			{Path: root + "/shared", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{{Device: dev}}}},
			{Path: root + "/reclaimed", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{lim}}},
		}
	}
	lim := plugins.IOLimit{Device: dev, ReadBps: 10 << 20, WriteBps: 5 << 20, WriteIOPS: 300}
	if err := w.Apply(tree(lim)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"blkio.throttle.read_bps_device":   dev + " 10485760",
		"blkio.throttle.write_bps_device":  dev + " 5242880",
		"blkio.throttle.read_iops_device":  "",
		"blkio.throttle.write_iops_device": dev + " 300",
	}
	for file, v := range want {
		if got := read(t, l, "blkio", root+"/reclaimed", file); got != v {
			t.Errorf("reclaimed %s = %q, want %q", file, got, v)
		}
		if got := read(t, l, "blkio", root+"/shared", file); got != "" {
			t.Errorf("shared %s = %q: online work must not be throttled", file, got)
		}
	}
	w.Forget()
	before := totalWrites(w)
	if err := w.Apply(tree(lim)); err != nil {
		t.Fatal(err)
	}
	if after := totalWrites(w); after != before {
		t.Errorf("re-reading the throttle files found drift: %d writes", after-before)
	}
	// Lending nothing on the device clears its rules.
	if err := w.Apply(tree(plugins.IOLimit{Device: dev})); err != nil {
		t.Fatal(err)
	}
	for file := range want {
		if got := read(t, l, "blkio", root+"/reclaimed", file); got != "" {
			t.Errorf("after clearing: %s = %q", file, got)
		}
	}
}

// A throttle on a device that no longer exists (a detached loop device) is skipped, not a
// failed pass: the kernel dropped its rules with the device.
func TestIOThrottleOnAGoneDeviceIsNoError(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 || !l.Has("blkio") {
		t.Skip("needs the v1 blkio hierarchy")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	gone := plugins.IOLimit{Device: "7:999999", WriteBps: 1 << 20}
	if err := w.Apply([]plugins.Cgroup{{Path: root}, {Path: root + "/reclaimed", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{gone}}}}); err != nil {
		t.Fatalf("a gone device failed the pass: %v", err)
	}
}

// blkio.bfq.weight (where bfq is built in or loaded) takes the reclaimed weight and reads it
// back without drift; without the file the knob is skipped, not an error.
func TestIOWeightRealCgroupsV1(t *testing.T) {
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V1 || !l.Has("blkio") {
		t.Skip("needs the v1 blkio hierarchy")
	}
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	tree := []plugins.Cgroup{{Path: root}, {Path: root + "/reclaimed", Settings: plugins.Settings{IOWeight: 10}}}
	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir("blkio", root+"/reclaimed"), "blkio.bfq.weight")); err != nil {
		t.Skip("no bfq on this kernel: the weight was skipped")
	}
	if got := read(t, l, "blkio", root+"/reclaimed", "blkio.bfq.weight"); got != "10" {
		t.Errorf("blkio.bfq.weight = %q, want 10", got)
	}
	w.Forget()
	before := totalWrites(w)
	if err := w.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if after := totalWrites(w); after != before {
		t.Errorf("re-reading the weight found drift: %d writes", after-before)
	}
}
