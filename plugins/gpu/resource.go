package gpu

import (
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Resource is the GPU dimension of the policy: which GPUs a workload may see.
type Resource struct{}

var _ plugins.Resource = Resource{}

func (Resource) Name() string { return "gpu" }

// Fill sets nothing: tier cgroups leave devices alone, each workload's cgroup is narrowed.
func (Resource) Fill(*plugins.Tree, plugins.Node) {}

// Decide limits reclaimed work to the GPUs lent to it (none: "void"), and a workload that
// holds GPUs to those, by the environment and, for cgroups tidal owns, the device cgroup (a
// pod's is its runtime's).
func (Resource) Decide(w plugins.Workload, n plugins.Node, d *plugins.Decision) {
	if w.Tier != qos.Reclaimed && len(w.GPUs) == 0 {
		return
	}
	d.AddEnv(Env(w.GPUs))
	if !w.Owner.Foreign() {
		d.Settings.Devices = DeviceRules(n.GPUMinors, w.GPUMinors)
	}
}
