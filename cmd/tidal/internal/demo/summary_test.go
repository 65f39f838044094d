package demo

import (
	"bytes"
	"math"
	"testing"

	"github.com/tidalqos/tidal/internal/workload"
)

func TestPhaseRowsAndTable(t *testing.T) {
	stats := []workload.PhaseStats{
		{Name: "low", TargetRPS: 150, Count: 100, P50Ms: 2, P99Ms: 8, P999Ms: 12},
		{Name: "spike", TargetRPS: 600, Count: 400, Errors: 3, P50Ms: 3, P99Ms: 40, P999Ms: 90},
		{Name: "low2", TargetRPS: 150},
	}
	samples := []sample{
		{phase: "low", cpuPct: 40, haveCPU: true, lentCores: 1.2, offline: 100, haveOff: true},
		{phase: "low", cpuPct: 60, haveCPU: true, lentCores: 1.4, offline: 300, haveOff: true},
		{phase: "spike", cpuPct: 90, haveCPU: true, lentCores: 0.1},
		{phase: "", cpuPct: 10, haveCPU: true, lentCores: 5},
	}
	rows := phaseRows(stats, samples)
	if r := rows[0]; r.cpuPct != 50 || math.Abs(r.lentCores-1.3) > 1e-9 || r.offline != 200 || !r.haveOff {
		t.Errorf("low row %+v", r)
	}
	if r := rows[1]; r.cpuPct != 90 || r.lentCores != 0.1 || r.haveOff {
		t.Errorf("spike row %+v", r)
	}
	if r := rows[2]; r.haveCPU || r.haveLent || r.haveOff {
		t.Errorf("low2 row %+v", r)
	}
	var b bytes.Buffer
	writePhaseTable(&b, rows)
	want := `phase  target rps   p50 ms   p99 ms  p99.9 ms node cpu% lent cores  offline/s
low           150      2.0      8.0      12.0        50       1.30        200
spike         600      3.0     40.0      90.0        90       0.10          -
low2          150      0.0      0.0       0.0         -          -          -
spike: 3 of 400 requests failed
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
