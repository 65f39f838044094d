// Package eviction decides when memory is short enough to stop reclaimed work and in which
// order: lowest reclaim priority first, then the largest memory user (it frees the most), then
// the most recently started (it lost the least work). Online work is never a candidate.
package eviction

import (
	"fmt"
	"sort"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Thresholds say when the node is short of memory.
type Thresholds struct {
	AvailableBelowBytes int64   // MemAvailable under this
	PressureAbove       float64 // memory PSI "some avg10" (percent) over this
}

// MemoryShort reports whether the node is short of memory and why.
func MemoryShort(availableBytes int64, pressureAvg10 float64, th Thresholds) (string, bool) {
	if availableBytes < th.AvailableBelowBytes {
		return fmt.Sprintf("memory available %dMiB < %dMiB watermark", availableBytes>>20, th.AvailableBelowBytes>>20), true
	}
	if pressureAvg10 > th.PressureAbove {
		return fmt.Sprintf("memory pressure %.1f%% > %.1f%%", pressureAvg10, th.PressureAbove), true
	}
	return "", false
}

// Rank returns the reclaimed workloads in the order they should be evicted.
func Rank(workloads []plugins.Workload) []plugins.Workload {
	var out []plugins.Workload
	for _, w := range workloads {
		if w.Tier == qos.Reclaimed {
			out = append(out, w)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ReclaimPriority != b.ReclaimPriority {
			return a.ReclaimPriority < b.ReclaimPriority
		}
		if a.MemoryUsage != b.MemoryUsage {
			return a.MemoryUsage > b.MemoryUsage
		}
		if !a.Started.Equal(b.Started) {
			return a.Started.After(b.Started)
		}
		return a.Name < b.Name
	})
	return out
}
