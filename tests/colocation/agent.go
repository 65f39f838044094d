package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/reporter"
)

// agentProc is a `tidal agent` process with its defaults, except what must be its own here:
// its cgroup root (inside the benchmark's), state folder and socket (in the temporary folder),
// and no metrics endpoint.
type agentProc struct {
	*proc
	bin    string // the tidal binary it runs, which its `tidal run`s run too
	socket string
	client *agent.Client
}

// startAgent starts an agent of the tidal binary bin whose cgroup tree is cgroupRoot, moves the
// agent process into cgroup self, and waits until it answers on its socket.
func (b *bench) startAgent(ctx context.Context, bin, name, cgroupRoot, self, scenarioConfig string) (*agentProc, error) {
	dir := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "tidal.sock")
	config := filepath.Join(dir, "tidal.yaml")
	yaml := fmt.Sprintf("cgroup:\n  root: %s\nstateDir: %s\nsocketPath: %s\nmetricsAddress: \"\"\n",
		cgroupRoot, filepath.Join(dir, "state"), socket)
	if b.opts.agentConfig != "" {
		extra, err := os.ReadFile(b.opts.agentConfig)
		if err != nil {
			return nil, err
		}
		yaml += string(extra)
	}
	yaml += scenarioConfig
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	p, err := startProc(name, b.tmp, []string{bin, "agent", "--config", config},
		func(pid int) error { return b.writer.Attach(self, pid) })
	if err != nil {
		return nil, err
	}
	a := &agentProc{proc: p, bin: bin, socket: socket, client: agent.NewClient(socket)}
	if err := a.waitStatus(ctx, "answered on "+socket, func(reporter.Status) bool { return true }); err != nil {
		p.stop(time.Second)
		return nil, err
	}
	return a, nil
}

// waitStatus polls the agent's status (without its workloads: the whole of 200 costs the
// agent and this process CPU beside the online service) for up to 10 s until ok says yes; the
// error says what it did not do, with the last lines of its log.
func (a *agentProc) waitStatus(ctx context.Context, what string, ok func(reporter.Status) bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := a.client.StatusSummary()
		if err == nil && ok(s) {
			return nil
		}
		if !a.proc.running() || time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("the agent never %s within 10s (last error %v); last lines of its log:\n%s", what, err, a.proc.logTail(10))
		}
	}
}

// waitPrimed waits until the agent lends by a fresh sample of the node. Before it, lent memory
// is at its floor: offline work that allocates faster than lending then grows waits at that
// limit (memory.oomWait), where the kernel's own charges fail, a write to its output pipe
// among them, and the benchmark's antagonist exited of that in runs whose mechanism sets no
// quota at the start (nothing slowed its allocation).
func (a *agentProc) waitPrimed(ctx context.Context) error {
	return a.waitStatus(ctx, "had fresh metrics", func(s reporter.Status) bool { return s.MetricsOK })
}

// tidalRun is the command line that starts argv through the agent, in a tier, with more
// `tidal run` flags (an SLO probe).
func (a *agentProc) tidalRun(tier, name string, flags, argv []string) []string {
	cmd := append([]string{a.bin, "run", "--socket", a.socket, "--tier", tier, "--name", name}, flags...)
	return append(append(cmd, "--"), argv...)
}

// agentWatch polls an agent's status: the CPU it lends over time and every action it took
// (the status keeps only the latest ones, so they are collected as they come).
type agentWatch struct {
	lent    []lentSample
	actions map[actionKey]reporter.Action
	// latestLent is the last poll's lending for the contention probe, which reads it from
	// its own goroutine; -1 before the first poll.
	latestLent atomic.Int64
}

// actionKey tells actions apart across polls (time.Time itself is no map key: its location
// pointer differs between decodes).
type actionKey struct {
	unixNano     int64
	kind, reason string
}

func newAgentWatch() *agentWatch {
	w := &agentWatch{actions: map[actionKey]reporter.Action{}}
	w.latestLent.Store(-1)
	return w
}

// lentSample is the CPU the agent lent to reclaimed work at a time.
type lentSample struct {
	At       time.Time
	MilliCPU int64
}

func (w *agentWatch) poll(client *agent.Client, now time.Time) {
	// Without the workloads: the whole status of 200 of them, twice a second, cost the
	// benchmark's own process (in the root cgroup) several milliseconds of CPU a poll beside
	// the online service, in the tidal scenarios only (docs/benchmark.md#valley-taken-apart).
	s, err := client.StatusSummary()
	if err != nil {
		return // a missed poll leaves a gap; the next one catches up on actions
	}
	var lent int64
	for _, p := range s.Pools {
		lent += p.LentMilliCPU
	}
	w.lent = append(w.lent, lentSample{At: now, MilliCPU: lent})
	w.latestLent.Store(lent)
	for _, a := range s.Actions {
		w.actions[actionKey{a.Time.UnixNano(), a.Kind, a.Reason}] = a
	}
}

// sortedActions returns the actions seen, oldest first.
func (w *agentWatch) sortedActions() []reporter.Action {
	out := make([]reporter.Action, 0, len(w.actions))
	for _, a := range w.actions {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// background runs periodic samplers until stopped: each owns its own data, which may be read
// only after stop returns.
type background struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ctx    context.Context
	done   []func()
}

func newBackground(ctx context.Context) *background {
	ctx, cancel := context.WithCancel(ctx)
	return &background{ctx: ctx, cancel: cancel}
}

// every calls fn now and then every interval until stop.
func (g *background) every(interval time.Duration, fn func(now time.Time)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		fn(time.Now())
		for {
			select {
			case <-g.ctx.Done():
				return
			case now := <-t.C:
				fn(now)
			}
		}
	}()
}

// onStop runs fn once the samplers have stopped (to release what they kept open).
func (g *background) onStop(fn func()) { g.done = append(g.done, fn) }

// stop ends the samplers and waits for them.
func (g *background) stop() {
	g.cancel()
	g.wg.Wait()
	for _, fn := range g.done {
		fn()
	}
	g.done = nil
}
