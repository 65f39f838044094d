package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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
	// LastLevelCache is the largest cache CPU 0 reports ("L3 260 MiB").
	LastLevelCache string `json:"lastLevelCache"`
	Cgroup         string `json:"cgroup"`
	Go             string `json:"go"`
	Commit         string `json:"commit"`
}

func describeMachine(b *bench) machine {
	m := machine{CPUModel: cpuModel(), CPUs: b.cpus.Size(), Go: runtime.Version(), Commit: gitCommit()}
	if mem, err := metrics.ReadMemory("/proc"); err == nil {
		m.MemoryGiB = float64(mem.TotalBytes) / (1 << 30)
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if size, level := lastLevelCache(); size > 0 {
		m.LastLevelCache = fmt.Sprintf("L%d %d MiB", level, size>>20)
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

// lastLevelCache is the size in bytes and level of the largest cache CPU 0 reports (0 when
// sysfs says nothing).
func lastLevelCache() (bytes int64, level int) {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	for _, d := range dirs {
		l, err1 := os.ReadFile(filepath.Join(d, "level"))
		s, err2 := os.ReadFile(filepath.Join(d, "size"))
		if err1 != nil || err2 != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(l)))
		size, ok := cacheBytes(strings.TrimSpace(string(s)))
		if err == nil && ok && n >= level {
			bytes, level = size, n
		}
	}
	return bytes, level
}

// cacheBytes parses a sysfs cache size ("266240K", "32M").
func cacheBytes(s string) (int64, bool) {
	unit := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		unit, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		unit, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * unit, err == nil && n > 0
}

// defaultAntagonistSize is twice the last-level cache, so that the antagonist's sweep
// misses it and loads memory bandwidth as well as the caches, and never under 64 MiB: a
// machine of this kind has reported 32 MiB of L3 one day and 260 MiB the next.
func defaultAntagonistSize() string {
	llc, _ := lastLevelCache()
	return strconv.FormatInt(max(2*llc>>20, 64), 10) + "Mi"
}
