package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A shared workload with a CPU cap gets its tier's CPU burst in the kernel's file, its own
// --cpu-burst-percent wins over the tier's, reclaimed work gets none, and a malformed or
// reclaimed burst request is refused with the key named.
func TestCPUBurstFiles(t *testing.T) {
	n := newNode(t, "cpu:\n  burstPercent:\n    shared: 40\n")
	n.start()
	n.run("--tier", "shared", "--cpus", "1", "--name", "web", "--", "sleep", "600")
	n.run("--tier", "shared", "--cpus", "1", "--cpu-burst-percent", "100", "--name", "api", "--", "sleep", "600")
	n.run("--tier", "reclaimed", "--cpus", "1", "--name", "batch", "--", "sleep", "600")
	web, api, batch := n.waitWorkload("web"), n.waitWorkload("api"), n.waitWorkload("batch")
	n.eventually(10*time.Second, "burst files", func() error {
		for _, c := range []struct{ cgroup, want string }{
			{web.Cgroup, "40000"},  // 40% of a 100000 µs quota
			{api.Cgroup, "100000"}, // its own 100%
			{batch.Cgroup, "0"},
			{n.root + "-reclaimed", "0"},
		} {
			if got := n.file("cpu", c.cgroup, "cpu.cfs_burst_us"); got != c.want {
				return fmt.Errorf("%s cpu.cfs_burst_us = %s, want %s", c.cgroup, got, c.want)
			}
		}
		if w, _ := n.workload("web"); w.CPUBurstMilliCPU != 400 {
			return fmt.Errorf("status says web bursts %dm, want 400m", w.CPUBurstMilliCPU)
		}
		return nil
	})
	for _, args := range [][]string{
		{"--tier", "shared", "--cpus", "1", "--cpu-burst-percent", "150", "--name", "bad"},
		{"--tier", "reclaimed", "--cpu-burst-percent", "50", "--name", "bad2"},
	} {
		cmd, out := n.run(append(args, "--", "true")...)
		if err := cmd.Wait(); err == nil {
			t.Errorf("tidal run %v was admitted", args)
		} else if s := out.String(); !strings.Contains(s, "--cpu-burst-percent") {
			t.Errorf("tidal run %v: the refusal does not name the flag:\n%s", args, s)
		}
	}
}
