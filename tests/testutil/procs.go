package testutil

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// FreeAddr is a loopback address nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Agent is a real `tidal agent` process with a cgroup root, socket and state folder of its own
// (tests/faults, tests/prom). The root is removed when the test ends, also on failure.
type Agent struct {
	T       testing.TB
	Bin     string
	Layout  *cgroupfs.Layout
	Root    string // cgroup root, relative to each hierarchy
	Dir     string
	Config  string
	Socket  string
	State   string
	Metrics string // host:port of /metrics, "" when off
	Cmd     *exec.Cmd
	Log     *SyncBuffer
	Client  *agent.Client
}

// NewAgent prepares (but does not start) an agent whose config is the test's own paths plus
// extra YAML. stateDir, when not "", replaces the state folder (a tmpfs, a read-only folder).
func NewAgent(t testing.TB, bin, extra, stateDir string, metrics bool) *Agent {
	t.Helper()
	layout := isolationtest.Layout(t)
	a := &Agent{T: t, Bin: bin, Layout: layout, Root: isolationtest.RootName(t, layout), Dir: t.TempDir()}
	a.Socket = filepath.Join(a.Dir, "tidal.sock")
	a.State = filepath.Join(a.Dir, "state")
	if stateDir != "" {
		a.State = stateDir
	}
	if metrics {
		a.Metrics = FreeAddr(t)
	}
	a.Config = filepath.Join(a.Dir, "tidal.yaml")
	cfg := fmt.Sprintf("cgroup:\n  root: %s\nstateDir: %s\nsocketPath: %s\nmetricsAddress: %q\nlogLevel: debug\n%s\n",
		a.Root, a.State, a.Socket, a.Metrics, extra)
	if err := os.WriteFile(a.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Client = agent.NewClient(a.Socket)
	return a
}

// Start runs the agent and waits until its API answers.
func (a *Agent) Start() {
	a.T.Helper()
	if a.Log == nil {
		a.Log = &SyncBuffer{}
	}
	a.Cmd = StartDaemon(a.T, "agent", a.Log, 5*time.Second, a.Bin, "agent", "--config", a.Config)
	Eventually(a.T, 15*time.Second, "agent answers", func() error { _, err := a.Client.Status(); return err })
}

// Kill9 kills the agent with SIGKILL and reaps it.
func (a *Agent) Kill9() {
	_ = a.Cmd.Process.Kill()
	_, _ = a.Cmd.Process.Wait()
}

// Alive reports whether the agent process is still running (not exited, not crashed).
func (a *Agent) Alive() bool {
	return a.Cmd.ProcessState == nil && syscall.Kill(a.Cmd.Process.Pid, 0) == nil
}

// Status is the agent's status; it fails the test when the agent does not answer.
func (a *Agent) Status() reporter.Status {
	a.T.Helper()
	s, err := a.Client.Status()
	if err != nil {
		a.T.Fatalf("agent status: %v", err)
	}
	return s
}

// Workload is the named workload in the agent's status.
func (a *Agent) Workload(name string) (reporter.Workload, bool) {
	s, err := a.Client.Status()
	if err != nil {
		return reporter.Workload{}, false
	}
	for _, w := range s.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return reporter.Workload{}, false
}

// Run starts `tidal run ARGS` in its own process group, killed when the test ends.
func (a *Agent) Run(args ...string) *exec.Cmd {
	a.T.Helper()
	out := &SyncBuffer{}
	cmd := exec.Command(a.Bin, append([]string{"run", "--socket", a.Socket}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		a.T.Fatal(err)
	}
	a.T.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// WaitWorkload waits until a workload is admitted and has a process.
func (a *Agent) WaitWorkload(name string) reporter.Workload {
	a.T.Helper()
	var w reporter.Workload
	Eventually(a.T, 15*time.Second, "workload "+name+" running", func() error {
		var ok bool
		if w, ok = a.Workload(name); !ok || len(w.PIDs) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	return w
}

// File reads a cgroup file (rel is relative to the hierarchy's mount).
func (a *Agent) File(controller, rel, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(a.Layout.Dir(controller, rel), name))
	return strings.TrimSpace(string(data)), err
}

// Scrape returns the agent's /metrics text.
func (a *Agent) Scrape() (string, error) {
	return Get("http://" + a.Metrics + "/metrics")
}

// Get returns the body of a GET, or an error for a non-200 answer.
func Get(url string) (string, error) {
	// Bounded: a daemon that accepts and never answers fails the test instead of hanging it.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(data), err
}

// Arbiter is a real standalone `tidal arbiter` on loopback, with tokens for the nodes named.
type Arbiter struct {
	T      testing.TB
	Bin    string
	Dir    string
	Addr   string
	URL    string
	Config string
	Cmd    *exec.Cmd
	Log    *SyncBuffer
}

// NewArbiter writes an arbiter's config, tokens and a policy that lends queue-1 400m and
// 128Mi per node for the hour around now, and starts it.
func NewArbiter(t testing.TB, bin string, nodes ...string) *Arbiter {
	t.Helper()
	now := time.Now().UTC()
	return NewArbiterWindow(t, bin, now.Add(-time.Hour).Format("15:04")+"-"+now.Add(time.Hour).Format("15:04"), nodes...)
}

// NewArbiterWindow is NewArbiter with the rule's lending window ("HH:MM-HH:MM", UTC).
func NewArbiterWindow(t testing.TB, bin, window string, nodes ...string) *Arbiter {
	t.Helper()
	a := &Arbiter{T: t, Bin: bin, Dir: t.TempDir(), Addr: FreeAddr(t)}
	a.URL = "http://" + a.Addr
	var tokens strings.Builder
	for _, n := range nodes {
		tok := "token-of-" + n + "-0123456789"
		fmt.Fprintf(&tokens, "%s: %s\n", n, tok)
		a.write(n+".token", tok+"\n")
	}
	policy := a.write("policy.yaml", fmt.Sprintf("sharedQueue: best-effort\nqueues:\n  - name: queue-1\nrules:\n  - name: batch-window\n    queue: queue-1\n    lend: {milliCPU: 400, memory: 128Mi}\n    window: %q\n    timeZone: UTC\n", window))
	a.Config = a.write("arbiter.yaml", fmt.Sprintf("listenAddress: %s\npolicyFile: %s\ntokensFile: %s\nstateDir: %s\nleaseTTL: 3s\nnodeTimeout: 20s\npollInterval: 1s\n",
		a.Addr, policy, a.write("tokens.yaml", tokens.String()), filepath.Join(a.Dir, "state")))
	a.Start()
	return a
}

func (a *Arbiter) write(name, content string) string {
	p := filepath.Join(a.Dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		a.T.Fatal(err)
	}
	return p
}

// Start runs the arbiter and waits until it is healthy.
func (a *Arbiter) Start() {
	a.T.Helper()
	if a.Log == nil {
		a.Log = &SyncBuffer{}
	}
	a.Cmd = StartDaemon(a.T, "arbiter", a.Log, 5*time.Second, a.Bin, "arbiter", "--config", a.Config)
	Eventually(a.T, 15*time.Second, "arbiter healthy", func() error { _, err := Get(a.URL + "/healthz"); return err })
}

// Kill9 kills the arbiter with SIGKILL and reaps it.
func (a *Arbiter) Kill9() {
	_ = a.Cmd.Process.Kill()
	_, _ = a.Cmd.Process.Wait()
}

// AgentConfig is the agent config that reports node to this arbiter every second.
func (a *Arbiter) AgentConfig(node string) string {
	return fmt.Sprintf("nodeName: %s\narbiter:\n  url: %s\n  tokenFile: %s\n  reportInterval: 1s\n", node, a.URL, filepath.Join(a.Dir, node+".token"))
}
