package eviction

import (
	"testing"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func TestRankNeverOnlineLowestPriorityFirst(t *testing.T) {
	t0 := time.Unix(0, 0)
	ws := []plugins.Workload{
		{Name: "web", Tier: qos.Shared, ReclaimPriority: -100, MemoryUsage: 9 << 30},
		{Name: "db", Tier: qos.Dedicated, ReclaimPriority: -100},
		{Name: "train", Tier: qos.Reclaimed, ReclaimPriority: 10, MemoryUsage: 8 << 30},
		{Name: "etl-small", Tier: qos.Reclaimed, ReclaimPriority: 0, MemoryUsage: 1 << 30, Started: t0},
		{Name: "etl-big", Tier: qos.Reclaimed, ReclaimPriority: 0, MemoryUsage: 4 << 30, Started: t0},
		{Name: "etl-new", Tier: qos.Reclaimed, ReclaimPriority: 0, MemoryUsage: 1 << 30, Started: t0.Add(time.Hour)},
		{Name: "sys", Tier: qos.System},
	}
	got := Rank(ws)
	want := []string{"etl-big", "etl-new", "etl-small", "train"}
	if len(got) != len(want) {
		t.Fatalf("ranked %d workloads, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w {
			t.Errorf("rank %d = %s, want %s", i, got[i].Name, w)
		}
	}
}

func TestMemoryShort(t *testing.T) {
	th := Thresholds{AvailableBelowBytes: 512 << 20, PressureAbove: 10}
	if _, short := MemoryShort(4<<30, 1, th); short {
		t.Error("plenty of memory reported short")
	}
	if r, short := MemoryShort(100<<20, 0, th); !short || r == "" {
		t.Error("100MiB available not short")
	}
	if r, short := MemoryShort(4<<30, 25, th); !short || r == "" {
		t.Error("25% pressure not short")
	}
}
