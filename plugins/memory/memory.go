// Package memory is the memory resource plugin: reclaimed work is limited to the memory the
// node lends; a workload's own --memory limit applies on top in every tier.
package memory

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Fill sets the memory limits of tidal's tier cgroups: only the reclaimed tier is limited,
// to the lent memory. Each workload's own limit comes from isolation.Decide.
func Fill(t *plugins.Tree, lent int64) {
	for _, tier := range qos.AllTiers() {
		t.Tier(tier).MemoryLimit = plugins.Unlimited
	}
	t.Tier(qos.Reclaimed).MemoryLimit = lent
}
