package vm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/tests/vm"
)

// One boot: the script runs as PID 1's child on a unified hierarchy, its output reaches the
// console, the files it writes come back and its exit status is returned.
func TestBootReturnsOutputFilesAndStatus(t *testing.T) {
	tools := vm.Need(t)
	res := vm.Boot(t, tools, vm.Spec{
		Files: map[string]string{"in/data": "vm.go"},
		Script: `echo "parent=$PPID"
stat -f -c %T /sys/fs/cgroup
cat /sys/fs/cgroup/cgroup.subtree_control
wc -c < in/data > out-size
echo written > result
exit 7
`,
	})
	if res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7\n%s", res.ExitCode, res.Console)
	}
	for _, want := range []string{"parent=1", "cgroup2", "cpuset cpu io memory"} {
		if !strings.Contains(res.Console, want) {
			t.Errorf("console lacks %q:\n%s", want, res.Console)
		}
	}
	if got, err := res.ReadFile("result"); err != nil || got != "written\n" {
		t.Errorf("result file: %q, %v", got, err)
	}
	if got, err := res.ReadFile("out-size"); err != nil || strings.TrimSpace(got) == "0" {
		t.Errorf("the copied input file was not seen: size %q, %v", got, err)
	}
	t.Logf("VM (%s) ran in %v", tools.KernelPackage, res.Elapsed)
}

// A VM that dies before the script ends (here a kernel panic) is an error carrying the
// console log, not an exit status.
func TestVMFailureCarriesConsole(t *testing.T) {
	tools := vm.Need(t)
	res, err := vm.Run(context.Background(), tools, t.TempDir(), vm.Spec{
		Script: "echo about to panic\necho c > /proc/sysrq-trigger\nsleep 30\n",
	})
	var vmErr *vm.VMError
	if !errors.As(err, &vmErr) {
		t.Fatalf("a panicking VM returned %v (exit code %d), want a VMError", err, res.ExitCode)
	}
	if !strings.Contains(vmErr.Console, "about to panic") || !strings.Contains(err.Error(), "Kernel panic") {
		t.Errorf("the error lacks the console log:\n%v", err)
	}
	if vmErr.Hung {
		t.Errorf("a panic reported as a hang (%s): Boot would boot it again", vmErr.Reason)
	}
}

// A guest that goes silent is stopped after Spec.Stall, not Timeout, as a hung VMError; a
// panic is not "hung" (the test above), so a caller retries only a hang.
func TestSilentVMStoppedAsHung(t *testing.T) {
	tools := vm.Need(t)
	start := time.Now()
	res, err := vm.Run(context.Background(), tools, t.TempDir(), vm.Spec{
		Script:  "echo going quiet\nsleep 600\n",
		Timeout: 5 * time.Minute,
		Stall:   20 * time.Second,
	})
	var vmErr *vm.VMError
	if !errors.As(err, &vmErr) {
		t.Fatalf("a silent VM returned %v (exit code %d), want a VMError", err, res.ExitCode)
	}
	if !vmErr.Hung || !strings.Contains(vmErr.Reason, "no console output for 20s") {
		t.Errorf("hung %v, reason %q: want hung for no console output", vmErr.Hung, vmErr.Reason)
	}
	if !strings.Contains(vmErr.Console, "going quiet") {
		t.Errorf("the error lacks the console log:\n%v", err)
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Errorf("stopped after %v: the stall watchdog did not act before the timeout", took)
	}
}

// A step that goes quiet leaves the guest kernel's view of it on the console (QuietDump):
// the blocked tasks and every CPU's stack, once per silence, and nothing while it writes.
func TestQuietDumpShowsTheGuestKernelsView(t *testing.T) {
	tools := vm.Need(t)
	script := "echo writing >/tmp/step.out\n" + vm.QuietDump("/tmp/step.out", 6*time.Second) +
		"for i in 1 2 3 4 5 6; do sleep 2; echo $i >>/tmp/step.out; done\n" + // writing: no dump
		"sleep 20\n" + // quiet for longer than 6 s: one dump
		"kill $quiet_dump\necho step over\n"
	res, err := vm.Run(context.Background(), tools, t.TempDir(), vm.Spec{Script: script, Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatalf("VM: %v", err)
	}
	if res.ExitCode != 0 || !strings.Contains(res.Console, "step over") {
		t.Fatalf("exit code %d; console:\n%s", res.ExitCode, res.Console)
	}
	if n := strings.Count(res.Console, "vm: no output in /tmp/step.out"); n != 1 {
		t.Errorf("%d dumps, want one for the one silence; console:\n%s", n, res.Console)
	}
	for _, want := range []string{"Show Blocked State", "Show backtrace of all active CPUs", "Call Trace"} {
		if !strings.Contains(res.Console, want) {
			t.Errorf("the console lacks %q; console:\n%s", want, res.Console)
		}
	}
}
