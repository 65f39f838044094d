package eviction

import (
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func reclaimed(name string, prio int32) plugins.Workload {
	return plugins.Workload{Name: name, Tier: qos.Reclaimed, ReclaimPriority: prio}
}

// A workload under the floor for the whole window is due, lowest priority first; one that
// recovers, wants almost nothing, or is online is never due; an unknown reading neither
// starts nor resets the clock.
func TestStarvation(t *testing.T) {
	s := &Starvation{Floor: 0.2, Window: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	starved := func(w plugins.Workload) CPUSample {
		return CPUSample{Workload: w, GotMilli: 5, ReadyMilli: 900, AskedMilli: 500}
	}
	fine := func(w plugins.Workload) CPUSample { return CPUSample{Workload: w, GotMilli: 500, ReadyMilli: 900} }
	idle := func(w plugins.Workload) CPUSample { return CPUSample{Workload: w, GotMilli: 0, ReadyMilli: 10} }
	high, low, flaky, sleepy := reclaimed("high", 9), reclaimed("low", 1), reclaimed("flaky", 0), reclaimed("sleepy", 0)
	web := plugins.Workload{Name: "web", Tier: qos.Shared}

	step := func(at time.Duration, samples ...CPUSample) ([]Starved, int) {
		return s.Observe(t0.Add(at), samples)
	}
	if due, below := step(0, starved(high), starved(low), starved(flaky), idle(sleepy), starved(web)); len(due) != 0 || below != 3 {
		t.Fatalf("at once: due %v, below %d; want none due, 3 below", due, below)
	}
	step(5*time.Second, starved(high), CPUSample{Workload: low, Unknown: true}, fine(flaky), idle(sleepy), starved(web))
	due, below := step(10*time.Second, starved(high), starved(low), starved(flaky), idle(sleepy), starved(web))
	if below != 3 {
		t.Errorf("below = %d, want 3", below)
	}
	var names []string
	for _, d := range due {
		names = append(names, d.Workload.Name)
	}
	if strings.Join(names, ",") != "low,high" {
		t.Fatalf("due %v, want low (priority 1) then high (priority 9); flaky recovered, sleepy is idle, web is online", names)
	}
	reason := due[0].Reason(s.Floor, t0.Add(10*time.Second))
	for _, want := range []string{"low (priority 1)", "satisfaction 0.01", "got 5m; ready to run 900m, asked 500m", "below 0.20", "for 10s"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	// A workload gone from the samples is forgotten: back, its clock starts again.
	step(11*time.Second, starved(low))
	if due, _ := step(12*time.Second, starved(low), starved(high)); len(due) != 1 || due[0].Workload.Name != "low" {
		t.Errorf("high came back and was due at once: %v", due)
	}
	// Work that gets all it asked for is satisfied however much more it was ready to run
	// (a kernel may count time throttled by its own cap as waiting).
	capped := CPUSample{Workload: low, GotMilli: 100, ReadyMilli: 2000, AskedMilli: 100}
	if got := capped.Satisfaction(); got != 1 {
		t.Errorf("satisfaction of work getting all it asked for = %.2f, want 1", got)
	}
	// Off: a zero floor judges nothing.
	off := &Starvation{Window: time.Second}
	off.Observe(t0, []CPUSample{starved(low)})
	if due, below := off.Observe(t0.Add(time.Hour), []CPUSample{starved(low)}); len(due) != 0 || below != 0 {
		t.Errorf("floor 0 found %v, %d below", due, below)
	}
}
