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
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// outcome is one fault case's line in faults.jsonl.
type outcome struct {
	Test     string   `json:"test"`
	Fault    string   `json:"fault"`
	Measured []string `json:"measured"`
	Passed   bool     `json:"passed"`
	Seconds  float64  `json:"seconds"`
}

var outMu sync.Mutex

// record keeps what a case measured; it is written when the case ends, with its result.
func record(t *testing.T, fault string) *outcome {
	o := &outcome{Test: t.Name(), Fault: fault}
	start := time.Now()
	t.Cleanup(func() {
		o.Passed, o.Seconds = !t.Failed(), time.Since(start).Round(100*time.Millisecond).Seconds()
		dir := os.Getenv("TIDAL_RELIABILITY_OUT")
		if dir == "" {
			return
		}
		outMu.Lock()
		defer outMu.Unlock()
		f, err := os.OpenFile(filepath.Join(dir, "faults.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("record: %v", err)
			return
		}
		defer f.Close()
		_ = json.NewEncoder(f).Encode(o)
	})
	return o
}

func (o *outcome) add(t *testing.T, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	o.Measured = append(o.Measured, msg)
}

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
