// Package integration runs the real tidal binary on this machine: a standalone agent managing
// real cgroups, and real processes started through `tidal run`. Each test owns a uniquely
// named cgroup root, socket and state folder, and leaves no process or cgroup behind.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

// tidalBin is the binary under test, built once by TestMain.
var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// node is one agent under test with its own cgroup root, socket and state.
type node struct {
	t      testing.TB
	layout *cgroupfs.Layout
	root   string
	dir    string
	config string
	socket string
	agent  *exec.Cmd
	log    *syncBuffer
	client *agent.Client
}

// newNode prepares (but does not start) an agent whose config is the defaults plus extra YAML
// lines, e.g. "cpu:\n  growStepMilliCPU: 1000".
func newNode(t testing.TB, extra string) *node {
	t.Helper()
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	dir := t.TempDir()
	n := &node{t: t, layout: layout, root: root, dir: dir, socket: filepath.Join(dir, "tidal.sock")}
	n.config = filepath.Join(dir, "tidal.yaml")
	cfg := fmt.Sprintf("cgroup:\n  root: %s\nstateDir: %s\nsocketPath: %s\nmetricsAddress: \"\"\nlogLevel: debug\n%s\n",
		root, filepath.Join(dir, "state"), n.socket, extra)
	if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n.client = agent.NewClient(n.socket)
	return n
}

// start runs the agent and waits until it answers.
func (n *node) start() {
	n.t.Helper()
	n.log = &syncBuffer{}
	n.agent = testutil.StartDaemon(n.t, "agent", n.log, 5*time.Second, tidalBin, "agent", "--config", n.config)
	n.eventually(10*time.Second, "agent answers", func() error { _, err := n.client.Status(); return err })
}

// lendToABurner runs a reclaimed burner on every CPU and waits until lending is well past its
// minimum.
func (n *node) lendToABurner() reporter.Workload {
	n.t.Helper()
	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	burn := n.waitWorkload("burn")
	n.eventually(20*time.Second, "lending grows well past its minimum", func() error {
		if s := n.status(); s.Lendable.MilliCPU < 500 {
			return fmt.Errorf("lendable %dm", s.Lendable.MilliCPU)
		}
		return nil
	})
	return burn
}

// cutByOnlineLoad runs an online burner on every CPU and waits until the node lends under
// half of lent, what it lent before.
func (n *node) cutByOnlineLoad(lent int64) {
	n.t.Helper()
	n.run("--tier", "shared", "--name", "online", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	n.waitWorkload("online")
	n.eventually(5*time.Second, "online load cuts lending", func() error {
		if s := n.status(); s.Lendable.MilliCPU > lent/2 {
			return fmt.Errorf("still lends %dm (was %dm)", s.Lendable.MilliCPU, lent)
		}
		return nil
	})
}

// kill9 kills the agent without giving it a chance to clean up.
func (n *node) kill9() {
	_ = n.agent.Process.Kill()
	_, _ = n.agent.Process.Wait()
}

// appendConfig adds YAML lines to the agent's config, for its next start.
func (n *node) appendConfig(yaml string) {
	n.t.Helper()
	testutil.AppendFile(n.t, n.config, yaml)
}

// run starts `tidal run ARGS` in its own process group, killed at the end of the test.
func (n *node) run(args ...string) (*exec.Cmd, *syncBuffer) {
	n.t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(tidalBin, append([]string{"run", "--socket", n.socket}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The command runs in a process group of its own (tidal run forwards signals to it), so
	// a stray one could hold the output pipe open: never wait on it for long.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		// SIGTERM is forwarded to the command; whatever is left dies with the cgroup root.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd, out
}

func (n *node) status() reporter.Status {
	n.t.Helper()
	s, err := n.client.Status()
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

func (n *node) workload(name string) (reporter.Workload, bool) {
	for _, w := range n.status().Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return reporter.Workload{}, false
}

// waitWorkload waits until a workload is admitted and has a process.
func (n *node) waitWorkload(name string) reporter.Workload {
	n.t.Helper()
	var w reporter.Workload
	n.eventually(10*time.Second, "workload "+name+" running", func() error {
		var ok bool
		if w, ok = n.workload(name); !ok || len(w.PIDs) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	return w
}

// file reads a cgroup file of the test's tree.
func (n *node) file(controller, rel, name string) string {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(n.layout.Dir(controller, rel), name))
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// cpus reads a cgroup's cpuset.cpus.
func (n *node) cpus(rel string) cpuset.CPUSet {
	n.t.Helper()
	set, err := cpuset.Parse(n.file("cpuset", rel, "cpuset.cpus"))
	if err != nil {
		n.t.Fatal(err)
	}
	return set
}

func (n *node) eventually(timeout time.Duration, what string, f func() error) {
	n.t.Helper()
	testutil.Eventually(n.t, timeout, what, f)
}

// cpuUsage is a cgroup's CPU time used over d.
func (n *node) cpuUsage(rel string, d time.Duration) time.Duration {
	n.t.Helper()
	a, err := n.layout.CPUUsage(rel)
	if err != nil {
		n.t.Fatal(err)
	}
	time.Sleep(d)
	b, err := n.layout.CPUUsage(rel)
	if err != nil {
		n.t.Fatal(err)
	}
	return b - a
}

func readFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	return string(data), err
}

// Shared helpers, under the names these tests use.
var tail = testutil.Tail

type syncBuffer = testutil.SyncBuffer

// idleWebBesideABurner starts a node with config, an idle shared workload "web" and a
// reclaimed burner "burn" on every CPU: a node with whole cores to lend. It needs 2 CPUs, one
// to lend and one to keep.
func idleWebBesideABurner(t *testing.T, config string) (n *node, web, burn reporter.Workload) {
	t.Helper()
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: one lent, one kept")
	}
	n = newNode(t, config)
	n.start()
	n.run("--tier", "shared", "--name", "web", "--", "sleep", "600")
	web = n.waitWorkload("web")
	n.run("--tier", "reclaimed", "--name", "burn", "--", tidalBin, "workload", "burner", "--threads", strconv.Itoa(runtime.NumCPU()))
	burn = n.waitWorkload("burn")
	return n, web, burn
}
