package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/isolation/isolationtest"
)

// BenchmarkSlowPass is one full slow-loop pass (sample node and 200 workloads, advise, write
// the tree on change) on real cgroups.
//
//	sudo go test -run '^$' -bench SlowPass ./agent
func BenchmarkSlowPass(b *testing.B) {
	a := agentWith200Idle(b)
	ctx := context.Background()
	a.slowPass(ctx) // first sample: no rate yet
	for b.Loop() {
		a.slowPass(ctx)
	}
	b.ReportMetric(float64(len(a.store.Snapshot().Workloads)), "workloads")
}

// agentWith200Idle is an agent with its defaults on a test cgroup root, managing 200 idle
// workloads (sleep processes, half shared, half reclaimed) that the benchmark's end kills.
func agentWith200Idle(b *testing.B) *Agent {
	a := agentOnTestRoot(b)
	tiers := []string{"shared", "reclaimed"}
	for i := range 200 {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if _, err := a.Admit(AdmitRequest{Name: fmt.Sprintf("w%d", i), Tier: tiers[i%2], PID: cmd.Process.Pid}, 0); err != nil {
			b.Fatal(err)
		}
	}
	return a
}

// BenchmarkStatus200 builds the status of an agent managing 200 idle workloads, whole and
// without the workloads (what a poller of lending needs, GET /v1/status?workloads=false).
//
//	sudo go test -run '^$' -bench Status200 ./agent
func BenchmarkStatus200(b *testing.B) {
	a := agentWith200Idle(b)
	a.slowPass(context.Background())
	for _, c := range []struct {
		name   string
		status func() int
	}{
		{"whole", func() int { return len(a.Status().Workloads) }},
		{"summary", func() int { return len(a.StatusSummary().Workloads) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var listed int
			for b.Loop() {
				listed = c.status()
			}
			b.ReportMetric(float64(listed), "workloads")
		})
	}
}

// agentOnTestRoot is a real agent with its defaults on a cgroup root of the test's own
// (removed at its end), its state and socket in a temporary folder, its loops not running.
func agentOnTestRoot(tb testing.TB) *Agent {
	layout := isolationtest.Layout(tb)
	cfg := config.Default()
	cfg.Cgroup.Root = isolationtest.RootName(tb, layout)
	dir := tb.TempDir()
	cfg.StateDir, cfg.SocketPath = filepath.Join(dir, "state"), filepath.Join(dir, "sock")
	// No metrics port: New claims it, and a fuzzing run makes an agent in every worker.
	cfg.MetricsAddress = ""
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.Close)
	return a
}
