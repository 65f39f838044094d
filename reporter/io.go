package reporter

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
)

// IO is the disk IO dimension's state: what each disk lends reclaimed work and why.
type IO struct {
	// Pressure is the IO pressure signal (PSI avg10, percent) and PressureSource where it
	// is read ("online tiers' io.pressure some" on v2; none on v1).
	Pressure       float64  `json:"pressure"`
	PressureSource string   `json:"pressureSource"`
	Disks          []IODisk `json:"disks"`
	Weight         string   `json:"weight,omitempty"`
}

// IODisk is one disk: lent rates (bytes and IOs per second; reads, writes), online work's peak
// use, reclaimed work's latest use, the disk's latest mean time per IO, and the rule.
type IODisk struct {
	Device    string  `json:"device"`
	Name      string  `json:"name"`
	Scheduler string  `json:"scheduler"`
	Lent      IORates `json:"lent"`
	Capacity  IORates `json:"capacity"`
	Online    IORates `json:"online"`
	Reclaimed IORates `json:"reclaimed"`
	LatencyMs float64 `json:"latencyMs"`
	Rule      string  `json:"rule"`
}

// IORates are per-second rates of one disk; 0 as a capacity is unknown.
type IORates struct {
	ReadBps   uint64 `json:"readBps"`
	WriteBps  uint64 `json:"writeBps"`
	ReadIOPS  uint64 `json:"readIOPS"`
	WriteIOPS uint64 `json:"writeIOPS"`
}

func (r IORates) String() string {
	return fmt.Sprintf("read %s/s %d IO/s, write %s/s %d IO/s", human(int64(r.ReadBps)), r.ReadIOPS, human(int64(r.WriteBps)), r.WriteIOPS)
}

func writeIOText(w io.Writer, s *IO) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "io: pressure %.1f%% (%s)", s.Pressure, s.PressureSource)
	if s.Weight != "" {
		fmt.Fprintf(w, "; weight %s", s.Weight)
	}
	fmt.Fprintln(w)
	for _, d := range s.Disks {
		fmt.Fprintf(w, "  disk %s (%s, %s): lent %s (rule %s); online peak %s; reclaimed %s; %.1fms per IO\n",
			d.Name, d.Device, dash(d.Scheduler), d.Lent, d.Rule, d.Online, d.Reclaimed, d.LatencyMs)
	}
}

type ioMetrics struct {
	lent, reclaimed, online *prometheus.GaugeVec
	pressure                prometheus.Gauge
}

func newIOMetrics(r *prometheus.Registry) *ioMetrics {
	labels := []string{"device", "direction"}
	m := &ioMetrics{
		lent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_lent_io_per_second", Help: "Disk IO lent to reclaimed work (its throttle), by disk and direction (read_bytes, write_bytes, read_ios, write_ios).",
		}, labels),
		reclaimed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_reclaimed_io_per_second", Help: "Disk IO reclaimed work did over the latest IO interval, by disk and direction (cgroup v1: direct and sync IO only).",
		}, labels),
		online: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_online_io_per_second", Help: "Online work's peak disk IO over io.peakWindow (disk IO less reclaimed work's), by disk and direction.",
		}, labels),
		pressure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_io_pressure_percent", Help: "The IO pressure signal lending is cut on (PSI avg10, percent).",
		}),
	}
	r.MustRegister(m.lent, m.reclaimed, m.online, m.pressure)
	return m
}

// SetIO publishes the IO dimension's state.
func (m *Metrics) SetIO(s IO) {
	m.io.pressure.Set(s.Pressure)
	for _, d := range s.Disks {
		for _, g := range []struct {
			v *prometheus.GaugeVec
			r IORates
		}{{m.io.lent, d.Lent}, {m.io.reclaimed, d.Reclaimed}, {m.io.online, d.Online}} {
			g.v.WithLabelValues(d.Name, "read_bytes").Set(float64(g.r.ReadBps))
			g.v.WithLabelValues(d.Name, "write_bytes").Set(float64(g.r.WriteBps))
			g.v.WithLabelValues(d.Name, "read_ios").Set(float64(g.r.ReadIOPS))
			g.v.WithLabelValues(d.Name, "write_ios").Set(float64(g.r.WriteIOPS))
		}
	}
}
