package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second agent on the same node stops before it writes a cgroup of the first one's: on the
// same socket (refused at the socket) and on the same cgroup tree with a socket and state
// folder of its own (refused at the tree's lock). Before, the first refusal came after the
// second agent had rewritten the first one's workloads to its own (empty) idea of them.
func TestASecondAgentStopsBeforeTouchingTheFirstOnes(t *testing.T) {
	n := newNode(t, "")
	n.start()
	n.run("--tier", "shared", "--name", "web", "--cpus", "1", "--memory", "200Mi", "--", "sleep", "600")
	web := n.waitWorkload("web")
	lendingGrows(n)
	files := func() string {
		return fmt.Sprintf("web quota %s, web memory %s, reclaimed quota %s, reclaimed memory %s",
			n.file("cpu", web.Cgroup, "cpu.cfs_quota_us"), n.file("memory", web.Cgroup, "memory.limit_in_bytes"),
			n.file("cpu", n.root+"-reclaimed", "cpu.cfs_quota_us"), n.file("memory", n.root+"-reclaimed", "memory.limit_in_bytes"))
	}
	for _, c := range []struct{ what, socket, want string }{
		{"the same socket", n.socket, "already serving"},
		{"a socket of its own", filepath.Join(t.TempDir(), "second.sock"), "another tidal agent manages the cgroup tree"},
	} {
		before := files()
		dir := t.TempDir()
		cfg := filepath.Join(dir, "second.yaml")
		yaml := fmt.Sprintf("cgroup:\n  root: %s\nstateDir: %s\nsocketPath: %s\nmetricsAddress: \"\"\n", n.root, filepath.Join(dir, "state"), c.socket)
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		// One that does not stop is killed after 20 s (and fails the test below).
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, tidalBin, "agent", "--config", cfg).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("a second agent on %s: %v, output %q; want it refused (%q)", c.what, err, out, c.want)
		}
		if after := files(); after != before {
			t.Errorf("a second agent on %s rewrote the first one's cgroups:\nbefore %s\nafter  %s", c.what, before, after)
		}
		if _, err := os.Stat(filepath.Join(dir, "state", "agent_state.json")); err == nil {
			t.Errorf("a second agent on %s wrote a checkpoint before it stopped", c.what)
		}
	}
	if _, err := n.client.Status(); err != nil {
		t.Errorf("the first agent no longer answers: %v", err)
	}
}

// An agent that stops leaves no core lent: with no fast path left to take them back on a
// spike, online work under the cores mechanism gets every CPU back, and the CPU lent falls to
// its minimum. Reclaimed work keeps running.
func TestAStoppedAgentHandsTheCoresBack(t *testing.T) {
	n, web, burn := idleWebBesideABurner(t, "cpu:\n  peakWindow: 3s\n  mechanism: cores\n  minReclaimedMilliCPU: 10\n")
	all := n.cpus(n.root)
	n.eventually(20*time.Second, "a whole core lent, online work off it", func() error {
		if got := n.cpus(web.Cgroup); got.Equals(all) {
			return fmt.Errorf("web still on %s", got)
		}
		return nil
	})
	if err := n.agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.agent.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent on SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop within 10s of SIGTERM")
	}
	for _, rel := range []string{n.root + "/shared", web.Cgroup, n.root + "/system"} {
		if got := n.cpus(rel); !got.Equals(all) {
			t.Errorf("%s on %s after the agent stopped, want every CPU %s back", rel, got, all)
		}
	}
	if q := n.file("cpu", n.root+"-reclaimed", "cpu.cfs_quota_us"); q != "1000" {
		t.Errorf("reclaimed quota %s after the agent stopped, want 1000 (its 10m minimum)", q)
	}
	if err := syscall.Kill(burn.PIDs[0], 0); err != nil {
		t.Errorf("reclaimed work stopped with the agent: %v", err)
	}
	if !strings.Contains(n.log.String(), "agent stopped: reclaimed CPU at its minimum") {
		t.Errorf("the agent's log does not say what it left:\n%s", n.log.String())
	}
}
