package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
)

// sample is one second of the demo.
type sample struct {
	elapsed    time.Duration // since the load generator started
	phase      string        // scheduled at the middle of the second
	rps, p99   float64       // online, from the latest load generator line
	haveOnline bool
	cpuPct     float64 // node CPU utilization over the second
	haveCPU    bool
	lentCores  float64 // reclaimed CPU lent now
	offline    float64 // burner units/s, from its latest line
	haveOff    bool
	action     string // latest agent action, "kind reason"
}

type monitor struct {
	out     io.Writer
	client  *agent.Client
	sched   []demoPhase
	start   time.Time
	cpu     *cpuMeter
	actions *actionLog
	lg      *lineFeed[workload.LoadGenLine]
	burn    *lineFeed[workload.BurnerLine]
	lgChild *child
	web     *child
	burner  *child
	samples []sample
}

// run prints a line per second until the load generator's final line arrives.
func (m *monitor) run(ctx context.Context) (workload.LoadGenLine, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(scheduleLength(m.sched) + scheduleSlack)
	defer deadline.Stop()
	fmt.Fprintln(m.out, sampleHeader())
	for {
		select {
		case <-ctx.Done():
			return workload.LoadGenLine{}, ErrInterrupted
		case <-m.lg.done:
			final, _, _ := m.lg.Final()
			return final, nil
		case <-m.lgChild.exited:
			if final, ok, _ := m.lg.Final(); ok {
				return final, nil
			}
			_, _, rerr := m.lg.Final()
			return workload.LoadGenLine{}, fmt.Errorf("demo-loadgen ended without its final report (%v): %s", rerr, m.lgChild.describe())
		case <-m.web.exited:
			return workload.LoadGenLine{}, fmt.Errorf("%s ended during the demo: %s", m.web.name, m.web.describe())
		case <-m.burner.exited:
			return workload.LoadGenLine{}, fmt.Errorf("%s ended during the demo: %s", m.burner.name, m.burner.describe())
		case <-deadline.C:
			return workload.LoadGenLine{}, fmt.Errorf("demo-loadgen still running %s after its schedule should have ended", scheduleSlack)
		case now := <-tick.C:
			sm, err := m.sample(now)
			if err != nil {
				return workload.LoadGenLine{}, err
			}
			m.samples = append(m.samples, sm)
			fmt.Fprintln(m.out, formatSample(sm))
		}
	}
}

func (m *monitor) sample(now time.Time) (sample, error) {
	el := now.Sub(m.start)
	sm := sample{elapsed: el, phase: phaseAt(m.sched, el-time.Second/2)}
	if l, ok := m.lg.Latest(); ok {
		sm.rps, sm.p99, sm.haveOnline = l.RPS, l.P99Ms, true
	}
	if l, ok := m.burn.Latest(); ok {
		sm.offline, sm.haveOff = l.UnitsPerS, true
	}
	sm.cpuPct, sm.haveCPU = m.cpu.next()
	st, err := m.client.Status()
	if err != nil {
		return sm, fmt.Errorf("asking the agent for its status: %w", err)
	}
	sm.lentCores = lentCores(st)
	if a, ok := mostTelling(m.actions.add(st.Actions)); ok {
		sm.action = a.Kind + " " + a.Reason
	}
	return sm, nil
}

// lentCores is the CPU lent to reclaimed work now, summed over NUMA nodes.
func lentCores(st reporter.Status) float64 {
	var milli int64
	for _, p := range st.Pools {
		milli += p.LentMilliCPU
	}
	return float64(milli) / 1000
}

func sampleHeader() string {
	return fmt.Sprintf("%3s %-5s %4s %6s %4s %5s %9s  %s", "t", "phase", "rps", "p99ms", "cpu%", "lent", "offline/s", "last agent action")
}

func formatSample(s sample) string {
	rps, p99, cpu, off := "-", "-", "-", "-"
	if s.haveOnline {
		rps, p99 = fmt.Sprintf("%.0f", s.rps), fmt.Sprintf("%.1f", s.p99)
	}
	if s.haveCPU {
		cpu = fmt.Sprintf("%.0f", s.cpuPct)
	}
	if s.haveOff {
		off = fmt.Sprintf("%.0f", s.offline)
	}
	phase := s.phase
	if phase == "" {
		phase = "-"
	}
	return fmt.Sprintf("%3.0f %-5s %4s %6s %4s %5.2f %9s  %s", s.elapsed.Seconds(), phase, rps, p99, cpu, s.lentCores, off,
		truncate(orDash(s.action), actionWidth))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 3 {
		return string(r[:n])
	}
	return string(r[:n-3]) + "..."
}
