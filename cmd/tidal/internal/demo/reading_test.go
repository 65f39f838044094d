package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
)

func TestReading(t *testing.T) {
	sched := demoSchedule(30*time.Second, 150, 600)
	start := time.Now()
	rows := phaseRows([]workload.PhaseStats{{Name: "low", P99Ms: 8}, {Name: "spike", P99Ms: 30}, {Name: "low2", P99Ms: 9}}, []sample{
		{phase: "low", lentCores: 1.0, offline: 900, haveOff: true},
		{phase: "low", lentCores: 1.3, offline: 1000, haveOff: true},
		{phase: "spike", lentCores: 0.6, offline: 500, haveOff: true},
		{phase: "spike", lentCores: 0.3, offline: 400, haveOff: true},
		{phase: "low2", lentCores: 0.8},
		{phase: "low2", lentCores: 1.1},
	})
	acts := []reporter.Action{
		{Time: start.Add(5 * time.Second), Kind: "throttle", Reason: "warm-up"},
		{Time: start.Add(10500*time.Millisecond + 180*time.Millisecond), Kind: "throttle", Reason: "numa 0: online spike 900m > 80% of the 700m it kept: reclaimed CPU 1300m -> 300m"},
		{Time: start.Add(12 * time.Second), Kind: "throttle", Reason: "again"},
		{Time: start.Add(13 * time.Second), Kind: "shrink", Reason: "reclaimed memory"},
	}
	r := readingFromRun(sched, rows, []sample{
		{phase: "low", lentCores: 1.3}, {phase: "spike", lentCores: 0.6}, {phase: "spike", lentCores: 0.3}, {phase: "low2", lentCores: 1.1},
	}, acts, start, 5*time.Second)
	if r.throttles != 2 || r.throttleAfter != 180*time.Millisecond || r.shrinks != 0 {
		t.Errorf("reading %+v", r)
	}
	if r.lentBefore != 1.3 || r.lentLow != 0.3 || r.lentAfter != 1.1 || !r.haveLent {
		t.Errorf("lent %+v", r)
	}
	text := r.text()
	if !r.haveCut || r.cutFrom != 1300 || r.cutTo != 300 {
		t.Errorf("cut %+v", r)
	}
	for _, want := range []string{"p99 was 8.0 ms", "it was 30.0 ms", "throttled the reclaimed pool 2 times", "first throttle (online spike 900m > 80% of the 700m it kept) cut it from 1.30 to 0.30 cores",
		"180 ms after", "upper bound", "1.30 cores just before the spike and 0.30 at its lowest",
		"450 units/s during the spike against 950 before", "5s limit window", "to 1.10 cores"} {
		if !strings.Contains(text, want) {
			t.Errorf("reading lacks %q:\n%s", want, text)
		}
	}
	quiet := readingFromRun(sched, rows, []sample{{phase: "low", lentCores: 0.1}, {phase: "spike", lentCores: 0.1}, {phase: "low2", lentCores: 0.1}},
		nil, start, 0)
	if text := quiet.text(); !strings.Contains(text, "no throttle action") || !strings.Contains(text, "did not grow back") {
		t.Errorf("quiet reading:\n%s", text)
	}
}

func TestThrottleRuleNamesWhatWasCrossed(t *testing.T) {
	for reason, want := range map[string]string{
		"numa 0: run-queue wait of demo-web 1.224 (target 0.400) > target: reclaimed CPU 600m -> 300m (x0.50, no growth for 2.5s)": "run-queue wait of demo-web 1.224 (target 0.400) > target",
		"numa 1: measuring online work's own run-queue wait with nothing lent until 17:13:39.100: reclaimed CPU 784m -> 100m":      "measuring online work's own run-queue wait with nothing lent until 17:13:39.100",
		"agent stopping: reclaimed CPU 700m -> 100m": "",
		"numa 0: no change here":                     "",
	} {
		if got, _, _, _ := parseCut(reason); got != want {
			t.Errorf("parseCut(%q) rule %q, want %q", reason, got, want)
		}
	}
}
