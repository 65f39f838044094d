package agent

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// quietLog discards what it is given.
func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// realAgent prepares an agent core on this machine's real cgroups under root, with a state
// folder of the test's own (no API, no loops: the test drives it), closed when the test ends.
func realAgent(t *testing.T, layout *cgroupfs.Layout, root string) *Agent {
	t.Helper()
	cfg := config.Default()
	cfg.Cgroup.Root = root
	dir := t.TempDir()
	cfg.StateDir, cfg.SocketPath = dir, filepath.Join(dir, "sock")
	a, err := newAgentOn(cfg, quietLog(), host{sys: "/sys", proc: "/proc", cgroups: layout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}
