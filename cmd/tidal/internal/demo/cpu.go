package demo

import "github.com/tidalqos/tidal/sysadvisor/metrics"

// cpuMeter turns /proc/stat readings into node CPU utilization between calls.
type cpuMeter struct {
	busy, total float64
	ok          bool
}

func newCPUMeter() *cpuMeter {
	m := &cpuMeter{}
	m.next()
	return m
}

// next returns the utilization (percent of all CPUs) since the previous call.
func (m *cpuMeter) next() (float64, bool) {
	times, err := metrics.ReadCPUTimes("/proc")
	if err != nil {
		m.ok = false
		return 0, false
	}
	var busy, total float64
	for _, t := range times {
		busy += t.Busy
		total += t.Total
	}
	prevOK, db, dt := m.ok, busy-m.busy, total-m.total
	m.busy, m.total, m.ok = busy, total, true
	if !prevOK || dt <= 0 {
		return 0, false
	}
	return 100 * db / dt, true
}
