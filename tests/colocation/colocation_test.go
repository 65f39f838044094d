package main

import (
	"image/png"
	"math"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/internal/workload"
	"github.com/tidalqos/tidal/reporter"
)

// Pure-logic tests: no root, no cgroups. The benchmark itself is exercised by running it.

func testOptions(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseFlags(append([]string{"-out", t.TempDir()}, args...))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDayAddsUpAndRoundTripsThroughTheLoadGenerator(t *testing.T) {
	o := testOptions(t, "-day", "60s")
	ps := dayPhases(o)
	var total time.Duration
	for _, p := range ps {
		total += p.Duration
	}
	if total != o.day {
		t.Fatalf("phases add up to %s, want %s", total, o.day)
	}
	parsed, err := workload.ParsePhases(phaseSpec(ps))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parsed, ps) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", parsed, ps)
	}
	from, to, ok := phaseWindow(ps, spikePhase)
	if !ok || from != 36*time.Second || to != 42*time.Second {
		t.Fatalf("spike window %s-%s %v, want 36s-42s", from, to, ok)
	}
}

func TestQuickShortensOnlyWhatIsNotSet(t *testing.T) {
	o := testOptions(t, "-quick", "-warmup", "5s")
	if o.day != 12*time.Second || o.warmup != 5*time.Second || o.overheadDuration != 15*time.Second {
		t.Fatalf("quick: day %s warmup %s overhead %s", o.day, o.warmup, o.overheadDuration)
	}
	if _, err := parseFlags([]string{"-out", "x", "-scenarios", "online-alone,nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown scenario: err %v", err)
	}
	// Two builds of the agent in one run: the second binary is asked for, and used.
	if _, err := parseFlags([]string{"-out", "x", "-scenarios", "tidal,tidal-baseline-build"}); err == nil || !strings.Contains(err.Error(), "-tidal-baseline") {
		t.Fatalf("tidal-baseline-build without -tidal-baseline: err %v", err)
	}
	o = testOptions(t, "-scenarios", "tidal,tidal-baseline-build", "-tidal-baseline", "/opt/old/tidal")
	sc, _ := scenarioByName("tidal-baseline-build")
	r := scenarioRun{b: &bench{opts: o, tidal: "/opt/new/tidal"}, sc: sc}
	if got := r.agentBinary(); got != "/opt/old/tidal" {
		t.Fatalf("tidal-baseline-build runs %s, want the -tidal-baseline binary", got)
	}
	if r.sc, _ = scenarioByName("tidal"); r.agentBinary() != "/opt/new/tidal" {
		t.Fatalf("tidal runs %s, want the -tidal binary", r.agentBinary())
	}
	// The SLO probe asks what the load asks, over HTTP or Redis alike.
	if _, err := parseFlags([]string{"-out", "x", "-servers", "go,nginx,redis", "-scenarios", "online-alone,tidal-slo"}); err != nil {
		t.Fatalf("SLO probe of every server: %v", err)
	}
}

func TestStatAndPercentile(t *testing.T) {
	s := statOf([]float64{3, math.NaN(), 1, 2, 10})
	if s != (stat{Median: 2.5, Min: 1, Max: 10, N: 4}) {
		t.Fatalf("statOf = %+v", s)
	}
	if s := statOf(nil); s.N != 0 {
		t.Fatalf("empty statOf = %+v", s)
	}
	v := []float64{5, 1, 4, 2, 3}
	if p := percentile(v, 0.5); p != 3 {
		t.Fatalf("p50 = %v", p)
	}
	if p := percentile(v, 0.99); p != 5 {
		t.Fatalf("p99 = %v", p)
	}
}

func TestCumulativeInterpolatesAndHoldsAtTheEnds(t *testing.T) {
	t0 := time.Unix(100, 0)
	c := cumulative{{t0, 0}, {t0.Add(time.Second), 100}, {t0.Add(3 * time.Second), 300}}
	if d := c.delta(t0.Add(500*time.Millisecond), t0.Add(2*time.Second)); d != 150 {
		t.Fatalf("delta = %v, want 150", d)
	}
	if v := c.at(t0.Add(-time.Second)); v != 0 {
		t.Fatalf("before the first reading: %v", v)
	}
	if v := c.at(t0.Add(time.Hour)); v != 300 {
		t.Fatalf("after the last reading: %v", v)
	}
}

func TestHostStealIsAShareOfTheNodesCPUTime(t *testing.T) {
	t0 := time.Unix(100, 0)
	samples := []nodeCPU{
		{At: t0, Busy: 0, Total: 0, Steal: 0},
		{At: t0.Add(time.Second), Busy: 1.0, Total: 2, Steal: 0.1},
		{At: t0.Add(2 * time.Second), Busy: 2.5, Total: 4, Steal: 0.5},
	}
	if got := hostSteal(samples, t0, t0.Add(2*time.Second)); got != 12.5 {
		t.Errorf("host steal over both seconds = %v%%, want 12.5%% (0.5 s of 4 s)", got)
	}
	if got := hostSteal(samples, t0.Add(time.Second), t0.Add(2*time.Second)); got != 20 {
		t.Errorf("host steal over the second second = %v%%, want 20%%", got)
	}
	if got := nodeUtilization(samples, t0, t0.Add(2*time.Second)); got != 62.5 {
		t.Errorf("node utilization = %v%%, want 62.5%% (steal included)", got)
	}
}

// runs builds two rounds of online-alone, offline-alone and naive with given figures.
func fakeRuns() []runResult {
	online := func(p99 float64, ivs ...interval) *onlineResult {
		return &onlineResult{P50Ms: p99 / 2, P99Ms: p99, P999Ms: p99 * 2, Intervals: ivs}
	}
	iv := func(p99 float64, count uint64) interval { return interval{P99Ms: p99, Count: count, TargetRPS: 100} }
	return []runResult{
		{Scenario: "online-alone", Round: 1, Online: online(10, iv(9, 100), iv(12, 100))},
		{Scenario: "offline-alone", Round: 1, Offline: &offlineResult{BurnerUnits: 1000, AntagonistBytes: 4000}},
		{Scenario: "naive", Round: 1, Online: online(40, iv(25, 100), iv(15, 100), iv(0, 0)),
			Offline: &offlineResult{BurnerUnits: 500, AntagonistBytes: 1000}},
		{Scenario: "online-alone", Round: 2, Online: online(20)},
		{Scenario: "offline-alone", Round: 2, Offline: &offlineResult{BurnerUnits: 2000, AntagonistBytes: 4000}},
		{Scenario: "naive", Round: 2, Online: online(40), Offline: &offlineResult{BurnerUnits: 1500, AntagonistBytes: 3000}},
		{Scenario: "naive", Round: 3, Error: "boom"},
	}
}

func TestSLOIsTwiceTheRoundsAloneP99AndMissingAnswersBreakIt(t *testing.T) {
	runs := fakeRuns()
	applySLO(runs, options{sloFactor: 2})
	naive := runs[2].Online
	if naive.SLOMs != 20 || naive.SLOBrokenSeconds != 2 {
		t.Fatalf("naive round 1: SLO %v ms, broken %d s; want 20 ms and 2 s (25 ms, and a second with no answer)", naive.SLOMs, naive.SLOBrokenSeconds)
	}
	applySLO(runs, options{slo: 10 * time.Millisecond})
	if naive.SLOMs != 10 || naive.SLOBrokenSeconds != 3 {
		t.Fatalf("fixed SLO: %v ms, broken %d s", naive.SLOMs, naive.SLOBrokenSeconds)
	}
}

func TestSummaryTakesRatiosWithinEachRound(t *testing.T) {
	o := options{sloFactor: 2, scenarios: []string{"online-alone", "offline-alone", "naive"}}
	ss := summarize(fakeRuns(), "go", o)
	naive, _ := summaryOf(ss, "naive")
	// p99 ratios 40/10 and 40/20; burner 500/1000 and 1500/2000.
	if naive.P99Ratio != (stat{Median: 3, Min: 2, Max: 4, N: 2}) {
		t.Fatalf("p99 ratio %+v", naive.P99Ratio)
	}
	if naive.BurnerRatio != (stat{Median: 0.625, Min: 0.5, Max: 0.75, N: 2}) {
		t.Fatalf("burner ratio %+v", naive.BurnerRatio)
	}
	if naive.Runs != 2 || naive.Failed != 1 {
		t.Fatalf("runs %d failed %d", naive.Runs, naive.Failed)
	}
	if r := crossRatio(fakeRuns(), "naive", "offline-alone", antagonistBytes); r.Median != 0.5 {
		t.Fatalf("cross ratio %+v", r)
	}
}

func TestSpikeToShrinkIsTheFirstThrottleInTheSpike(t *testing.T) {
	o := options{day: 60 * time.Second, valleyRPS: 1, peakRPS: 2, spikeRPS: 3}
	day := time.Unix(1000, 0)
	spike := day.Add(36 * time.Second)
	w := newAgentWatch()
	for _, a := range []reporter.Action{
		{Time: day.Add(20 * time.Second), Kind: "throttle", Reason: "run-queue wait over target"}, // during the ramp
		{Time: spike.Add(10 * time.Millisecond), Kind: "grow"},
		{Time: spike.Add(30 * time.Millisecond), Kind: "throttle"},
		{Time: spike.Add(90 * time.Millisecond), Kind: "throttle"},
	} {
		w.actions[actionKey{a.Time.UnixNano(), a.Kind, a.Reason}] = a
	}
	w.lent = []lentSample{{spike.Add(-time.Second), 700}, {spike.Add(time.Second), 100}}
	var lent xy
	r := tidalFrom(w, dayPhases(o), day, 1.5, 20<<20, &lent)
	if r.SpikeToShrinkMs == nil || *r.SpikeToShrinkMs != 30 {
		t.Fatalf("spike to shrink %v, want 30 ms", r.SpikeToShrinkMs)
	}
	if r.Throttles != 3 || r.LentAtSpikeMilliCPU != 700 || len(lent.X) != 2 || lent.Y[1] != 0.1 {
		t.Fatalf("throttles %d, lent at spike %d, lent series %+v", r.Throttles, r.LentAtSpikeMilliCPU, lent)
	}
	if last, ok := r.lastThrottleBefore(36); len(r.Actions) != 4 || !ok || last.T != 20 || last.Reason != "run-queue wait over target" {
		t.Fatalf("%d actions, last throttle before the spike %+v (%v), want 4 and the ramp's at 20 s", len(r.Actions), last, ok)
	}
}

func TestChartIsADecodablePNG(t *testing.T) {
	c := chart{title: "test", x0: -5, x1: 60, marks: []mark{{0, "valley"}, {12, "ramp"}}, panels: []panel{
		{title: "p99 (log)", lo: 1, hi: 1000, log: true, lines: []line{{name: "p99", c: blue, pts: xy{X: []float64{0, 30, 59}, Y: []float64{2, 500, 0}}}}},
		{title: "cpu", hi: 100, lines: []line{{name: "cpu", c: green, dashed: true, pts: xy{X: []float64{-5, 70}, Y: []float64{-10, 150}}}}},
	}}
	file := filepath.Join(t.TempDir(), "c.png")
	if err := c.writePNG(file); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() < 2*panelH {
		t.Fatalf("image %v", b)
	}
}

func TestTicks(t *testing.T) {
	if got := ticks(1, 1000, true); !reflect.DeepEqual(got, []float64{1, 10, 100, 1000}) {
		t.Fatalf("log ticks %v", got)
	}
	if got := ticks(0, 100, false); !reflect.DeepEqual(got, []float64{0, 20, 40, 60, 80, 100}) {
		t.Fatalf("linear ticks %v", got)
	}
	if fmtFloat(-1e-12) != "0" || fmtFloat(10000) != "10000" || fmtFloat(2.5) != "2.5" {
		t.Fatal("fmtFloat")
	}
}

func TestProcessCPUAndMemoryOfThisProcess(t *testing.T) {
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if hwm, err := memoryStatus(os.Getpid(), "VmHWM"); err != nil || hwm <= 0 {
		t.Fatalf("VmHWM %d, %v", hwm, err)
	}
}

// The contention probe times each crossing once, from the first sample at which online use
// over the window exceeds the spike threshold of what it kept (or over the burst window all
// of it) to the sample at which lending fell; a crossing with nothing to cut is not one, and
// one without a fall within the timeout is a miss.
func TestContentionProbe(t *testing.T) {
	p := newContentionProbe(2000)
	t0 := time.Unix(1000, 0)
	var used time.Duration
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Samples at the harness's interval; online idle, 1800m lent (kept 200m, threshold 160m).
	every := int(contentionEvery / time.Millisecond)
	step := func(ms int, busy float64, lent int64) {
		used += time.Duration(busy * float64(contentionEvery))
		p.observe(at(ms), used, lent)
	}
	ms := 0
	for ; ms < 100; ms += every {
		step(ms, 0, 1800)
	}
	// Online spins one CPU: over the burst window it uses more than all it kept (200m) from
	// its first sample; the quota falls at 120 ms.
	start := ms
	for ; ms < 120; ms += every {
		step(ms, 1, 1800)
	}
	step(ms, 1, 500)
	if len(p.events) != 1 || p.events[0].Missed {
		t.Fatalf("events %+v, want one timed", p.events)
	}
	if e := p.events[0]; !e.At.Equal(at(start)) || e.Ms != float64(120-start) {
		t.Errorf("event %+v: want it to begin at the first spinning sample, %v, and last until 120 ms", e, at(start))
	}
	// Spinning on: under the threshold of what it keeps now (1200m of 1500m), no new event.
	for ms += every; ms < 300; ms += every {
		step(ms, 1, 500)
	}
	if len(p.events) != 1 {
		t.Fatalf("one spike counted %d times", len(p.events))
	}
	// Online stops, lending grows back; a new spin that the agent never answers is a miss.
	for ; ms < 400; ms += every {
		step(ms, 0, 1800)
	}
	for ; ms < 1600; ms += every {
		step(ms, 1, 1800)
	}
	if len(p.events) != 2 || !p.events[1].Missed {
		t.Fatalf("events %+v, want a miss second", p.events)
	}
	if e := p.events[1]; e.LentMilli != 1800 || e.KeptMilli != 200 || e.WindowMilli < 160 || e.BurstMilli < 200 {
		t.Errorf("miss %+v: want the figures at its start (1800m lent, 200m kept, use over both limits)", e)
	}
	// A blip over the threshold (one busy sample) that ends before lending falls is no spike.
	for ; ms < 1620; ms += every {
		step(ms, 0, 1800)
	}
	step(ms, 1, 1800)
	for ms += every; ms < 1680; ms += every {
		step(ms, 0, 1800)
	}
	step(ms, 0, 500)
	ms += every
	if len(p.events) != 2 {
		t.Fatalf("a blip counted: %+v", p.events)
	}
	// At the minimum there is nothing to cut: no event.
	for ; ms < 1700; ms += every {
		step(ms, 0, 100)
	}
	for ; ms < 1900; ms += every {
		step(ms, 1, 100)
	}
	if len(p.events) != 2 {
		t.Errorf("a crossing at the minimum counted: %+v", p.events)
	}
	if v, ok := lentOfQuota("50000\n", 100000); !ok || v != 500 {
		t.Errorf("v1 quota 50000/100000: %d %v", v, ok)
	}
	if v, ok := lentOfQuota("25000 50000\n", 100000); !ok || v != 500 {
		t.Errorf("v2 cpu.max 25000 50000: %d %v", v, ok)
	}
	if _, ok := lentOfQuota("max 100000\n", 100000); ok {
		t.Error("no quota read as one")
	}
}

// sysfs cache sizes, as the antagonist's default size is taken from them.
func TestCacheBytes(t *testing.T) {
	for in, want := range map[string]int64{"266240K": 266240 << 10, "32M": 32 << 20, "512": 512, "": 0, "12X": 0, "0K": 0} {
		got, ok := cacheBytes(in)
		if got != want || ok != (want > 0) {
			t.Errorf("cacheBytes(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// Every scenario's agent settings are a config the agent accepts (on top of the benchmark's
// own lines): a diagnostic variant with a typo would otherwise fail only at its run.
func TestScenarioAgentConfigsParse(t *testing.T) {
	for _, sc := range scenarios {
		if sc.agentConfig == "" {
			continue
		}
		yaml := "cgroup:\n  root: tidal-bench\nstateDir: /tmp/s\nsocketPath: /tmp/s/tidal.sock\nmetricsAddress: \"\"\n" + sc.agentConfig
		if _, err := config.Parse(sc.Name+".yaml", []byte(yaml)); err != nil {
			t.Errorf("scenario %s: %v", sc.Name, err)
		}
	}
}

// A crossing the probe saw without a fall is reported with what it saw, so that it can be
// set beside the agent's own fast-path figures.
func TestReportNamesEachContentionMiss(t *testing.T) {
	res := results{Options: optionsDoc{Phases: "valley:8s@150,spike:4s@800"}, Runs: []runResult{
		{Scenario: "tidal", Round: 2, Tidal: &tidalResult{ContentionMisses: []contentionMiss{
			{T: 9.5, LentMilliCPU: 1392, KeptMilliCPU: 608, WindowMilliCPU: 520, BurstMilliCPU: 610}}}},
		{Scenario: "online-alone", Round: 2},
	}}
	var b strings.Builder
	writeContentionMisses(&b, res)
	want := "- Round 2: a crossing without a fall within 1s at 9.5 s (spike): online use 520m over 30ms and 610m over 10ms, " +
		"against limits of 486m (80% of the 608m kept, with 1392m lent) and 608m (all of it).\n"
	if b.String() != want {
		t.Errorf("report:\n%q\nwant\n%q", b.String(), want)
	}
}

// The *-day-workloads diagnostics put the light workloads where the scenario puts its work,
// on real cgroups: every other one beside the online service, the rest under the offline
// parent with its knobs, one process each; cleaning up kills them and removes the cgroups.
func TestDayWorkloadsWithoutAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates cgroups")
	}
	o := testOptions(t, "-day-workloads", "4", "-tidal", "/bin/true") // no agent runs: nothing to build
	var log strings.Builder
	b, err := newBench(o, &log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.close(); err != nil {
			t.Error(err)
		}
	})
	sc, _ := scenarioByName("idle-day-workloads")
	r := &scenarioRun{b: b, sc: sc, name: "day", rel: path.Join(b.root, "day")}
	if err := r.makeCgroups(); err != nil {
		t.Fatal(err)
	}
	if err := r.startDayWorkloads(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"light-000", "offline/light-001", "light-002", "offline/light-003"} {
		pids, err := b.layout.Procs(r.sub(want), false)
		if err != nil || len(pids) != 1 || pids[0] != r.sleepers[i].Process.Pid {
			t.Errorf("%s: procs %v, %v; want sleeper %d's pid", want, pids, err, i)
		}
	}
	if idle, err := os.ReadFile(filepath.Join(b.layout.Dir("cpu", r.sub("offline")), "cpu.idle")); err == nil && strings.TrimSpace(string(idle)) != "1" {
		t.Errorf("offline parent cpu.idle %q, want 1 (idle's placement)", idle)
	}
	if err := r.cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.layout.Dir("cpu", r.rel)); !os.IsNotExist(err) {
		t.Errorf("run cgroup left after cleanup: %v", err)
	}
}
