package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
)

func TestDemoScheduleScalesPhases(t *testing.T) {
	for _, total := range []time.Duration{75 * time.Second, 30 * time.Second, 3 * time.Second, 10001 * time.Millisecond} {
		ps := demoSchedule(total, 150, 600)
		if len(ps) != 3 || ps[0].name != "low" || ps[1].name != "spike" || ps[2].name != "low2" {
			t.Fatalf("%s: phases %+v", total, ps)
		}
		if got := scheduleLength(ps); got != total {
			t.Errorf("%s: phases add up to %s", total, got)
		}
		if ps[0].rps != 150 || ps[1].rps != 600 || ps[2].rps != 150 {
			t.Errorf("%s: rates %+v", total, ps)
		}
	}
	ps := demoSchedule(75*time.Second, 150, 600)
	if ps[0].dur != 26250*time.Millisecond || ps[1].dur != 22500*time.Millisecond || ps[2].dur != 26250*time.Millisecond {
		t.Errorf("75s: %+v", ps)
	}
}

func TestPhaseSpecParses(t *testing.T) {
	ps := demoSchedule(75*time.Second, 150, 612.5)
	spec := phaseSpec(ps)
	if spec != "low:26.25s@150,spike:22.5s@612.5,low2:26.25s@150" {
		t.Errorf("spec %q", spec)
	}
	parsed, err := workload.ParsePhases(spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parsed {
		if p.Name != ps[i].name || p.Duration != ps[i].dur || p.RPS != ps[i].rps {
			t.Errorf("phase %d: parsed %+v, want %+v", i, p, ps[i])
		}
	}
}

func TestPhaseAtAndStart(t *testing.T) {
	ps := demoSchedule(30*time.Second, 150, 600) // 10.5s, 9s, 10.5s
	cases := map[time.Duration]string{
		-time.Second: "", 0: "low", 10499 * time.Millisecond: "low", 10500 * time.Millisecond: "spike",
		19499 * time.Millisecond: "spike", 19500 * time.Millisecond: "low2", 29999 * time.Millisecond: "low2", 30 * time.Second: "",
	}
	for at, want := range cases {
		if got := phaseAt(ps, at); got != want {
			t.Errorf("phaseAt(%s) = %q, want %q", at, got, want)
		}
	}
	if got := phaseStart(ps, "spike"); got != 10500*time.Millisecond {
		t.Errorf("spike starts at %s", got)
	}
	if got := phaseStart(ps, "low"); got != 0 {
		t.Errorf("low starts at %s", got)
	}
}

func TestParseDemoFlags(t *testing.T) {
	o, err := parseDemoFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.duration != 75*time.Second || o.lowRPS != 150 || o.spikeRPS != 600 || o.work != 1500*time.Microsecond || o.burnerThreads != 2 || o.socket == "" {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range [][]string{{"--duration", "1s"}, {"--low-rps", "0"}, {"--spike-rps", "-5"}, {"--work", "0s"}, {"--burner-threads", "0"}, {"extra"}} {
		if _, err := parseDemoFlags(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSampleLineFitsTerminal(t *testing.T) {
	s := sample{elapsed: 74 * time.Second, phase: "spike", rps: 9999, p99: 12345.6, haveOnline: true, cpuPct: 100, haveCPU: true,
		lentCores: 1.25, offline: 123456789, haveOff: true, action: "throttle " + strings.Repeat("numa 0: online spike ", 10)}
	for _, line := range []string{sampleHeader(), formatSample(s), formatSample(sample{})} {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	if got := formatSample(sample{elapsed: 3 * time.Second, phase: "low", lentCores: 0.1}); got != "  3 low      -      -    -  0.10         -  -" {
		t.Errorf("empty sample line %q", got)
	}
	if !strings.HasSuffix(formatSample(s), "...") {
		t.Errorf("long action not truncated: %q", formatSample(s))
	}
}

func TestTruncateAndWrap(t *testing.T) {
	if got := truncate("abcdef", 6); got != "abcdef" {
		t.Errorf("%q", got)
	}
	if got := truncate("abcdefg", 6); got != "abc..." {
		t.Errorf("%q", got)
	}
	text := strings.Repeat("word ", 50) + strings.Repeat("x", 30)
	for _, line := range strings.Split(wrap(text, 20), "\n") {
		if len(line) > 30 || (len(line) > 20 && strings.Contains(line, " ")) {
			t.Errorf("line %q", line)
		}
	}
	if got := wrap("a b  c", 80); got != "a b c" {
		t.Errorf("%q", got)
	}
}

func TestParentFromStat(t *testing.T) {
	ppid, ok := parentFromStat([]byte("1234 (tidal (x) y) S 42 1234 1234 0 -1"))
	if !ok || ppid != 42 {
		t.Errorf("got %d %v", ppid, ok)
	}
	if _, ok := parentFromStat([]byte("garbage")); ok {
		t.Error("garbage parsed")
	}
}

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

func TestActions(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l := &actionLog{last: t0}
	fresh := l.add([]reporter.Action{
		{Time: at(-5), Kind: "grow", Reason: "before the demo"},
		{Time: at(10), Kind: "grow", Reason: "reclaimed memory 1Gi -> 2Gi"},
		{Time: at(20), Kind: "grow", Reason: "reclaimed CPU 100m -> 350m"},
		{Time: at(30), Kind: "admit", Reason: "demo-web"},
	})
	if len(fresh) != 3 {
		t.Fatalf("fresh %+v", fresh)
	}
	if a, _ := mostTelling(fresh); a.Reason != "reclaimed CPU 100m -> 350m" {
		t.Errorf("most telling %+v", a)
	}
	fresh = l.add([]reporter.Action{
		{Time: at(20), Kind: "grow", Reason: "reclaimed CPU 100m -> 350m"},
		{Time: at(30), Kind: "admit", Reason: "demo-web"},
		{Time: at(40), Kind: "shrink", Reason: "reclaimed memory"},
		{Time: at(50), Kind: "throttle", Reason: "online spike: reclaimed CPU 1200m -> 300m"},
		{Time: at(60), Kind: "grow", Reason: "reclaimed CPU"},
	})
	if len(fresh) != 3 || len(l.seen) != 6 {
		t.Fatalf("fresh %+v, seen %d", fresh, len(l.seen))
	}
	if a, _ := mostTelling(fresh); a.Kind != "throttle" {
		t.Errorf("most telling %+v", a)
	}
	if _, ok := mostTelling(nil); ok {
		t.Error("an action out of nothing")
	}
	if got := countActions(l.seen); got != "admit 1, grow 3, shrink 1, throttle 1" {
		t.Errorf("counts %q", got)
	}
	if got := countActions(nil); got != "none" {
		t.Errorf("counts %q", got)
	}
}

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
	}, acts, start, 10*time.Second)
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
	for _, want := range []string{"p99 was 8.0 ms", "it was 30.0 ms", "throttled the reclaimed pool 2 times", "from 1.30 to 0.30 cores",
		"180 ms after", "upper bound", "1.30 cores just before the spike and 0.30 at its lowest",
		"450 units/s during the spike against 950 before", "10s peak window", "to 1.10 cores"} {
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

// A child that ignores SIGTERM, with a grandchild in a process group of its own (as `tidal run`
// puts its workload), is killed with both after the grace period.
func TestStopChildrenKillsWhatIgnoresSIGTERM(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	c := &child{name: "stubborn", stderr: &tailBuffer{}, exited: make(chan struct{}),
		cmd: exec.Command("sh", "-c", `trap "" TERM; setsid sleep 60 & wait`)}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { defer close(c.exited); c.err = c.cmd.Wait() }()
	var kids []int
	for deadline := time.Now().Add(5 * time.Second); len(kids) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		kids = childPIDs(c.cmd.Process.Pid)
	}
	if len(kids) != 1 {
		t.Fatalf("children of the shell: %v", kids)
	}
	start := time.Now()
	if err := stopChildren([]*child{c}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < stopGrace || el > stopGrace+2*time.Second {
		t.Errorf("stopped after %s, want about %s", el, stopGrace)
	}
	for deadline := time.Now().Add(2 * time.Second); alive(kids[0]) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(kids[0]) {
		t.Errorf("grandchild %d still alive", kids[0])
	}
	if err := stopChildren([]*child{c}); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || !strings.HasPrefix(string(data[i+1:]), " Z")
}
