package cgroupv2

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/tests/testutil"
	"github.com/tidalqos/tidal/tests/vm"
)

// TestInVM builds this package's tests and tidal statically, boots the v2 kernel and runs the
// TestV2 tests there (TIDAL_V2_RUN narrows them, as -run would). Each inner test is reported
// as a subtest with its output; a VM that fails fails this test with its console log.
func TestInVM(t *testing.T) {
	if inVM() {
		t.Skip("already inside the VM")
	}
	if testing.Short() {
		t.Skip("boots a VM for minutes")
	}
	tools := vm.Need(t)
	dir := t.TempDir()
	start := time.Now()
	suite, tidal := filepath.Join(dir, "cgroupv2.test"), filepath.Join(dir, "tidal")
	if err := vm.BuildStatic("github.com/tidalqos/tidal/tests/cgroupv2", suite, true); err != nil {
		t.Fatal(err)
	}
	if err := vm.BuildStatic("github.com/tidalqos/tidal/cmd/tidal", tidal, false); err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	run := os.Getenv("TIDAL_V2_RUN")
	if run == "" {
		run = "^TestV2"
	}
	// The binaries run from the VM's tmpfs, not the 9p share: faster to load, and their pages
	// are not reclaimable (no swap), so a cgroup at its memory limit goes to the OOM killer
	// at once instead of thrashing on the text of a binary re-read over 9p.
	// The suite's output goes to the VM's tmpfs and into the share once it ends: nothing is
	// written over 9p while the tests run.
	// Fault cases in the VM record what they measured in the share; it is appended to the
	// host's $TIDAL_RELIABILITY_OUT (docs/reliability.md).
	relOut := os.Getenv(testutil.ReliabilityOutEnv)
	record := ""
	if relOut != "" {
		record = fmt.Sprintf("mkdir -p /mnt/rel && export %s=/mnt/rel", testutil.ReliabilityOutEnv)
	}
	script := fmt.Sprintf(`set -o pipefail
cp /mnt/cgroupv2.test /mnt/tidal /tmp/ || exit 1
export %s=1 TIDAL_BIN=/tmp/tidal TMPDIR=/tmp HOME=/tmp
%s
%s/tmp/cgroupv2.test -test.v -test.count=1 -test.timeout=20m -test.run '%s' 2>&1 | tee /tmp/suite.out
status=$?
kill $quiet_dump
cp /tmp/suite.out /mnt/suite.out
exit $status
`, inVMEnv, record, vm.QuietDump("/tmp/suite.out", 4*time.Minute), run)
	res := vm.Boot(t, tools, vm.Spec{
		Files:     map[string]string{"cgroupv2.test": suite, "tidal": tidal},
		Script:    script,
		MemoryMiB: 2048,
		CPUs:      2,
		DiskMiB:   64,
		Timeout:   25 * time.Minute,
		// Every test prints at least its result within a few minutes; the guest's own
		// -test.timeout prints a panic. Silence for longer is a hung guest: after 4 minutes
		// of it the guest dumps its kernel's view (QuietDump), 8 more stop it.
		Stall:     8 * time.Minute,
		RetryHung: true,
	})
	t.Logf("kernel %s; built in %v, VM ran %v", tools.KernelPackage, built.Round(time.Second), res.Elapsed.Round(time.Second))
	out, err := res.ReadFile("suite.out")
	if err != nil {
		t.Fatalf("no suite output (%v); console:\n%s", err, res.Console)
	}
	if relOut != "" {
		if lines, err := res.ReadFile("rel/faults.jsonl"); err == nil {
			if err := appendFile(filepath.Join(relOut, "faults.jsonl"), lines); err != nil {
				t.Error(err)
			}
		}
	}
	results := parseTestOutput(out)
	if len(results) == 0 {
		t.Fatalf("no test ran in the VM (exit %d):\n%s", res.ExitCode, out)
	}
	failed := false
	for _, r := range results {
		t.Run(r.name, func(t *testing.T) {
			switch r.status {
			case "PASS":
				t.Log("\n" + r.output)
			case "SKIP":
				t.Skip("\n" + r.output)
			default:
				failed = true
				t.Error("\n" + r.output)
			}
		})
	}
	if res.ExitCode != 0 && !failed {
		t.Errorf("the suite exited %d in the VM with no failed test:\n%s", res.ExitCode, tailLines(out, 60))
	}
}

func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	return errors.Join(err, f.Close())
}

type testResult struct{ name, status, output string }

var resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) `)

// parseTestOutput splits go test -v output into the top-level tests, each with its lines.
func parseTestOutput(out string) []testResult {
	var res []testResult
	var cur []string
	for _, line := range strings.Split(out, "\n") {
		if m := resultLine.FindStringSubmatch(line); m != nil {
			res = append(res, testResult{name: m[2], status: m[1], output: strings.Join(append(cur, line), "\n")})
			cur = nil
			continue
		}
		if strings.HasPrefix(line, "=== RUN   ") && !strings.Contains(line, "/") {
			cur = nil
		}
		cur = append(cur, line)
	}
	// A test that never finished (panic, timeout) has no result line.
	if len(cur) > 0 && strings.Contains(strings.Join(cur, "\n"), "panic:") {
		res = append(res, testResult{name: "unfinished", status: "FAIL", output: strings.Join(cur, "\n")})
	}
	return res
}

func tailLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
