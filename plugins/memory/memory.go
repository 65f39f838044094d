// Package memory is the memory dimension of the policy: reclaimed work is limited to the
// memory the node lends and is the OOM killer's first choice; a workload's own --memory limit
// applies on top in every tier.
package memory

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// ReclaimedOOMScoreAdj makes the kernel's OOM killer take reclaimed processes before any
// online one.
const ReclaimedOOMScoreAdj = 1000

// Resource is the memory dimension of the policy.
type Resource struct{}

var _ plugins.Resource = Resource{}

func (Resource) Name() string { return "memory" }

// Fill sets the memory limits of tidal's tier cgroups: only the reclaimed tier is limited,
// to the lent memory.
func (Resource) Fill(t *plugins.Tree, n plugins.Node) {
	for _, tier := range qos.AllTiers() {
		t.Tier(tier).MemoryLimit = plugins.Unlimited
	}
	t.Tier(qos.Reclaimed).MemoryLimit = n.LentMemory
}

// Decide sets a workload's memory limit and OOM score: online tiers get their own limit, if
// any; reclaimed work inside tidal's reclaimed tier is capped by the tier, a reclaimed pod
// (outside it) by what is lent, and its own limit may only be smaller. An online pod's limit
// is the kubelet's.
func (Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	s := &d.Settings
	switch w.Tier {
	case qos.System, qos.Dedicated, qos.Shared:
		s.MemoryLimit = plugins.Unlimited
		if w.MemoryLimit > 0 {
			s.MemoryLimit = w.MemoryLimit
		}
	case qos.Reclaimed:
		s.MemoryLimit = plugins.Unlimited
		if w.Owner.Foreign() {
			s.MemoryLimit = n.LentMemory
		}
		if w.MemoryLimit > 0 {
			s.MemoryLimit = min(n.LentMemory, w.MemoryLimit)
		}
		d.OOMScoreAdj = ReclaimedOOMScoreAdj
	}
	if w.Owner.Foreign() && w.Tier != qos.Reclaimed {
		s.MemoryLimit = 0
	}
}
