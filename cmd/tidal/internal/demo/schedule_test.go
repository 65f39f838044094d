package demo

import (
	"testing"
	"time"

	"github.com/tidalqos/tidal/internal/workload"
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
