package demo

import (
	"testing"
	"time"

	"github.com/tidalqos/tidal/reporter"
)

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
