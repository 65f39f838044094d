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

// Decide throttles a reclaimed workload outside tidal's reclaimed tier (a reclaimed pod, whose
// cgroup is the kubelet's) to what is lent; one inside the tier is held by the tier. Each such
// pod may use all of what is lent: the tier is the one sum tidal can cap.
func (Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	if n.LentIO == nil || w.Tier != qos.Reclaimed || !w.Owner.Foreign() {
		return
	}
	d.Settings.IOLimits = append([]plugins.IOLimit{}, n.LentIO...)
	if n.IOWeightWorks {
		d.Settings.IOWeight = ReclaimedWeight
	}
}

// unthrottled is an entry clearing each device's throttle.
func unthrottled(lent []plugins.IOLimit) []plugins.IOLimit {
	out := make([]plugins.IOLimit, len(lent))
	for i, l := range lent {
		out[i] = plugins.IOLimit{Device: l.Device}
	}
	return out
}
