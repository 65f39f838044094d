// Package metrics reads node-level resource usage from procfs: per-CPU
// times, memory and pressure stall information (PSI). Every reader takes the
// proc root ("/proc" in production) so tests can point it at a fake tree.
//
// The readers are stateless: rates (CPU utilisation) are the caller's job,
// from two readings and the time between them.
package metrics

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// CPUTime is one CPU's time since boot, in seconds.
type CPUTime struct {
	Busy  float64 // Total minus idle and iowait; steal included
	Total float64
	// Steal is time a virtual CPU had work but its hypervisor ran something else. It counts
	// as busy: for lending, CPU the host takes is CPU that is not there to lend.
	Steal float64
}

// ReadCPUTimes reads per-CPU times from procRoot/stat, keyed by CPU ID.
func ReadCPUTimes(procRoot string) (map[int]CPUTime, error) {
	path := filepath.Join(procRoot, "stat")
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", path, err)
	}
	stat, err := fs.Stat()
	if err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", path, err)
	}
	if len(stat.CPU) == 0 {
		return nil, fmt.Errorf("metrics: %s: no per-CPU lines", path)
	}
	times := make(map[int]CPUTime, len(stat.CPU))
	for id, s := range stat.CPU {
		// guest and guest_nice are already counted in user and nice, so
		// adding them would count virtual machine time twice.
		total := s.User + s.Nice + s.System + s.Idle + s.Iowait + s.IRQ + s.SoftIRQ + s.Steal
		times[int(id)] = CPUTime{Busy: total - s.Idle - s.Iowait, Total: total, Steal: s.Steal}
	}
	return times, nil
}

// Memory is the node's memory, in bytes.
type Memory struct {
	TotalBytes     int64
	AvailableBytes int64 // the kernel's estimate of what can be allocated without swapping
	FreeBytes      int64
	// ActiveFileBytes is Active(file): page cache used more than once recently, which the
	// kernel counts as available but reclaims only after inactive pages.
	ActiveFileBytes int64
}

// ReadMemory reads procRoot/meminfo.
func ReadMemory(procRoot string) (Memory, error) {
	path := filepath.Join(procRoot, "meminfo")
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return Memory{}, fmt.Errorf("metrics: %s: %w", path, err)
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return Memory{}, fmt.Errorf("metrics: %s: %w", path, err)
	}
	if mi.MemTotalBytes == nil || mi.MemFreeBytes == nil {
		return Memory{}, fmt.Errorf("metrics: %s: missing MemTotal or MemFree", path)
	}
	m := Memory{
		TotalBytes: int64(*mi.MemTotalBytes),
		FreeBytes:  int64(*mi.MemFreeBytes),
	}
	// Kernels before 3.14 have no MemAvailable; MemFree is the conservative
	// stand-in (it ignores reclaimable page cache, so we lend less, not more).
	m.AvailableBytes = m.FreeBytes
	if mi.MemAvailableBytes != nil {
		m.AvailableBytes = int64(*mi.MemAvailableBytes)
	}
	if mi.ActiveFileBytes != nil {
		m.ActiveFileBytes = int64(*mi.ActiveFileBytes)
	}
	return m, nil
}

// Pressure is one resource's PSI reading. "Some" is the share of time at
// least one task was stalled on the resource, "full" the share all non-idle
// tasks were stalled at once.
type Pressure struct {
	SomeAvg10 float64 // percent, over the last 10 s
	SomeAvg60 float64 // percent, over the last 60 s
	SomeTotal time.Duration
	FullAvg10 float64 // percent
	FullTotal time.Duration
}

// ReadPressure reads procRoot/pressure/<resource> ("cpu", "memory" or
// "io"). A missing "full" line (system-wide cpu before kernel 5.13) reads as
// zero.
func ReadPressure(procRoot, resource string) (Pressure, error) {
	// Checked before joining: filepath.Join would quietly resolve "../stat".
	if resource == "" || resource == "." || resource == ".." || strings.ContainsRune(resource, '/') {
		return Pressure{}, fmt.Errorf("metrics: invalid PSI resource %q under %s", resource, procRoot)
	}
	path := filepath.Join(procRoot, "pressure", resource)
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return Pressure{}, fmt.Errorf("metrics: %s: %w", path, err)
	}
	psi, err := fs.PSIStatsForResource(resource)
	if err != nil {
		return Pressure{}, fmt.Errorf("metrics: %s: %w", path, err)
	}
	if psi.Some == nil && psi.Full == nil {
		return Pressure{}, fmt.Errorf("metrics: %s: no \"some\" or \"full\" line", path)
	}
	var p Pressure
	if psi.Some != nil {
		p.SomeAvg10 = psi.Some.Avg10
		p.SomeAvg60 = psi.Some.Avg60
		p.SomeTotal = time.Duration(psi.Some.Total) * time.Microsecond
	}
	if psi.Full != nil {
		p.FullAvg10 = psi.Full.Avg10
		p.FullTotal = time.Duration(psi.Full.Total) * time.Microsecond
	}
	return p, nil
}
