package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// machine describes where the benchmark ran.
type machine struct {
	CPUModel  string  `json:"cpuModel"`
	CPUs      int     `json:"cpus"`
	MemoryGiB float64 `json:"memoryGiB"`
	Kernel    string  `json:"kernel"`
	Cgroup    string  `json:"cgroup"`
	Go        string  `json:"go"`
	Commit    string  `json:"commit"`
}

func describeMachine(b *bench) machine {
	m := machine{CPUModel: cpuModel(), CPUs: b.cpus.Size(), Go: runtime.Version(), Commit: gitCommit()}
	if mem, err := metrics.ReadMemory("/proc"); err == nil {
		m.MemoryGiB = float64(mem.TotalBytes) / (1 << 30)
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	m.Cgroup = b.layout.Version.String()
	if b.layout.Version == cgroupfs.V1 {
		if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
			m.Cgroup += " (hybrid: a cgroup2 tree is also mounted)"
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// gitCommit names the source the benchmark ran from ("unknown" outside a git checkout).
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
