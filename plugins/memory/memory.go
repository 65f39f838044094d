// Package memory is the memory resource plugin: reclaimed work is limited to the memory the
// node lends; a workload's own --memory limit applies on top in every tier.
package memory

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Fill sets memory limits: the reclaimed tier at the lent bytes (hierarchical accounting caps
// all reclaimed work together; one write when lending changes), each workload its own limit
// or none, a reclaimed one never above what is lent. Online tiers are never limited by tidal.
func Fill(t *plugins.Tree, lent int64, workloads []plugins.Workload) {
	for _, tier := range qos.AllTiers() {
		t.Tier(tier).MemoryLimit = plugins.Unlimited
	}
	t.Tier(qos.Reclaimed).MemoryLimit = lent
	for _, w := range workloads {
		limit := plugins.Unlimited
		if w.MemoryLimit > 0 {
			limit = w.MemoryLimit
		}
		if w.Tier == qos.Reclaimed && (limit > lent || limit == plugins.Unlimited && w.KubeletOwned) {
			// Outside tidal's reclaimed tier (a pod), the lent amount caps it itself.
			limit = lent
		}
		if w.KubeletOwned && w.Tier != qos.Reclaimed {
			limit = 0 // an online pod's memory limit is the kubelet's
		}
		t.Workload(w).MemoryLimit = limit
	}
}
