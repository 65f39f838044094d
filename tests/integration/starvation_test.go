package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A reclaimed burner starved by an online burner that takes every CPU is evicted once its
// CPU satisfaction has stayed under the floor for the window, with the figures named; an
// idle reclaimed workload beside it is not (it wants no CPU), nor is the online one.
func TestStarvedReclaimedWorkIsEvicted(t *testing.T) {
	n := newNode(t, "memory:\n  evictPressureAbove: 100\neviction:\n  gracePeriod: 1s\n  coolDown: 0s\n  starvationFloor: 0.2\n  starvationWindow: 3s\n")
	n.start()
	n.run("--tier", "shared", "--name", "web", "--", tidalBin, "workload", "burner", "--threads", "4")
	n.waitWorkload("web")
	started := time.Now()
	n.run("--tier", "reclaimed", "--name", "batch", "--", tidalBin, "workload", "burner", "--threads", "2")
	n.run("--tier", "reclaimed", "--name", "sleepy", "--", "sleep", "600")
	n.waitWorkload("batch")
	n.waitWorkload("sleepy")
	n.eventually(10*time.Second, "batch measured", func() error {
		if w, _ := n.workload("batch"); w.CPUSatisfaction == nil {
			return fmt.Errorf("no satisfaction in status")
		}
		return nil
	})
	var reason string
	n.eventually(30*time.Second, "batch evicted for CPU starvation", func() error {
		for _, a := range n.status().Actions {
			if a.Kind == "evict" {
				reason = a.Reason
				return nil
			}
		}
		w, _ := n.workload("batch")
		var sat float64
		if w.CPUSatisfaction != nil {
			sat = *w.CPUSatisfaction
		}
		return fmt.Errorf("no eviction yet (batch satisfaction %.3f, cpu %dm, lendable %dm)", sat, w.MilliCPU, n.status().Lendable.MilliCPU)
	})
	if took := time.Since(started); took < 3*time.Second {
		t.Errorf("evicted %v after it started, before the 3s window", took)
	}
	if !strings.HasPrefix(reason, "batch ") || !strings.Contains(reason, "CPU satisfaction") || !strings.Contains(reason, "below 0.20") {
		t.Errorf("eviction reason %q: want batch named with its satisfaction and the floor", reason)
	}
	n.eventually(10*time.Second, "batch gone", func() error {
		if _, ok := n.workload("batch"); ok {
			return fmt.Errorf("still listed")
		}
		return nil
	})
	for _, name := range []string{"sleepy", "web"} {
		if _, ok := n.workload(name); !ok {
			t.Errorf("%s was stopped too", name)
		}
	}
	for _, a := range n.status().Actions {
		if a.Kind == "evict" && !strings.HasPrefix(a.Reason, "batch ") {
			t.Errorf("another eviction: %s", a.Reason)
		}
	}
}
