// Package isolationtest gives tests a cgroup root of their own: uniquely named, created in
// every hierarchy tidal uses and removed (processes killed first) when the test ends, also
// when it fails.
package isolationtest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// Layout detects this machine's cgroup layout; a test that cannot manage cgroups (not root,
// no cgroup file system) is skipped, or fails under CI (see Unavailable).
func Layout(t testing.TB) *cgroupfs.Layout {
	t.Helper()
	RequireRoot(t, "to manage cgroups")
	l, err := cgroupfs.Detect("/sys/fs/cgroup", "auto")
	if err != nil {
		Unavailable(t, "no usable cgroup hierarchy: %v", err)
	}
	return l
}

// RequireRoot stops a real-part test that is not run as root (see Unavailable).
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root %s", why)
	}
}

// Unavailable stops a test whose real parts this machine lacks: a skip on a developer's
// machine, a failure where CI=true, since CI runs as root with every part installed and a
// skipped real-part test there would hide a missing install step.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: real-part tests must run)", args...)
	}
	t.Skipf(format, args...)
}

// RootName returns a fresh cgroup root name ("tidal-test-<random>") and removes that tree, and
// the reclaimed tier an agent keeps beside it ("tidal-test-<random>-reclaimed"), from every
// hierarchy of layout when the test ends.
func RootName(t testing.TB, layout *cgroupfs.Layout) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "tidal-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		Cleanup(t, layout, name)
		Cleanup(t, layout, plugins.TierPath(name, qos.Reclaimed))
	})
	return name
}

// Cleanup kills every process under root and removes root's cgroups, deepest first, in every
// hierarchy tidal uses.
func Cleanup(t testing.TB, layout *cgroupfs.Layout, root string) {
	t.Helper()
	dirs := map[string]bool{}
	for _, mount := range layout.Mounts() {
		top := filepath.Join(mount, root)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		killAll(layout, root)
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs[p] = true
			}
			return nil
		})
	}
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool { return strings.Count(list[i], "/") > strings.Count(list[j], "/") })
	for _, d := range list {
		var err error
		for try := 0; try < 50; try++ {
			if err = os.Remove(d); err == nil || os.IsNotExist(err) {
				break
			}
			killAll(layout, root)
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("cleanup: cannot remove cgroup %s: %v", d, err)
		}
	}
}

func killAll(layout *cgroupfs.Layout, root string) {
	pids, _ := layout.Procs(root, true)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
