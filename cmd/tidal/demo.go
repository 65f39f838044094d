package main

// `tidal demo`: a live colocation demo on this host. It runs an online web server (shared
// tier), an offline CPU burner (reclaimed tier) and a load generator (system tier) as child
// processes through `tidal run`, so they go through the agent's API into real cgroups; drives
// the server through a low / spike / low schedule; prints one line per second of what the
// online service, the node and the agent are doing; and ends with a per-phase summary and a
// reading of how the agent reacted to the spike.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// The load schedule as shares of --duration: low, spike, then low again (the rest).
const (
	lowShare   = 0.35
	spikeShare = 0.30
)

const (
	demoCgroupRoot = "tidal-demo"
	// demoPeakWindow is the in-process agent's prediction window: short, so that lending
	// visibly grows back within the demo.
	demoPeakWindow = 10 * time.Second
	agentTimeout   = 5 * time.Second  // for the in-process agent to answer on its socket
	admitTimeout   = 10 * time.Second // for a workload to show up in the agent's status
	healthyTimeout = 10 * time.Second // for the web server to answer /healthz
	stopGrace      = 3 * time.Second  // between SIGTERM and SIGKILL
	// scheduleSlack is how long past the schedule the load generator may take to finish.
	scheduleSlack = 20 * time.Second
	actionWidth   = 55 // "last action" column: the sample line stays within 99 columns
	textWidth     = 96
)

// errInterrupted ends the demo early on SIGINT/SIGTERM; runDemo turns it into exit status 130.
var errInterrupted = errors.New("interrupted")

type demoOptions struct {
	duration      time.Duration
	lowRPS        float64
	spikeRPS      float64
	work          time.Duration
	burnerThreads int
	socket        string
	cgroupRoot    string
}

func parseDemoFlags(args []string) (demoOptions, error) {
	var o demoOptions
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 75*time.Second, "length of the load schedule: low 35%, spike 30%, low 35%")
	fs.Float64Var(&o.lowRPS, "low-rps", 150, "online requests/s in the low phases")
	fs.Float64Var(&o.spikeRPS, "spike-rps", 600, "online requests/s in the spike")
	fs.DurationVar(&o.work, "work", 1500*time.Microsecond, "CPU work per online request")
	fs.IntVar(&o.burnerThreads, "burner-threads", 2, "threads of the offline CPU burner")
	fs.StringVar(&o.socket, "socket", config.Default().SocketPath,
		"use the agent answering on this socket; without one the demo runs its own, in-process")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", demoCgroupRoot, "cgroup tree of the in-process agent (removed at the end)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: tidal demo [flags]   (as root)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.duration < 3*time.Second:
		return o, fmt.Errorf("--duration %s: want at least 3s", o.duration)
	case !(o.lowRPS > 0) || !(o.spikeRPS > 0):
		return o, fmt.Errorf("--low-rps %g, --spike-rps %g: want rates above 0", o.lowRPS, o.spikeRPS)
	case o.work <= 0 || o.work > 10*time.Second:
		return o, fmt.Errorf("--work %s: want a duration in (0, 10s]", o.work)
	case o.burnerThreads < 1:
		return o, fmt.Errorf("--burner-threads %d: want at least 1", o.burnerThreads)
	}
	return o, nil
}

func runDemo(ctx context.Context, args []string) error {
	opts, err := parseDemoFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root: its workloads run in cgroups managed by the agent (run it as root)")
	}
	err = demo(ctx, opts, os.Stdout)
	if err == errInterrupted {
		fmt.Fprintln(os.Stderr, "tidal demo: interrupted; workloads stopped and cleaned up")
		return exitError{130}
	}
	return err
}

// demo finds or starts the agent, runs the session and always cleans up after both.
func demo(ctx context.Context, opts demoOptions, out io.Writer) (err error) {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the tidal binary: %w", err)
	}
	s := &session{opts: opts, self: self, out: out, started: time.Now()}
	if _, serr := agent.NewClient(opts.socket).Status(); serr == nil {
		s.socket = opts.socket
		fmt.Fprintf(out, "agent:    using the agent already running on %s\n", opts.socket)
	} else {
		if busy := cgroupsInUse(config.Default().Cgroup.MountPoint, opts.cgroupRoot); len(busy) > 0 {
			return fmt.Errorf("another tidal demo seems to be running: processes in %s and %d more cgroups", busy[0], len(busy)-1)
		}
		var local *localAgent
		if local, err = startLocalAgent(opts.cgroupRoot); err != nil {
			return fmt.Errorf("starting the in-process agent: %w", err)
		}
		defer func() {
			if err != nil && err != errInterrupted {
				local.printLogTail(os.Stderr, 15)
			}
			if serr := local.stop(); serr != nil {
				err = errors.Join(nonInterrupt(err), fmt.Errorf("cleaning up the in-process agent: %w", serr))
			}
		}()
		s.socket = local.cfg.SocketPath
		s.peakWindow = local.cfg.CPU.PeakWindow
		fmt.Fprintf(out, "agent:    in-process (no agent on %s), cgroup root %q, peak window %s\n",
			opts.socket, local.cfg.Cgroup.Root, local.cfg.CPU.PeakWindow)
		fmt.Fprintf(out, "          log %s (removed at the end)\n", local.logPath)
	}
	s.client = agent.NewClient(s.socket)
	return s.run(ctx)
}

// nonInterrupt keeps a cleanup failure from being reported as a plain interruption.
func nonInterrupt(err error) error {
	if err == errInterrupted {
		return errors.New("interrupted")
	}
	return err
}

// ---- the in-process agent ----

// localAgent is an agent the demo runs in its own process, with its state, socket and log in
// a temporary folder, and its own cgroup tree that it removes at the end.
type localAgent struct {
	dir     string
	logPath string
	logFile *os.File
	cfg     config.Config
	agent   *agent.Agent
	cancel  context.CancelFunc
	done    chan error // Run's result
}

func startLocalAgent(cgroupRoot string) (l *localAgent, err error) {
	dir, err := os.MkdirTemp("", "tidal-demo-")
	if err != nil {
		return nil, err
	}
	l = &localAgent{dir: dir, logPath: filepath.Join(dir, "agent.log")}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.stop())
		}
	}()
	l.cfg = config.Default()
	l.cfg.Cgroup.Root = cgroupRoot
	l.cfg.StateDir = filepath.Join(dir, "state")
	l.cfg.SocketPath = filepath.Join(dir, "tidal.sock")
	l.cfg.MetricsAddress = ""
	l.cfg.CPU.PeakWindow = demoPeakWindow
	if l.logFile, err = os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return l, err
	}
	log := slog.New(slog.NewTextHandler(l.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if l.agent, err = agent.New(l.cfg, log); err != nil {
		return l, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan error, 1)
	go func() { l.done <- l.agent.Run(ctx) }()
	return l, l.waitServing()
}

// waitServing waits until the agent answers on its socket.
func (l *localAgent) waitServing() error {
	client := agent.NewClient(l.cfg.SocketPath)
	deadline := time.Now().Add(agentTimeout)
	for {
		_, err := client.Status()
		if err == nil {
			return nil
		}
		select {
		case runErr := <-l.done:
			l.done <- runErr // stop reads it again
			return fmt.Errorf("agent stopped at start: %v", runErr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent did not answer on %s within %s: %v", l.cfg.SocketPath, agentTimeout, err)
		}
	}
}

// stop ends the agent, removes its cgroup tree and its temporary folder, and checks that no
// cgroup is left behind.
func (l *localAgent) stop() error {
	var errs []error
	if l.cancel != nil {
		l.cancel()
		if err := <-l.done; err != nil {
			errs = append(errs, fmt.Errorf("agent: %w", err))
		}
	}
	if l.agent != nil {
		if err := l.agent.Teardown(); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroups: %w", err))
		}
		if left := cgroupsLeft(l.cfg.Cgroup.MountPoint, l.cfg.Cgroup.Root); len(left) > 0 {
			errs = append(errs, fmt.Errorf("cgroups left behind: %s", strings.Join(left, ", ")))
		}
	}
	if l.logFile != nil {
		l.logFile.Close()
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// printLogTail shows the end of the agent's log, which is about to be removed.
func (l *localAgent) printLogTail(w io.Writer, n int) {
	data, err := os.ReadFile(l.logPath)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Fprintf(w, "last lines of the agent's log:\n  %s\n", strings.Join(lines, "\n  "))
}

// cgroupsLeft lists the folders of tidal's tree named root still present under mount, in any
// cgroup v1 hierarchy or the v2 tree.
func cgroupsLeft(mount, root string) []string {
	left, _ := filepath.Glob(filepath.Join(mount, "*", root))
	if _, err := os.Stat(filepath.Join(mount, root)); err == nil {
		left = append(left, filepath.Join(mount, root))
	}
	return left
}

// cgroupsInUse lists the cgroups of tidal's tree named root, under mount, that hold processes.
func cgroupsInUse(mount, root string) []string {
	var busy []string
	for _, top := range cgroupsLeft(mount, root) {
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(data)) > 0 {
				busy = append(busy, filepath.Dir(p))
			}
			return nil
		})
	}
	return busy
}

// ---- the load schedule ----

type demoPhase struct {
	name string
	dur  time.Duration
	rps  float64
}

// demoSchedule splits total into low (35%), spike (30%) and low again (the rest).
func demoSchedule(total time.Duration, lowRPS, spikeRPS float64) []demoPhase {
	low := time.Duration(float64(total) * lowShare).Round(time.Millisecond)
	spike := time.Duration(float64(total) * spikeShare).Round(time.Millisecond)
	return []demoPhase{{"low", low, lowRPS}, {"spike", spike, spikeRPS}, {"low2", total - low - spike, lowRPS}}
}

// phaseSpec writes the schedule in the load generator's --phases syntax.
func phaseSpec(ps []demoPhase) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s:%s@%s", p.name, p.dur, strconv.FormatFloat(p.rps, 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}

// phaseAt names the phase scheduled at offset t, or "" outside the schedule.
func phaseAt(ps []demoPhase, t time.Duration) string {
	if t < 0 {
		return ""
	}
	for _, p := range ps {
		if t < p.dur {
			return p.name
		}
		t -= p.dur
	}
	return ""
}

// phaseStart is the offset at which the named phase begins.
func phaseStart(ps []demoPhase, name string) time.Duration {
	var t time.Duration
	for _, p := range ps {
		if p.name == name {
			break
		}
		t += p.dur
	}
	return t
}

func scheduleLength(ps []demoPhase) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.dur
	}
	return t
}

// ---- workloads as child processes ----

// child is one `tidal run ... -- tidal workload ...` process, in its own process group.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	exited chan struct{} // closed once its output is read and it is reaped
	err    error         // how it ended; read only after exited is closed
}

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// describe says how an exited child ended, with the end of what it wrote to stderr.
func (c *child) describe() string {
	msg := "exited"
	if c.err != nil {
		msg = c.err.Error()
	}
	if tail := strings.TrimSpace(c.stderr.String()); tail != "" {
		msg += ": " + strings.ReplaceAll(tail, "\n", "; ")
	}
	return msg
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// startChild runs `tidal run --tier tier --name name -- tidal workload ARGS`. readStdout, when
// not nil, reads the workload's report lines until they end; otherwise stdout is discarded.
func startChild(self, socket, name, tier string, workloadArgs []string, readStdout func(io.Reader)) (*child, error) {
	args := append([]string{"run", "--socket", socket, "--tier", tier, "--name", name, "--", self, "workload"}, workloadArgs...)
	c := &child{name: name, cmd: exec.Command(self, args...), stderr: &tailBuffer{}, exited: make(chan struct{})}
	c.cmd.Stderr = c.stderr
	// Its own process group, so a Ctrl-C on the terminal reaches only the demo, which stops
	// the children in order. Pdeathsig stops them too if the demo itself is killed.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var stdout io.ReadCloser
	if readStdout != nil {
		var err error
		if stdout, err = c.cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		defer close(c.exited)
		if stdout != nil {
			readStdout(stdout)
			_, _ = io.Copy(io.Discard, stdout) // after a bad line, keep the pipe from filling
		}
		c.err = c.cmd.Wait()
	}()
	return c, nil
}

// stopChildren sends SIGTERM to each running child's process group (`tidal run` forwards it to
// its workload), waits up to stopGrace, then kills what is left, workloads included.
func stopChildren(cs []*child) error {
	for _, c := range cs {
		if c.running() {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(stopGrace)
	var errs []error
	for _, c := range cs {
		select {
		case <-c.exited:
			continue
		case <-time.After(time.Until(deadline)):
		}
		killTree(c.cmd.Process.Pid)
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit after SIGKILL", c.name, c.cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}

// killTree kills the process group of pid and those of its children: `tidal run` puts its
// workload in a group of its own.
func killTree(pid int) {
	kids := childPIDs(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(-k, syscall.SIGKILL)
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// childPIDs lists the processes whose parent is pid, from /proc/*/stat.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if ppid, ok := parentFromStat(data); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// parentFromStat reads the parent pid from a /proc/PID/stat line: "pid (comm) state ppid ...".
func parentFromStat(data []byte) (int, bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// lineFeed keeps the latest interval line and the final line of one workload's report stream.
type lineFeed[T any] struct {
	isFinal func(T) bool
	done    chan struct{} // closed when the final line arrived

	mu     sync.Mutex
	latest T
	have   bool
	final  T
	ended  bool // the final line arrived
	err    error
}

func newLineFeed[T any](isFinal func(T) bool) *lineFeed[T] {
	return &lineFeed[T]{isFinal: isFinal, done: make(chan struct{})}
}

// read decodes lines from r until it ends (the child's goroutine calls it).
func (f *lineFeed[T]) read(r io.Reader) {
	err := workload.DecodeLines(r, func(l T) error { f.add(l); return nil })
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *lineFeed[T]) add(l T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.isFinal(l) {
		f.latest, f.have = l, true
		return
	}
	if !f.ended {
		f.final, f.ended = l, true
		close(f.done)
	}
}

func (f *lineFeed[T]) Latest() (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, f.have
}

func (f *lineFeed[T]) Final() (T, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.final, f.ended, f.err
}

// ---- the session ----

type session struct {
	opts       demoOptions
	self       string
	socket     string
	client     *agent.Client
	out        io.Writer
	started    time.Time
	peakWindow time.Duration // 0 when the agent was already running (not known)
	children   []*child
}

// run starts the workloads, watches the schedule and prints the summary; it stops every child
// it started, also on errors and interruption.
func (s *session) run(ctx context.Context) (err error) {
	defer func() {
		if serr := s.stopAll(); serr != nil {
			err = errors.Join(nonInterrupt(err), fmt.Errorf("stopping workloads: %w", serr))
		}
	}()
	sched := demoSchedule(s.opts.duration, s.opts.lowRPS, s.opts.spikeRPS)
	s.printPlan(sched)

	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	web, err := s.start(ctx, "demo-web", "shared", []string{"server", "--addr", addr, "--work", s.opts.work.String()}, nil)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, web, "http://"+addr+"/healthz"); err != nil {
		return err
	}

	burnFeed := newLineFeed(func(l workload.BurnerLine) bool { return l.Final })
	burner, err := s.start(ctx, "demo-batch", "reclaimed",
		[]string{"burner", "--threads", strconv.Itoa(s.opts.burnerThreads)}, burnFeed.read)
	if err != nil {
		return err
	}

	lgFeed := newLineFeed(func(l workload.LoadGenLine) bool { return l.Final })
	cpu := newCPUMeter()
	lgStart := time.Now()
	lg, err := s.start(ctx, "demo-loadgen", "system",
		[]string{"loadgen", "--url", "http://" + addr + "/work", "--phases", phaseSpec(sched)}, lgFeed.read)
	if err != nil {
		return err
	}

	m := &monitor{
		out: s.out, client: s.client, sched: sched, start: lgStart, cpu: cpu,
		actions: &actionLog{last: s.started},
		lg:      lgFeed, burn: burnFeed, lgChild: lg, web: web, burner: burner,
	}
	final, err := m.run(ctx)
	if err != nil {
		return err
	}
	if err := s.stopAll(); err != nil {
		return fmt.Errorf("stopping workloads: %w", err)
	}
	if st, err := s.client.Status(); err == nil {
		m.actions.add(st.Actions)
	}
	burnFinal, _, _ := burnFeed.Final()
	s.printSummary(sched, final, burnFinal, m)
	return nil
}

func (s *session) printPlan(sched []demoPhase) {
	fmt.Fprintf(s.out, "online:   demo-web, shared tier, %s of CPU per request\n", s.opts.work)
	fmt.Fprintf(s.out, "offline:  demo-batch, reclaimed tier, a %d-thread CPU burner\n", s.opts.burnerThreads)
	parts := make([]string, len(sched))
	for i, p := range sched {
		parts[i] = fmt.Sprintf("%s %s @ %g rps", p.name, p.dur, p.rps)
	}
	fmt.Fprintf(s.out, "load:     demo-loadgen, system tier: %s\n\n", strings.Join(parts, ", "))
}

// start runs a workload and waits until the agent has admitted it.
func (s *session) start(ctx context.Context, name, tier string, args []string, readStdout func(io.Reader)) (*child, error) {
	c, err := startChild(s.self, s.socket, name, tier, args, readStdout)
	if err != nil {
		return nil, err
	}
	s.children = append(s.children, c)
	err = waitFor(ctx, c, admitTimeout, "the agent admitted it", func() bool {
		st, err := s.client.Status()
		if err != nil {
			return false
		}
		for _, w := range st.Workloads {
			if w.Name == name {
				return true
			}
		}
		return false
	})
	return c, err
}

// stopAll stops every child started so far; a second call has nothing left to do.
func (s *session) stopAll() error {
	err := stopChildren(s.children)
	s.children = nil
	return err
}

// waitFor polls ready until it holds, the child exits, ctx ends or timeout passes.
func waitFor(ctx context.Context, c *child, timeout time.Duration, what string, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: waited %s and still not %s", c.name, timeout, what)
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-c.exited:
			return fmt.Errorf("%s ended before %s: %s", c.name, what, c.describe())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func waitHealthy(ctx context.Context, web *child, url string) error {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	return waitFor(ctx, web, healthyTimeout, "it answered "+url, func() bool {
		resp, err := hc.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// freePort finds a free loopback TCP port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ---- per-second monitoring ----

// sample is one second of the demo.
type sample struct {
	elapsed    time.Duration // since the load generator started
	phase      string        // scheduled at the middle of the second
	rps, p99   float64       // online, from the latest load generator line
	haveOnline bool
	cpuPct     float64 // node CPU utilization over the second
	haveCPU    bool
	lentCores  float64 // reclaimed CPU lent now
	offline    float64 // burner units/s, from its latest line
	haveOff    bool
	action     string // latest agent action, "kind reason"
}

type monitor struct {
	out     io.Writer
	client  *agent.Client
	sched   []demoPhase
	start   time.Time
	cpu     *cpuMeter
	actions *actionLog
	lg      *lineFeed[workload.LoadGenLine]
	burn    *lineFeed[workload.BurnerLine]
	lgChild *child
	web     *child
	burner  *child
	samples []sample
}

// run prints a line per second until the load generator's final line arrives.
func (m *monitor) run(ctx context.Context) (workload.LoadGenLine, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(scheduleLength(m.sched) + scheduleSlack)
	defer deadline.Stop()
	fmt.Fprintln(m.out, sampleHeader())
	for {
		select {
		case <-ctx.Done():
			return workload.LoadGenLine{}, errInterrupted
		case <-m.lg.done:
			final, _, _ := m.lg.Final()
			return final, nil
		case <-m.lgChild.exited:
			if final, ok, _ := m.lg.Final(); ok {
				return final, nil
			}
			_, _, rerr := m.lg.Final()
			return workload.LoadGenLine{}, fmt.Errorf("demo-loadgen ended without its final report (%v): %s", rerr, m.lgChild.describe())
		case <-m.web.exited:
			return workload.LoadGenLine{}, fmt.Errorf("%s ended during the demo: %s", m.web.name, m.web.describe())
		case <-m.burner.exited:
			return workload.LoadGenLine{}, fmt.Errorf("%s ended during the demo: %s", m.burner.name, m.burner.describe())
		case <-deadline.C:
			return workload.LoadGenLine{}, fmt.Errorf("demo-loadgen still running %s after its schedule should have ended", scheduleSlack)
		case now := <-tick.C:
			sm, err := m.sample(now)
			if err != nil {
				return workload.LoadGenLine{}, err
			}
			m.samples = append(m.samples, sm)
			fmt.Fprintln(m.out, formatSample(sm))
		}
	}
}

func (m *monitor) sample(now time.Time) (sample, error) {
	el := now.Sub(m.start)
	sm := sample{elapsed: el, phase: phaseAt(m.sched, el-time.Second/2)}
	if l, ok := m.lg.Latest(); ok {
		sm.rps, sm.p99, sm.haveOnline = l.RPS, l.P99Ms, true
	}
	if l, ok := m.burn.Latest(); ok {
		sm.offline, sm.haveOff = l.UnitsPerS, true
	}
	sm.cpuPct, sm.haveCPU = m.cpu.next()
	st, err := m.client.Status()
	if err != nil {
		return sm, fmt.Errorf("asking the agent for its status: %w", err)
	}
	sm.lentCores = lentCores(st)
	if a, ok := mostTelling(m.actions.add(st.Actions)); ok {
		sm.action = a.Kind + " " + a.Reason
	}
	return sm, nil
}

// lentCores is the CPU lent to reclaimed work now, summed over NUMA nodes.
func lentCores(st reporter.Status) float64 {
	var milli int64
	for _, p := range st.Pools {
		milli += p.LentMilliCPU
	}
	return float64(milli) / 1000
}

func sampleHeader() string {
	return fmt.Sprintf("%3s %-5s %4s %6s %4s %5s %9s  %s", "t", "phase", "rps", "p99ms", "cpu%", "lent", "offline/s", "last agent action")
}

func formatSample(s sample) string {
	rps, p99, cpu, off := "-", "-", "-", "-"
	if s.haveOnline {
		rps, p99 = fmt.Sprintf("%.0f", s.rps), fmt.Sprintf("%.1f", s.p99)
	}
	if s.haveCPU {
		cpu = fmt.Sprintf("%.0f", s.cpuPct)
	}
	if s.haveOff {
		off = fmt.Sprintf("%.0f", s.offline)
	}
	phase := s.phase
	if phase == "" {
		phase = "-"
	}
	return fmt.Sprintf("%3.0f %-5s %4s %6s %4s %5.2f %9s  %s", s.elapsed.Seconds(), phase, rps, p99, cpu, s.lentCores, off,
		truncate(orDash(s.action), actionWidth))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 3 {
		return string(r[:n])
	}
	return string(r[:n-3]) + "..."
}

// cpuMeter turns /proc/stat readings into node CPU utilization between calls.
type cpuMeter struct {
	busy, total float64
	ok          bool
}

func newCPUMeter() *cpuMeter {
	m := &cpuMeter{}
	m.next()
	return m
}

// next returns the utilization (percent of all CPUs) since the previous call.
func (m *cpuMeter) next() (float64, bool) {
	times, err := metrics.ReadCPUTimes("/proc")
	if err != nil {
		m.ok = false
		return 0, false
	}
	var busy, total float64
	for _, t := range times {
		busy += t.Busy
		total += t.Total
	}
	prevOK, db, dt := m.ok, busy-m.busy, total-m.total
	m.busy, m.total, m.ok = busy, total, true
	if !prevOK || dt <= 0 {
		return 0, false
	}
	return 100 * db / dt, true
}

// actionLog collects the agent's actions newer than the demo's start, across status reads
// (the agent keeps only a bounded history).
type actionLog struct {
	last time.Time
	seen []reporter.Action
}

// add records the actions newer than any seen so far and returns them.
func (l *actionLog) add(acts []reporter.Action) []reporter.Action {
	n := len(l.seen)
	for _, a := range acts {
		if a.Time.After(l.last) {
			l.seen = append(l.seen, a)
			l.last = a.Time
		}
	}
	return l.seen[n:]
}

// actionRank orders action kinds by how much they tell about the demo: CPU taken back first.
var actionRank = map[string]int{"throttle": 0, "evict": 1, "shrink": 2, "reset": 3, "grow": 4}

// mostTelling picks the action to show for a second: the highest-ranked kind, the latest of
// those; CPU decisions before memory ones of the same kind.
func mostTelling(acts []reporter.Action) (reporter.Action, bool) {
	rank := func(a reporter.Action) int {
		r, ok := actionRank[a.Kind]
		if !ok {
			r = len(actionRank)
		}
		r *= 2
		if !strings.Contains(a.Reason, "CPU") {
			r++
		}
		return r
	}
	best, found := reporter.Action{}, false
	for _, a := range acts {
		if !found || rank(a) <= rank(best) {
			best, found = a, true
		}
	}
	return best, found
}

// ---- the summary ----

// phaseRow is one line of the summary: the load generator's whole-phase latencies and the
// means of the seconds sampled in that phase.
type phaseRow struct {
	workload.PhaseStats
	cpuPct, lentCores, offline float64
	haveCPU, haveLent, haveOff bool
}

func phaseRows(stats []workload.PhaseStats, samples []sample) []phaseRow {
	rows := make([]phaseRow, len(stats))
	for i, ps := range stats {
		var cpu, lent, off mean
		for _, s := range samples {
			if s.phase != ps.Name {
				continue
			}
			lent.add(s.lentCores)
			if s.haveCPU {
				cpu.add(s.cpuPct)
			}
			if s.haveOff {
				off.add(s.offline)
			}
		}
		rows[i] = phaseRow{PhaseStats: ps}
		rows[i].cpuPct, rows[i].haveCPU = cpu.value()
		rows[i].lentCores, rows[i].haveLent = lent.value()
		rows[i].offline, rows[i].haveOff = off.value()
	}
	return rows
}

type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v float64) { m.sum += v; m.n++ }

func (m mean) value() (float64, bool) {
	if m.n == 0 {
		return 0, false
	}
	return m.sum / float64(m.n), true
}

func writePhaseTable(w io.Writer, rows []phaseRow) {
	fmt.Fprintf(w, "%-6s %10s %8s %8s %9s %9s %10s %10s\n", "phase", "target rps", "p50 ms", "p99 ms", "p99.9 ms", "node cpu%", "lent cores", "offline/s")
	for _, r := range rows {
		fmt.Fprintf(w, "%-6s %10.0f %8.1f %8.1f %9.1f %9s %10s %10s\n", r.Name, r.TargetRPS, r.P50Ms, r.P99Ms, r.P999Ms,
			fmtIf(r.haveCPU, "%.0f", r.cpuPct), fmtIf(r.haveLent, "%.2f", r.lentCores), fmtIf(r.haveOff, "%.0f", r.offline))
	}
	for _, r := range rows {
		if r.Errors > 0 {
			fmt.Fprintf(w, "%s: %d of %d requests failed\n", r.Name, r.Errors, r.Count)
		}
	}
}

func fmtIf(ok bool, format string, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// countActions summarizes actions by kind: "admit 3, grow 5, throttle 1".
func countActions(acts []reporter.Action) string {
	n := map[string]int{}
	for _, a := range acts {
		n[a.Kind]++
	}
	kinds := make([]string, 0, len(n))
	for k := range n {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (s *session) printSummary(sched []demoPhase, final workload.LoadGenLine, burner workload.BurnerLine, m *monitor) {
	rows := phaseRows(final.Phases, m.samples)
	fmt.Fprintln(s.out)
	writePhaseTable(s.out, rows)
	fmt.Fprintf(s.out, "\nonline: %d requests, %d errors; offline: %d units done\n", final.Count, final.Errors, burner.Total)
	fmt.Fprintf(s.out, "agent actions during the demo: %s\n\n", countActions(m.actions.seen))
	in := readingFromRun(sched, rows, m.samples, m.actions.seen, m.start, s.peakWindow)
	fmt.Fprintln(s.out, wrap(in.text(), textWidth))
}

// reading is what the summary's closing paragraph is made of.
type reading struct {
	lowRPS, spikeRPS float64
	lowP99, spikeP99 float64
	haveP99          bool
	lentBefore       float64 // last second before the spike
	lentLow          float64 // lowest during the spike
	lentAfter        float64 // highest in the last phase
	haveLent         bool
	throttleAfter    time.Duration // first throttle action after the scheduled spike start
	throttles        int           // throttle actions during the spike
	cutFrom, cutTo   int64         // millicores, from the first throttle's reason
	haveCut          bool
	shrinks          int // slow-loop CPU shrink actions during the spike
	offLow, offSpike float64
	haveOff          bool
	peakWindow       time.Duration // 0: unknown
}

func readingFromRun(sched []demoPhase, rows []phaseRow, samples []sample, acts []reporter.Action, start time.Time, peakWindow time.Duration) reading {
	first, spike, last := sched[0], sched[1], sched[len(sched)-1]
	r := reading{lowRPS: first.rps, spikeRPS: spike.rps, peakWindow: peakWindow}
	byName := map[string]phaseRow{}
	for _, row := range rows {
		byName[row.Name] = row
	}
	lowRow, okLow := byName[first.name]
	spikeRow, okSpike := byName[spike.name]
	if okLow && okSpike {
		r.lowP99, r.spikeP99, r.haveP99 = lowRow.P99Ms, spikeRow.P99Ms, true
		r.offLow, r.offSpike, r.haveOff = lowRow.offline, spikeRow.offline, lowRow.haveOff && spikeRow.haveOff
	}
	var haveBefore, haveDuring bool
	r.lentLow = -1
	for _, s := range samples {
		switch s.phase {
		case first.name:
			r.lentBefore, haveBefore = s.lentCores, true
		case spike.name:
			if !haveDuring || s.lentCores < r.lentLow {
				r.lentLow = s.lentCores
			}
			haveDuring = true
		case last.name:
			r.lentAfter = max(r.lentAfter, s.lentCores)
		}
	}
	r.haveLent = haveBefore && haveDuring
	spikeFrom := start.Add(phaseStart(sched, spike.name))
	spikeTo := spikeFrom.Add(spike.dur)
	r.throttleAfter = -1
	for _, a := range acts {
		if a.Time.Before(spikeFrom) || !a.Time.Before(spikeTo) {
			continue
		}
		switch a.Kind {
		case "throttle":
			if r.throttles == 0 {
				r.throttleAfter = a.Time.Sub(spikeFrom)
				r.cutFrom, r.cutTo, r.haveCut = parseCut(a.Reason)
			}
			r.throttles++
		case "shrink":
			if strings.Contains(a.Reason, "CPU") {
				r.shrinks++
			}
		}
	}
	return r
}

func (r reading) text() string {
	var b strings.Builder
	b.WriteString("Reading: ")
	if r.haveP99 {
		fmt.Fprintf(&b, "at %g rps the online p99 was %.1f ms; during the spike to %g rps it was %.1f ms. ", r.lowRPS, r.lowP99, r.spikeRPS, r.spikeP99)
	}
	switch {
	case r.throttles > 0:
		b.WriteString("During the spike tidal's fast path throttled the reclaimed pool " + times(r.throttles) + ". ")
		if r.haveCut {
			fmt.Fprintf(&b, "The first throttle cut it from %.2f to %.2f cores, ", float64(r.cutFrom)/1000, float64(r.cutTo)/1000)
		} else {
			b.WriteString("The first throttle came ")
		}
		fmt.Fprintf(&b, "%d ms after the spike was scheduled to begin. That delay is an upper bound on tidal's reaction time: "+
			"the spike start is counted from the launch of the load generator, a little before its first request, "+
			"and includes the time the extra requests took to raise online CPU use. ", r.throttleAfter.Milliseconds())
		if r.haveLent {
			fmt.Fprintf(&b, "Sampled once a second, lending was %.2f cores just before the spike and %.2f at its lowest during it. ", r.lentBefore, r.lentLow)
		}
	case r.haveLent && r.lentLow < r.lentBefore:
		fmt.Fprintf(&b, "Tidal took no throttle action during the spike; its slow loop shrank lending %s, "+
			"and the reclaimed pool went from %.2f cores before the spike to %.2f at its lowest. ", times(r.shrinks), r.lentBefore, r.lentLow)
	case r.haveLent:
		fmt.Fprintf(&b, "Tidal took no throttle action during the spike: lending was already down to %.2f cores "+
			"before it and went no lower. ", r.lentBefore)
	default:
		b.WriteString("Tidal took no throttle action during the spike. ")
	}
	if r.haveOff {
		fmt.Fprintf(&b, "Offline work ran at %.0f units/s during the spike against %.0f before it. ", r.offSpike, r.offLow)
	}
	switch {
	case !r.haveLent:
	case r.lentAfter <= r.lentLow:
		fmt.Fprintf(&b, "Lending did not grow back in the last phase (at most %.2f cores).", r.lentAfter)
	case r.peakWindow > 0:
		fmt.Fprintf(&b, "Once the spike left the agent's %s peak window, lending grew back, to %.2f cores in the last phase.", r.peakWindow, r.lentAfter)
	default:
		fmt.Fprintf(&b, "In the last phase lending grew back to %.2f cores.", r.lentAfter)
	}
	return strings.TrimSpace(b.String())
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// cutPattern finds the change in an advisor's reason: "... reclaimed CPU 1250m -> 300m".
var cutPattern = regexp.MustCompile(`reclaimed CPU (\d+)m -> (\d+)m`)

// parseCut reads the millicores before and after from an action's reason.
func parseCut(reason string) (from, to int64, ok bool) {
	m := cutPattern.FindStringSubmatch(reason)
	if m == nil {
		return 0, 0, false
	}
	from, err1 := strconv.ParseInt(m[1], 10, 64)
	to, err2 := strconv.ParseInt(m[2], 10, 64)
	return from, to, err1 == nil && err2 == nil
}

// wrap breaks text into lines of at most width columns at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
