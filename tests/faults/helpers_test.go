// Package faults injects faults into real parts: the real tidal binary as agent and arbiter,
// real cgroups (a uniquely named root per test, removed at the end, also on failure), real
// processes, real file systems (tmpfs). Each case asserts what stays true, and that the agent
// never crashes and ends in the documented safe state (docs/reliability.md).
//
// With TIDAL_RELIABILITY_OUT set to a folder, each case appends its measured result to
// faults.jsonl there, and the soak its samples to soak.json (scripts/reliability.sh makes
// docs/reliability.md of them).
package faults

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// procs are the pids in a cgroup's cgroup.procs of one controller.
func procs(a *testutil.Agent, controller, cgroup string) []int {
	data, err := os.ReadFile(filepath.Join(a.Layout.Dir(controller, cgroup), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// lowestPriority: a reclaimed cgroup runs at the kernel's lowest CPU priority: cpu.idle 1
// where the kernel has it, else cpu.shares 2.
func lowestPriority(a *testutil.Agent, cgroup string) (string, bool) {
	if v, err := a.File("cpu", cgroup, "cpu.idle"); err == nil {
		return "cpu.idle=" + v, v == "1"
	}
	v, _ := a.File("cpu", cgroup, "cpu.shares")
	return "cpu.shares=" + v, v == "2"
}
