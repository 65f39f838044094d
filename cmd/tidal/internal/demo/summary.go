package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
)

// phaseRow is one line of the summary: the load generator's whole-phase latencies and the
// means of the seconds sampled in that phase.
type phaseRow struct {
	workload.PhaseStats
	cpuPct, lentCores, offline float64
	haveCPU, haveLent, haveOff bool
}

func phaseRows(stats []workload.PhaseStats, samples []sample) []phaseRow {
	rows := make([]phaseRow, len(stats))
	for i, ps := range stats {
		var cpu, lent, off mean
		for _, s := range samples {
			if s.phase != ps.Name {
				continue
			}
			lent.add(s.lentCores)
			if s.haveCPU {
				cpu.add(s.cpuPct)
			}
			if s.haveOff {
				off.add(s.offline)
			}
		}
		rows[i] = phaseRow{PhaseStats: ps}
		rows[i].cpuPct, rows[i].haveCPU = cpu.value()
		rows[i].lentCores, rows[i].haveLent = lent.value()
		rows[i].offline, rows[i].haveOff = off.value()
	}
	return rows
}

type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v float64) { m.sum += v; m.n++ }

func (m mean) value() (float64, bool) {
	if m.n == 0 {
		return 0, false
	}
	return m.sum / float64(m.n), true
}

func writePhaseTable(w io.Writer, rows []phaseRow) {
	fmt.Fprintf(w, "%-6s %10s %8s %8s %9s %9s %10s %10s\n", "phase", "target rps", "p50 ms", "p99 ms", "p99.9 ms", "node cpu%", "lent cores", "offline/s")
	for _, r := range rows {
		fmt.Fprintf(w, "%-6s %10.0f %8.1f %8.1f %9.1f %9s %10s %10s\n", r.Name, r.TargetRPS, r.P50Ms, r.P99Ms, r.P999Ms,
			fmtIf(r.haveCPU, "%.0f", r.cpuPct), fmtIf(r.haveLent, "%.2f", r.lentCores), fmtIf(r.haveOff, "%.0f", r.offline))
	}
	for _, r := range rows {
		if r.Errors > 0 {
			fmt.Fprintf(w, "%s: %d of %d requests failed\n", r.Name, r.Errors, r.Count)
		}
	}
}

func fmtIf(ok bool, format string, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// countActions summarizes actions by kind: "admit 3, grow 5, throttle 1".
func countActions(acts []reporter.Action) string {
	n := map[string]int{}
	for _, a := range acts {
		n[a.Kind]++
	}
	kinds := make([]string, 0, len(n))
	for k := range n {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (s *session) printSummary(sched []demoPhase, final workload.LoadGenLine, burner workload.BurnerLine, m *monitor) {
	rows := phaseRows(final.Phases, m.samples)
	fmt.Fprintln(s.out)
	writePhaseTable(s.out, rows)
	fmt.Fprintf(s.out, "\nonline: %d requests, %d errors; offline: %d units done\n", final.Count, final.Errors, burner.Total)
	fmt.Fprintf(s.out, "agent actions during the demo: %s\n\n", countActions(m.actions.seen))
	in := readingFromRun(sched, rows, m.samples, m.actions.seen, m.start, s.limitWindow)
	fmt.Fprintln(s.out, wrap(in.text(), textWidth))
}
