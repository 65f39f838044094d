package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/isolation/isolationtest"
)

// tidal run passes the command's exit status through, forwards signals to it, and answers
// "no agent" clearly when none runs.
func TestRunExitStatusAndSignals(t *testing.T) {
	n := newNode(t, "")
	n.start()

	cmd, _ := n.run("--tier", "shared", "--", "sh", "-c", "exit 7")
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("exit status: %v, want 7", err)
	}

	cmd, out := n.run("--tier", "reclaimed", "--name", "trapper", "--", "sh", "-c", "trap 'echo got TERM; exit 42' TERM; echo ready; while :; do sleep 0.1; done")
	n.waitWorkload("trapper")
	n.eventually(5*time.Second, "command started", func() error {
		if !strings.Contains(out.String(), "ready") {
			return errors.New("not yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 42 || !strings.Contains(out.String(), "got TERM") {
		t.Errorf("after SIGTERM to tidal run: %v, output %q; want the command to get TERM and exit 42", err, out)
	}
	n.eventually(5*time.Second, "workload released", func() error {
		if _, ok := n.workload("trapper"); ok {
			return errors.New("still listed")
		}
		return nil
	})

	noAgent := exec.Command(tidalBin, "run", "--socket", filepath.Join(t.TempDir(), "none.sock"), "--tier", "shared", "--", "true")
	got, err := noAgent.CombinedOutput()
	if err == nil || !strings.Contains(string(got), "no tidal agent is running") {
		t.Errorf("without an agent: %v %q", err, got)
	}

	// Called wrongly: exit 2 with what is missing, once (not the flag package's words twice).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "--tier is required"},
		{[]string{"run", "--tier", "shared"}, "no command to run"},
		{[]string{"status", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"agent", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		got, err := exec.Command(tidalBin, c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(string(got), c.want) != 1 {
			t.Errorf("tidal %q: %v, output %q; want exit 2 saying %q once", c.args, err, got, c.want)
		}
	}
}

// Ctrl-C ends a command waiting on a hung agent at once, not after the client's 30 s timeout:
// `tidal status` stops, and `tidal run` stops without running its command. A user who may
// not open the root-only socket is told so, not that no agent runs.
func TestCommandsStopOnSignalsAndSayWhyTheyCannotConnect(t *testing.T) {
	n := newNode(t, "")
	n.start()
	if err := n.agent.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.agent.Process.Signal(syscall.SIGCONT) }()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, c := range []struct {
		args []string
		exit int
	}{
		{[]string{"status", "--socket", n.socket}, 1},
		// 130: 128 + SIGINT, as a shell reports a command Ctrl-C ended.
		{[]string{"run", "--socket", n.socket, "--tier", "shared", "--name", "late", "--", "touch", marker}, 130},
	} {
		cmd := exec.Command(tidalBin, c.args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // past its signal handling's start: it waits on the agent
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.exit {
				t.Errorf("tidal %s after SIGINT against a hung agent: %v, want exit %d", c.args[0], err, c.exit)
			}
			t.Logf("tidal %s ended %v after SIGINT: %v", c.args[0], time.Since(start).Round(time.Millisecond), err)
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("tidal %s still waits on a hung agent 5 s after SIGINT", c.args[0])
		}
	}
	// The agent, running again, answers the request it had queued: the interrupted command
	// must not run, nor stay registered.
	_ = n.agent.Process.Signal(syscall.SIGCONT)
	n.eventually(10*time.Second, "the agent answers again, with no workload late", func() error {
		if _, ok := n.workload("late"); ok {
			return errors.New("late is registered")
		}
		return nil
	})
	time.Sleep(time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Error("tidal run ran its command though it was interrupted before the agent admitted it")
	}
	if _, ok := n.workload("late"); ok {
		t.Error("the interrupted workload stayed registered")
	}

	// The binary, linked where nobody may run it (the suite builds it in a root-only folder).
	open, err := os.MkdirTemp("", "tidal-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(open)
	bin := filepath.Join(open, "tidal")
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(tidalBin, bin); err != nil {
		t.Skipf("cannot link the binary where nobody may run it: %v", err)
	}
	nobody := exec.Command(bin, "status", "--socket", n.socket)
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	got, err := nobody.CombinedOutput()
	if err == nil || !strings.Contains(string(got), "permission denied (its socket is root's: run as root)") {
		t.Errorf("tidal status as nobody: %v, output %q; want told the socket is root's", err, got)
	}
}

// A command that leaves a child behind when it exits: tidal run says so, and status lists only
// the child from then on, not the exited command.
func TestAChildOutlivesItsRun(t *testing.T) {
	n := newNode(t, "")
	n.start()
	cmd, out := n.run("--tier", "shared", "--name", "forker", "--", "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $$ $!")
	err := cmd.Wait()
	var shell, child int
	if _, serr := fmt.Sscan(out.String(), &shell, &child); serr != nil || err != nil {
		t.Fatalf("tidal run: %v, output %q", err, out)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if !strings.Contains(out.String(), "still has processes") {
		t.Errorf("tidal run did not say the command left processes behind: %q", out)
	}
	w, ok := n.workload("forker")
	if !ok || !slices.Equal(w.PIDs, []int{child}) {
		t.Errorf("right after tidal run returned status lists %v (listed %v), want only the child %d (the shell %d exited)", w.PIDs, ok, child, shell)
	}
}

// The demo, the main job a newcomer runs, works end to end on this host (shortened) and
// leaves no process or cgroup behind.
func TestDemoRunsAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for about 20 s")
	}
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	out, err := exec.Command(tidalBin, "demo", "--duration", "12s", "--cgroup-root", root, "--socket", filepath.Join(t.TempDir(), "none.sock")).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"p99", "phase", "spike", "Reading:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []string{"cpu", "cpuset", "memory"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, root)); err == nil {
			t.Errorf("demo left /sys/fs/cgroup/%s/%s behind", c, root)
		}
	}
	if ps, _ := exec.Command("pgrep", "-f", tidalBin+" workload").Output(); len(ps) > 0 {
		t.Errorf("demo left workload processes: %s", ps)
	}
}
