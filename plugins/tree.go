package plugins

import (
	"path"
	"strings"

	"github.com/tidalqos/tidal/qos"
)

// Tree is the desired state of tidal's cgroup tree: the root, one cgroup per tier (the
// reclaimed tier beside the root, see TierPath) and one per workload, parents before
// children. Resource plugins each fill in their own knobs.
type Tree struct {
	nodes []Cgroup
	index map[string]int
	root  string
	// foreign are the cgroups of workloads someone else made (pods).
	foreign map[string]bool
	// children are the child cgroups of foreign workloads (a pod's containers), by path.
	children map[string][]string
	// containerLimits are foreign workloads' containers' CPU limits by container ID, by path.
	containerLimits map[string]map[string]int64
}

// TierPath is the cgroup of a tier: the online tiers under root ("tidal/shared"), the
// reclaimed tier beside it ("tidal-reclaimed"). Reclaimed work must not share a parent with
// online work: the parent would be runnable whenever reclaimed work is, spending the online
// tiers' fair share against the parent's siblings, and a waking online task would then wait
// behind those siblings (Redis's run-queue wait 3-5x, docs/benchmark.md#cgroup-shape).
func TierPath(root string, tier qos.Tier) string {
	if tier == qos.Reclaimed {
		return path.Join(path.Dir(root), path.Base(root)+"-"+string(qos.Reclaimed))
	}
	return path.Join(root, string(tier))
}

// LegacyReclaimedPath is where the reclaimed tier was before it moved beside root
// ("tidal/reclaimed"): an agent adopts what it finds there into the tier's new place.
func LegacyReclaimedPath(root string) string { return path.Join(root, string(qos.Reclaimed)) }

// WorkloadPath is the cgroup of a named workload ("tidal/shared/web-1", "tidal-reclaimed/batch-1").
func WorkloadPath(root string, tier qos.Tier, name string) string {
	return path.Join(TierPath(root, tier), name)
}

// NewTree lays out the cgroups for root, its tiers and the workloads, all settings unset.
// children lists the child cgroups of foreign workloads by cgroup path (nil: none known).
func NewTree(root string, workloads []Workload, children map[string][]string) *Tree {
	t := &Tree{index: map[string]int{}, root: root, foreign: map[string]bool{}, children: children,
		containerLimits: map[string]map[string]int64{}}
	t.add(root)
	for _, tier := range qos.AllTiers() {
		t.add(TierPath(root, tier))
	}
	for _, w := range workloads {
		t.add(w.Cgroup)
		if w.Owner.Foreign() {
			t.foreign[w.Cgroup] = true
			t.containerLimits[w.Cgroup] = w.ContainerCPULimits
		}
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

// Cgroups returns the desired cgroups, parents first. A foreign workload's children follow
// it with its cpuset (cgroup v1 needs each child narrowed too) and its CPU burst (each
// container's quota throttles it first), sized on the container's own limit, nothing else.
func (t *Tree) Cgroups() []Cgroup {
	out := make([]Cgroup, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, n)
		if !t.foreign[n.Path] {
			continue
		}
		out[len(out)-1].Foreign = true
		for _, c := range t.children[n.Path] {
			s := Settings{CPUs: n.Settings.CPUs, Mems: n.Settings.Mems, CPUBurst: n.Settings.CPUBurst, CPUBurstPercent: n.Settings.CPUBurstPercent}
			if s.CPUBurstPercent > 0 {
				s.CPUBurstLimit = containerLimit(c, t.containerLimits[n.Path])
			}
			out = append(out, Cgroup{Path: c, Foreign: true, Settings: s})
		}
	}
	return out
}

// containerLimit is the CPU limit of the container whose cgroup is child, 0 when unknown: the
// runtime names a container's cgroup after its ID ("<id>", "cri-containerd-<id>.scope").
func containerLimit(child string, limits map[string]int64) int64 {
	base := path.Base(child)
	for id, milli := range limits {
		if strings.Contains(base, id) {
			return milli
		}
	}
	return 0
}
