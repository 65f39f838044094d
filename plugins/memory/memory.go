// Package memory is the memory dimension of the policy: reclaimed work is limited to the
// memory the node lends, throttled before it reaches that limit, and is the OOM killer's first
// choice; online work is protected from reclaim; a workload's own --memory limit applies on
// top in every tier.
//
// The throttle point sits ThrottleMarginBytes below the lent memory (at least half of it):
// on cgroup v2 it is memory.high, where the kernel reclaims the cgroup's own pages (its page
// cache first) and slows its allocations, so a job that allocates faster than lending grows
// is slowed rather than OOM-killed. cgroup v1 has no throttle: there it is
// memory.soft_limit_in_bytes, which only steers global reclaim to reclaimed work first, and
// the reclaimed tier gets oom_kill_disable so a task at its hard limit waits for lending to
// grow (the agent evicts it through the common evictor if lending cannot grow); a task at a
// limit of its own workload's (--memory), which lending does not lift, is killed.
package memory

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// ReclaimedOOMScoreAdj makes the kernel's OOM killer take reclaimed processes before any
// online one.
const ReclaimedOOMScoreAdj = 1000

// DefaultThrottleMarginBytes is the default distance from the throttle point to the limit.
const DefaultThrottleMarginBytes = 256 << 20

const pageSize = 4096

// Resource is the memory dimension of the policy. The zero value uses the defaults.
type Resource struct {
	// ThrottleMarginBytes puts reclaimed work's throttle point this far below what is lent
	// (but never below half of it); 0 is DefaultThrottleMarginBytes, negative is none.
	ThrottleMarginBytes int64
	// NoOOMWait leaves v1's oom_kill_disable off: a reclaimed task at its limit is killed.
	NoOOMWait bool
}

var _ plugins.Resource = Resource{}

func (Resource) Name() string { return "memory" }

// Throttle is the throttle point for a hard limit of limit bytes: the margin below it, at
// least half of it, on a page boundary (v1 rounds limits to pages, which would read back as
// drift).
func (r Resource) Throttle(limit int64) int64 {
	if limit <= 0 {
		return limit
	}
	margin := r.ThrottleMarginBytes
	if margin == 0 {
		margin = DefaultThrottleMarginBytes
	}
	return max(limit-max(margin, 0), limit/2) / pageSize * pageSize
}

// LimitAbove is the least limit whose throttle point is at or above held bytes: what reclaimed
// work holding held may be held to without the kernel reclaiming or throttling what it holds.
func (r Resource) LimitAbove(held int64) int64 {
	if held <= 0 {
		return 0
	}
	margin := r.ThrottleMarginBytes
	if margin == 0 {
		margin = DefaultThrottleMarginBytes
	}
	// Throttle is the larger of the limit less the margin and half the limit: either way up
	// to held will do.
	held = roundUpToPage(held)
	return min(roundUpToPage(held+max(margin, 0)), 2*held)
}

func roundUpToPage(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

func (r Resource) oomWait() plugins.Toggle {
	if r.NoOOMWait {
		return plugins.Off
	}
	return plugins.On
}

// Fill sets the memory knobs of tidal's root and tier cgroups: only the reclaimed tier is
// limited, to the lent memory, and throttled below it. The root and the online tiers protect
// everything their workloads protect: a child's memory.low or memory.min counts only up to
// its parent's, so they take "max" and the workloads' own values decide (the reclaimed tier
// claims none). A root nested under another cgroup (cgroup.root "a/tidal") is protected only
// as far as its ancestors are.
func (r Resource) Fill(t *plugins.Tree, n plugins.Node) {
	root := t.Root()
	root.MemoryLow, root.MemoryMin = plugins.Unlimited, plugins.Unlimited
	for _, tier := range qos.AllTiers() {
		s := t.Tier(tier)
		s.MemoryLimit, s.MemoryHigh = plugins.Unlimited, plugins.Unlimited
		s.MemoryLow, s.MemoryMin = plugins.Unlimited, plugins.Unlimited
		s.MemoryOOMWait = plugins.Off
	}
	rec := t.Tier(qos.Reclaimed)
	rec.MemoryLimit, rec.MemoryHigh = n.LentMemory, r.Throttle(n.LentMemory)
	// The reclaimed tier keeps the kernel's default protection: none.
	rec.MemoryLow, rec.MemoryMin = 0, 0
	rec.MemoryOOMWait = r.oomWait()
}

// protectGranule rounds protection down, so a working set that moves a little does not
// rewrite memory.low on every sample.
const protectGranule = 16 << 20

// Decide sets a workload's memory limit, throttle point, protection and OOM score: online
// tiers get their own limit, if any, and protection of their observed working set (memory.low
// for shared and system, memory.min for dedicated, on v2); reclaimed work inside tidal's
// reclaimed tier is capped and throttled by the tier, a reclaimed pod (outside it) by what is
// lent, and its own limit may only be smaller. An online pod's memory is the kubelet's: its
// protection would count only if the kubelet's parents carried protection too (the kubelet's
// MemoryQoS feature does that, from requests).
func (r Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	s := &d.Settings
	switch w.Tier {
	case qos.System, qos.Dedicated, qos.Shared:
		s.MemoryLimit = plugins.Unlimited
		if w.MemoryLimit > 0 {
			s.MemoryLimit = w.MemoryLimit
		}
		// Not sampled yet (0): left alone until it is.
		protect := w.MemoryUsage / protectGranule * protectGranule
		if w.Tier == qos.Dedicated {
			s.MemoryMin = protect
		} else {
			s.MemoryLow = protect
		}
	case qos.Reclaimed:
		s.MemoryLimit = plugins.Unlimited
		if w.Owner.Foreign() {
			s.MemoryLimit = n.LentMemory
		}
		if w.MemoryLimit > 0 {
			s.MemoryLimit = min(n.LentMemory, w.MemoryLimit)
		}
		s.MemoryHigh = plugins.Unlimited
		if s.MemoryLimit > 0 {
			s.MemoryHigh = r.Throttle(s.MemoryLimit)
		}
		// Waiting at the limit helps only where lending can lift it. At a limit of the
		// workload's own, under what is lent, its tasks would wait for ever (and the stall
		// eviction watches only the tier and reclaimed pods): the kernel kills there, as it
		// does in any tier.
		s.MemoryOOMWait = r.oomWait()
		if w.MemoryLimit > 0 && w.MemoryLimit < n.LentMemory {
			s.MemoryOOMWait = plugins.Off
		}
		d.OOMScoreAdj = ReclaimedOOMScoreAdj
	}
	if w.Owner.Foreign() && w.Tier != qos.Reclaimed {
		s.MemoryLimit, s.MemoryLow, s.MemoryMin = 0, 0, 0
	}
}
