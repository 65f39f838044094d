package reporter

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
)

// Memory is the memory dimension's state: what is lent and where reclaimed work is
// throttled, and the online demand it was sized from.
type Memory struct {
	// LentBytes is reclaimed work's hard limit, ThrottleBytes its throttle point below it
	// (v2 memory.high, v1 memory.soft_limit_in_bytes).
	LentBytes     int64 `json:"lentBytes"`
	ThrottleBytes int64 `json:"throttleBytes"`
	// OnlineBytes is online work's memory as lending counts it, of which
	// OnlinePageCacheBytes is its active page cache (left in place, not lent).
	OnlineBytes          int64 `json:"onlineBytes"`
	OnlinePageCacheBytes int64 `json:"onlinePageCacheBytes"`
	// ReclaimedBytes is reclaimed work's working set; ReclaimedWaiting says it waits at its
	// limit for lending to grow (v1 oom_kill_disable).
	ReclaimedBytes   int64 `json:"reclaimedBytes"`
	ReclaimedWaiting bool  `json:"reclaimedWaiting"`
	// NUMA is the lent memory per NUMA node, split by each node's share of the memory
	// (reclaimed work's memory is not bound to a node).
	NUMA []NUMAMemory `json:"numa,omitempty"`
}

// NUMAMemory is the lent memory on one NUMA node.
type NUMAMemory struct {
	Node      int   `json:"node"`
	LentBytes int64 `json:"lentBytes"`
}

func writeMemoryText(w io.Writer, m *Memory) {
	if m == nil {
		return
	}
	waiting := ""
	if m.ReclaimedWaiting {
		waiting = ", waiting at its limit"
	}
	fmt.Fprintf(w, "memory: lent %s, throttled above %s; online %s (hot page cache %s kept); reclaimed holds %s%s\n",
		human(m.LentBytes), human(m.ThrottleBytes), human(m.OnlineBytes), human(m.OnlinePageCacheBytes), human(m.ReclaimedBytes), waiting)
}

type memoryMetrics struct {
	bytes   *prometheus.GaugeVec
	waiting prometheus.Gauge
}

func newMemoryMetrics(r *prometheus.Registry) *memoryMetrics {
	m := &memoryMetrics{
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_memory_bytes",
			Help: "The memory dimension by kind: lent (reclaimed work's limit), throttle (its throttle point), online (online demand), online_page_cache (online active page cache kept), reclaimed (reclaimed working set).",
		}, []string{"kind"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_memory_reclaimed_waiting", Help: "1 while reclaimed work waits at its memory limit for lending to grow (cgroup v1 oom_kill_disable).",
		}),
	}
	r.MustRegister(m.bytes, m.waiting)
	return m
}

// SetMemory publishes the memory dimension's state.
func (m *Metrics) SetMemory(s Memory) {
	for kind, v := range map[string]int64{"lent": s.LentBytes, "throttle": s.ThrottleBytes, "online": s.OnlineBytes,
		"online_page_cache": s.OnlinePageCacheBytes, "reclaimed": s.ReclaimedBytes} {
		m.memory.bytes.WithLabelValues(kind).Set(float64(v))
	}
	w := 0.0
	if s.ReclaimedWaiting {
		w = 1
	}
	m.memory.waiting.Set(w)
}
