package memory

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func TestFillLimits(t *testing.T) {
	ws := []plugins.Workload{
		{Name: "web", Tier: qos.Shared, Cgroup: "t/shared/web", MemoryLimit: 2 << 30},
		{Name: "db", Tier: qos.Dedicated, Cgroup: "t/dedicated/db"},
		{Name: "etl", Tier: qos.Reclaimed, Cgroup: "t/reclaimed/etl", MemoryLimit: 8 << 30},
		{Name: "ml", Tier: qos.Reclaimed, Cgroup: "t/reclaimed/ml", MemoryLimit: 1 << 30},
		{Name: "any", Tier: qos.Reclaimed, Cgroup: "t/reclaimed/any"},
	}
	tree := plugins.NewTree("t", ws)
	Fill(tree, 4<<30, ws)
	want := map[string]int64{"web": 2 << 30, "db": plugins.Unlimited, "etl": 4 << 30, "ml": 1 << 30, "any": plugins.Unlimited}
	for _, w := range ws {
		if got := tree.Workload(w).MemoryLimit; got != want[w.Name] {
			t.Errorf("%s limit = %d, want %d", w.Name, got, want[w.Name])
		}
	}
	if got := tree.Tier(qos.Reclaimed).MemoryLimit; got != 4<<30 {
		t.Errorf("reclaimed tier limit = %d, want the lent 4Gi", got)
	}
	for _, tier := range []qos.Tier{qos.System, qos.Dedicated, qos.Shared} {
		if got := tree.Tier(tier).MemoryLimit; got != plugins.Unlimited {
			t.Errorf("%s tier limited to %d", tier, got)
		}
	}
}
