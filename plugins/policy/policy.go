// Package policy is tidal's one decision function: tier -> desired settings, one resource
// dimension (plugins.Resource) at a time. The reconcile loop fills the cgroup tree with it and
// the runtime hooks (CRI proxy, NRI plugin) ask it for a container's decision, so the paths
// can never disagree.
//
// A new dimension is a package implementing plugins.Resource and one line in Default.
package policy

import (
	"fmt"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/plugins/io"
	"github.com/tidalqos/tidal/plugins/memory"
)

// Policy runs its resources in order. Its zero value decides nothing.
type Policy struct {
	resources []plugins.Resource
}

// Default is the policy tidal runs, every dimension it manages, each with its defaults; With
// swaps in a dimension as configured.
func Default() Policy {
	return New(cpu.Resource{}, memory.Resource{}, gpu.Resource{}, io.Resource{})
}

// New builds a policy from resources, run in the order given. Two resources of one name are
// a programming error and panic, like registering a handler twice.
func New(resources ...plugins.Resource) Policy {
	seen := map[string]bool{}
	for _, r := range resources {
		if seen[r.Name()] {
			panic(fmt.Sprintf("policy: resource %q listed twice", r.Name()))
		}
		seen[r.Name()] = true
	}
	return Policy{resources: append([]plugins.Resource(nil), resources...)}
}

// Names are the resources' names, in order.
func (p Policy) Names() []string {
	out := make([]string, len(p.resources))
	for i, r := range p.resources {
		out[i] = r.Name()
	}
	return out
}

// Fill sets the knobs of tidal's root and tier cgroups in t.
func (p Policy) Fill(t *plugins.Tree, n plugins.Node) {
	for _, r := range p.resources {
		r.Fill(t, n)
	}
}

// Decide is what workload w gets on node n.
func (p Policy) Decide(w plugins.Workload, n plugins.Node) plugins.Decision {
	var d plugins.Decision
	for _, r := range p.resources {
		r.Decide(w, n, &d)
	}
	return d
}

// With is p with r in place of the resource of the same name (a dimension configured from
// the agent's config), or r added last when there is none.
func (p Policy) With(r plugins.Resource) Policy {
	out := Policy{resources: append([]plugins.Resource(nil), p.resources...)}
	for i, have := range out.resources {
		if have.Name() == r.Name() {
			out.resources[i] = r
			return out
		}
	}
	out.resources = append(out.resources, r)
	return out
}
