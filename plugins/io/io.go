// Package io is the disk IO dimension of the policy: reclaimed work is throttled, per disk, to
// the IO the node lends it (v1 blkio.throttle.*_device, v2 io.max) and gets the lowest IO
// weight where the disk's scheduler honours weights; online tiers are never IO-throttled.
//
// On cgroup v1 buffered writes are written back by the kernel's flusher threads and charged
// to the root cgroup, so they escape blkio throttles: only direct and synchronous IO of
// reclaimed work is held to what is lent there. cgroup v2 charges writeback to the cgroup
// that dirtied the pages, so io.max holds buffered writes too.
package io

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// ReclaimedWeight is reclaimed work's IO weight in v1 units: the kernel's lowest.
const ReclaimedWeight = 10

// OnlineWeight is the kernel's default weight, which online tiers keep.
const OnlineWeight = 100

// Resource is the IO dimension. The zero value throttles nothing until the node lends IO.
type Resource struct{}

var _ plugins.Resource = Resource{}

func (Resource) Name() string { return "io" }

// Fill throttles the reclaimed tier to what is lent and clears any throttle of the online
// tiers (never IO-throttled) on the same disks. Weights are written only where a disk's
// scheduler honours them: elsewhere the file may not exist or means nothing.
func (Resource) Fill(t *plugins.Tree, n plugins.Node) {
	if n.LentIO == nil {
		if n.IOClear {
			for _, tier := range qos.AllTiers() {
				t.Tier(tier).IOLimits = []plugins.IOLimit{} // none: clears every device's
			}
		}
		return
	}
	for _, tier := range qos.AllTiers() {
		s := t.Tier(tier)
		if tier == qos.Reclaimed {
			s.IOLimits = append([]plugins.IOLimit{}, n.LentIO...)
		} else {
			s.IOLimits = unthrottled(n.LentIO)
		}
		if n.IOWeightWorks {
			s.IOWeight = OnlineWeight
			if tier == qos.Reclaimed {
				s.IOWeight = ReclaimedWeight
			}
		}
	}
}

// Decide throttles a reclaimed workload to its share of what is lent where the tier's throttle
// does not hold it: a reclaimed pod (outside tidal's reclaimed tier, its cgroup the kubelet's),
// and on cgroup v1 every reclaimed workload, since v1's blkio throttling is flat (a limit on
// the tier holds only IO issued from the tier's own cgroup, not its children's). What is lent
// is split evenly over the reclaimed workloads, so together they stay within it.
func (Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	if w.Tier != qos.Reclaimed || !(w.Owner.Foreign() || n.IOFlat) {
		return
	}
	if n.LentIO == nil {
		if n.IOClear {
			d.Settings.IOLimits = []plugins.IOLimit{}
		}
		return
	}
	d.Settings.IOLimits = Share(n.LentIO, n.ReclaimedWorkloads)
	if n.IOWeightWorks {
		d.Settings.IOWeight = ReclaimedWeight
	}
}

// Share is one of n equal shares of lent (n < 1 counts as 1); a rate never falls to 0, which
// would mean no limit.
func Share(lent []plugins.IOLimit, n int) []plugins.IOLimit {
	n = max(n, 1)
	out := make([]plugins.IOLimit, len(lent))
	part := func(v uint64) uint64 {
		if v == 0 {
			return 0
		}
		return max(v/uint64(n), 1)
	}
	for i, l := range lent {
		out[i] = plugins.IOLimit{Device: l.Device, ReadBps: part(l.ReadBps), WriteBps: part(l.WriteBps),
			ReadIOPS: part(l.ReadIOPS), WriteIOPS: part(l.WriteIOPS)}
	}
	return out
}

// unthrottled is an entry clearing each device's throttle.
func unthrottled(lent []plugins.IOLimit) []plugins.IOLimit {
	out := make([]plugins.IOLimit, len(lent))
	for i, l := range lent {
		out[i] = plugins.IOLimit{Device: l.Device}
	}
	return out
}
