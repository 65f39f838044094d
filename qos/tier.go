// Package qos is the tier model of tidal and the one function that puts a
// workload into a tier from its metadata.
//
// Every workload source (standalone `tidal run`, Kubernetes pods, the CRI
// proxy and the NRI plugin) calls [Classify], so a workload gets the same
// tier whichever path saw it first. Classify never fails: a malformed or
// disallowed declaration is skipped or downgraded and reported as a
// [Problem], which callers turn into logs or Kubernetes Events.
package qos

import "fmt"

// Tier is a QoS tier. Online work runs in system, dedicated or shared;
// offline work runs in reclaimed, on capacity that online work lends.
type Tier string

// The tiers, from most to least protected.
const (
	// System is for node daemons: reserved cores, memory unrestricted.
	System Tier = "system"
	// Dedicated is for latency-critical online work: whole cores it owns,
	// optionally bound to one NUMA node; its memory is never reclaimed.
	Dedicated Tier = "dedicated"
	// Shared is the online default: the shared CPU pool, its own memory.
	Shared Tier = "shared"
	// Reclaimed is for offline work: the reclaimed pool at the lowest CPU
	// priority, limited to the memory and cores that online work lends.
	Reclaimed Tier = "reclaimed"
)

// AllTiers returns every tier from most to least protected. It returns a
// fresh slice each call, so callers may modify it.
func AllTiers() []Tier {
	return []Tier{System, Dedicated, Shared, Reclaimed}
}

// ParseTier returns the tier named s. Names are exact and lower case:
// " Shared" and "SHARED" are errors, so a typo is reported instead of
// silently meaning something else.
func ParseTier(s string) (Tier, error) {
	t := Tier(s)
	if !t.Valid() {
		return "", fmt.Errorf("unknown tier %q (allowed: %s)", s, tierList)
	}
	return t, nil
}

// Valid reports whether t is one of the four tiers.
func (t Tier) Valid() bool {
	switch t {
	case System, Dedicated, Shared, Reclaimed:
		return true
	}
	return false
}

// Online reports whether t is an online tier (system, dedicated, shared):
// work that tidal protects and never evicts. It is false for reclaimed and
// for values that are not tiers.
func (t Tier) Online() bool {
	switch t {
	case System, Dedicated, Shared:
		return true
	}
	return false
}

// tierList is the allowed tier names for messages, most protected first.
// A test checks that it matches AllTiers.
const tierList = "system, dedicated, shared, reclaimed"
