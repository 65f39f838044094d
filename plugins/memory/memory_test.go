package memory

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func TestFillLimits(t *testing.T) {
	tree := plugins.NewTree("t", nil, nil)
	Resource{}.Fill(tree, plugins.Node{LentMemory: 4 << 30})
	if got := tree.Tier(qos.Reclaimed).MemoryLimit; got != 4<<30 {
		t.Errorf("reclaimed tier limit = %d, want the lent 4Gi", got)
	}
	for _, tier := range []qos.Tier{qos.System, qos.Dedicated, qos.Shared} {
		if got := tree.Tier(tier).MemoryLimit; got != plugins.Unlimited {
			t.Errorf("%s tier limited to %d", tier, got)
		}
	}
}
