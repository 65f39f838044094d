package agent

import (
	"context"
	"testing"
	"time"

	"github.com/tidalqos/tidal/qos"
)

// answer hands a probe answers as if its goroutine had got them.
func answer(p *probes, name string, took ...time.Duration) {
	pr := p.running[name]
	pr.mu.Lock()
	pr.answered = append(pr.answered, took...)
	pr.mu.Unlock()
}

// A probe's answers with nothing lent teach its floor at their load; the floor over the
// target is news once, and again when it comes back under; answers read while something is
// lent teach nothing.
func TestProbeFloor(t *testing.T) {
	p := newProbes(time.Hour) // the probes' own goroutines never fire: the test answers
	defer p.stop()
	slo := qos.SLO{Probe: "http://127.0.0.1:1/", Latency: 10 * time.Millisecond}
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	const ms = time.Millisecond

	answer(p, "web", 30*ms, 2*ms, 31*ms)
	if n, over := p.tally("web", 500, false); n != 3 || over != 2 {
		t.Fatalf("tally = %d answers, %d over; want 3, 2", n, over)
	}
	answer(p, "web", 30*ms)
	p.tally("web", 500, false)
	if _, _, _, ok := p.baseline("web", 500); ok {
		t.Fatal("answers read while something was lent made a floor")
	}

	for range 2 {
		answer(p, "web", 30*ms, 29*ms, 31*ms)
		p.tally("web", 500, true)
	}
	floor, borrowed, changed, ok := p.baseline("web", 500)
	if !ok || floor != 30*ms || borrowed || !changed {
		t.Fatalf("baseline = %v borrowed %v changed %v ok %v; want 30ms of its own level, news", floor, borrowed, changed, ok)
	}
	if _, _, changed, _ := p.baseline("web", 500); changed {
		t.Error("the same floor was news twice")
	}
	if _, borrowed, changed, _ := p.baseline("web", 5000); !borrowed || changed {
		t.Errorf("at another load: borrowed %v changed %v; want borrowed, no news", borrowed, changed)
	}

	for range 5 {
		answer(p, "web", 3*ms)
		p.tally("web", 500, true)
	}
	if floor, _, changed, _ := p.baseline("web", 500); floor != 3*ms || !changed {
		t.Errorf("back under the target: floor %v changed %v; want 3ms, news", floor, changed)
	}

	// A new target keeps the floor (the latency is the workload's); a new URL forgets it.
	slo.Latency = 2 * ms
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	if floor, _, changed, ok := p.baseline("web", 500); !ok || floor != 3*ms || !changed {
		t.Errorf("after a new target: floor %v ok %v changed %v; want 3ms kept, news (over the new target)", floor, ok, changed)
	}
	slo.Probe = "http://127.0.0.1:2/"
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	if _, _, _, ok := p.baseline("web", 500); ok {
		t.Error("a probe of another URL kept the old one's floor")
	}
}
