package plugins

import (
	"path"

	"github.com/tidalqos/tidal/qos"
)

// Tree is the desired state of tidal's cgroup tree: the root, one cgroup per tier and one per
// workload, parents before children. Resource plugins each fill in their own knobs.
type Tree struct {
	nodes []Cgroup
	index map[string]int
	root  string
}

// TierPath is the cgroup of a tier under root ("tidal/reclaimed").
func TierPath(root string, tier qos.Tier) string { return path.Join(root, string(tier)) }

// WorkloadPath is the cgroup of a named workload ("tidal/reclaimed/batch-1").
func WorkloadPath(root string, tier qos.Tier, name string) string {
	return path.Join(root, string(tier), name)
}

// NewTree lays out the cgroups for root, its tiers and the workloads, all settings unset.
func NewTree(root string, workloads []Workload) *Tree {
	t := &Tree{index: map[string]int{}, root: root}
	t.add(root)
	for _, tier := range qos.AllTiers() {
		t.add(TierPath(root, tier))
	}
	for _, w := range workloads {
		t.add(w.Cgroup)
	}
	return t
}

func (t *Tree) add(p string) {
	if _, ok := t.index[p]; ok {
		return
	}
	t.index[p] = len(t.nodes)
	t.nodes = append(t.nodes, Cgroup{Path: p})
}

// Root is the settings of tidal's root cgroup.
func (t *Tree) Root() *Settings { return &t.nodes[t.index[t.root]].Settings }

// Tier is the settings of a tier's cgroup.
func (t *Tree) Tier(tier qos.Tier) *Settings {
	return &t.nodes[t.index[TierPath(t.root, tier)]].Settings
}

// Workload is the settings of a workload's cgroup.
func (t *Tree) Workload(w Workload) *Settings { return &t.nodes[t.index[w.Cgroup]].Settings }

// Cgroups returns the desired cgroups, parents first.
func (t *Tree) Cgroups() []Cgroup { return append([]Cgroup(nil), t.nodes...) }
