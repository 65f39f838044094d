package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// bench is what every run shares: the tidal binary, a temporary folder for logs, agent state
// and sockets, and the benchmark's own cgroup root ("tidal-bench-<random>") with the writer
// that manages it. Every cgroup the benchmark creates lives under that root, and close removes
// the whole tree, killing whatever is left in it.
type bench struct {
	opts   options
	log    io.Writer // progress, for the person watching
	tidal  string    // the tidal binary
	tmp    string
	layout *cgroupfs.Layout
	writer *isolation.Writer
	root   string
	cpus   cpuset.CPUSet // every online CPU
	mems   cpuset.CPUSet // every NUMA node
}

func newBench(opts options, log io.Writer) (b *bench, err error) {
	b = &bench{opts: opts, log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()
	if b.tmp, err = os.MkdirTemp("", "tidal-bench-"); err != nil {
		return b, err
	}
	if b.tidal, err = tidalBinary(opts.tidalBin, b.tmp, log); err != nil {
		return b, err
	}
	if opts.tidalBaseline != "" {
		if b.opts.tidalBaseline, err = filepath.Abs(opts.tidalBaseline); err != nil {
			return b, err
		}
	}
	if b.layout, err = cgroupfs.Detect("/sys/fs/cgroup", "auto"); err != nil {
		return b, err
	}
	warnings := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if b.writer, err = isolation.NewWriter(b.layout, warnings); err != nil {
		return b, err
	}
	topo, err := topology.Discover("/sys", "/proc")
	if err != nil {
		return b, err
	}
	b.cpus = topo.AllCPUs()
	b.mems = cpuset.New()
	for _, n := range topo.NUMANodes {
		if n.MemoryBytes > 0 {
			b.mems = b.mems.Union(cpuset.New(n.ID))
		}
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return b, err
	}
	root := "tidal-bench-" + hex.EncodeToString(suffix)
	if err := b.writer.Apply([]plugins.Cgroup{{Path: root, Settings: b.everywhere()}}); err != nil {
		b.root = root // remove whatever part of it was created
		return b, err
	}
	b.root = root
	fmt.Fprintf(log, "cgroup root %s, temporary files in %s\n", root, b.tmp)
	return b, nil
}

// everywhere are the settings of a cgroup allowed on every CPU and memory node.
func (b *bench) everywhere() plugins.Settings {
	return plugins.Settings{CPUs: b.cpus, Mems: b.mems}
}

// close removes the cgroup root (killing what is left in it) and the temporary folder.
func (b *bench) close() error {
	var errs []error
	if b.root != "" {
		errs = append(errs, removeTree(b.layout, b.root))
	}
	if b.tmp != "" {
		errs = append(errs, os.RemoveAll(b.tmp))
	}
	return errors.Join(errs...)
}

// tidalBinary returns the prebuilt binary, or builds ./cmd/tidal into dir.
func tidalBinary(prebuilt, dir string, log io.Writer) (string, error) {
	if prebuilt != "" {
		return filepath.Abs(prebuilt)
	}
	bin := filepath.Join(dir, "tidal")
	fmt.Fprintln(log, "building the tidal binary ...")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/tidalqos/tidal/cmd/tidal")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building tidal: %w", err)
	}
	return bin, nil
}

// runRounds runs every scenario once per round, in the same order each round. A run that
// fails is recorded with its error and the benchmark goes on; Ctrl-C stops it.
func (b *bench) runRounds(ctx context.Context) ([]runResult, error) {
	var runs []runResult
	total := b.opts.rounds * len(b.opts.servers) * len(b.opts.scenarios)
	per := b.opts.warmup + b.opts.day + 5*time.Second
	fmt.Fprintf(b.log, "%d runs of about %s each: about %s in all\n", total, per.Round(time.Second), (time.Duration(total) * per).Round(time.Minute))
	for round := 1; round <= b.opts.rounds; round++ {
		for _, srv := range b.opts.servers {
			server, _ := serverByName(srv)
			for _, name := range b.opts.scenarios {
				sc, _ := scenarioByName(name)
				fmt.Fprintf(b.log, "[%d/%d] round %d, %-5s %-13s ", len(runs)+1, total, round, server.Name, sc.Name)
				r := b.runScenario(ctx, server, sc, round)
				if ctx.Err() != nil {
					fmt.Fprintln(b.log, "interrupted")
					return runs, errors.New("interrupted")
				}
				fmt.Fprintln(b.log, r.oneLine())
				runs = append(runs, r)
			}
		}
	}
	return runs, nil
}

// sleepCtx waits for d or until ctx is done, and says whether the full time passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
