// Package cgroupv2 is tidal's suite against a real cgroup v2 (unified hierarchy) kernel. The
// hosts the project runs on mount cgroup v1, so TestInVM builds this package's test binary and
// the tidal binary (static), boots the Debian kernel scripts/vm-tools.sh prepared under QEMU
// (tests/vm) and runs the TestV2 tests inside, as root on /sys/fs/cgroup mounted as cgroup2;
// each inner test's result comes back as a subtest of TestInVM. Outside the VM the TestV2
// tests skip; inside it TestInVM does.
//
// Every test makes its own uniquely named cgroup root and removes it, as the other suites do.
// Timings are not asserted: under software emulation they mean nothing.
package cgroupv2

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// inVMEnv is set by TestInVM's script for the test binary it runs in the VM.
const inVMEnv = "TIDAL_IN_VM"

func inVM() bool { return os.Getenv(inVMEnv) == "1" }

// unified is the VM's unified hierarchy, or a skip outside the VM. It checks that the layout
// tidal detects there is v2 and that the controllers tidal uses are enabled at the root.
func unified(t *testing.T) *cgroupfs.Layout {
	t.Helper()
	if !inVM() {
		t.Skip("runs inside the cgroup v2 VM (TestInVM boots it)")
	}
	l := isolationtest.Layout(t)
	if l.Version != cgroupfs.V2 || l.Unified != "/sys/fs/cgroup" {
		t.Fatalf("tidal detected %v at %q in the VM, want v2 at /sys/fs/cgroup", l.Version, l.Unified)
	}
	ctl := readFile(t, "/sys/fs/cgroup/cgroup.subtree_control")
	for _, c := range []string{"cpu", "cpuset", "memory", "io"} {
		if !strings.Contains(" "+ctl+" ", " "+c+" ") {
			t.Fatalf("controller %s not enabled at the root: %q", c, ctl)
		}
	}
	return l
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// cg reads a file of cgroup rel.
func cg(t testing.TB, l *cgroupfs.Layout, rel, file string) string {
	t.Helper()
	return readFile(t, filepath.Join(l.Unified, rel, file))
}

func newWriter(t testing.TB, l *cgroupfs.Layout) *isolation.Writer {
	t.Helper()
	w, err := isolation.NewWriter(l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return w
}
