package cpu

import (
	"cmp"
	"slices"

	"github.com/tidalqos/tidal/plugins"
)

// minPodMilliCPU is the least part of what is lent a reclaimed pod gets: the kernel's least
// CFS quota (1 ms a 100 ms period). Where so many pods share so little that their parts would
// fall under it, together they may use more than is lent.
const minPodMilliCPU = 10

// PodShares splits the CPU lent among reclaimed pods by name, each with its own cap in
// millicores (its reclaimed-millicpu request; 0 for none). Pods sit in the kubelet's cgroups,
// outside tidal's reclaimed tier, so no one parent's quota can hold them together: while a
// quota holds reclaimed work, each pod gets a part and the parts add up to what is lent, not
// what is lent times the number of pods. The split is max-min fair: no pod gets more than its
// cap, and what a capped pod cannot take goes to the others in equal parts.
func PodShares(lentMilli int64, caps map[string]int64) map[string]int64 {
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	// The smallest caps first, pods without one last: each takes at most an equal part of
	// what the earlier ones left.
	capOf := func(name string) int64 {
		if c := caps[name]; c > 0 {
			return c
		}
		return lentMilli + 1
	}
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(capOf(x), capOf(y)), cmp.Compare(x, y)) })
	parts := make(map[string]int64, len(names))
	left := lentMilli
	for i, name := range names {
		part := max(min(left/int64(len(names)-i), capOf(name)), minPodMilliCPU)
		parts[name] = part
		left = max(left-part, 0)
	}
	return parts
}

// podPart is a reclaimed pod's part of what is lent (n.ReclaimedPodParts); a pod the node does
// not list yet (a runtime hook deciding for a container before its pod is recorded) gets what
// it would as one more.
func podPart(n plugins.Node, name string) int64 {
	if part, ok := n.ReclaimedPodParts[name]; ok {
		return part
	}
	return max(n.LentMilliCPU/int64(len(n.ReclaimedPodParts)+1), minPodMilliCPU)
}
