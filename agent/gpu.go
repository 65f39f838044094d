package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
)

// observeGPUs reads the GPUs (NVML, outside every lock), maps their processes to workloads,
// and has the evictor stop reclaimed work on GPUs that online work needs back.
func (a *Agent) observeGPUs(ctx context.Context, now time.Time) {
	devs, err := a.gpuSource.Devices()
	if err != nil {
		a.log.Warn("GPU read failed; those GPUs are not lent", "err", err)
	}
	// The owner of a GPU's processes is looked up only on a node with GPUs: most have none,
	// and the slow loop need not copy 200 workloads each pass for nothing.
	var snap state.Snapshot
	owner := func(int) pgpu.Owner { return pgpu.Owner{} }
	if len(devs) > 0 {
		snap = a.store.Snapshot()
		owner = pgpu.OwnerByCgroup(snap.Plugins(), func(pid int) (string, error) {
			return sysgpu.ProcessCgroup(a.procDir, pid)
		})
	}
	tracker := a.store.Allocator().GPUs()
	tracker.Observe(now, devs, owner)
	for _, v := range tracker.Reclaim(now) {
		if snap.Workloads == nil {
			snap = a.store.Snapshot()
		}
		r, ok := snap.Get(v.Workload)
		if !ok {
			tracker.Release(v.Workload)
			continue
		}
		a.evict(ctx, r, "gpu-reclaim", fmt.Sprintf("%s (priority %d): %s", v.Workload, v.ReclaimPriority, v.Reason))
	}
}

// gpuEnv is the environment a workload's command must get: reclaimed work sees only the GPUs
// lent to it (none by default), dedicated work its own; other tiers are left alone.
func gpuEnv(w plugins.Workload) map[string]string {
	if w.Tier == qos.Reclaimed || len(w.GPUs) > 0 {
		return pgpu.Env(w.GPUs)
	}
	return nil
}

// gpuStatus is the per-device view for status and metrics.
func (a *Agent) gpuStatus() []reporter.GPU {
	var out []reporter.GPU
	for _, d := range a.store.Allocator().GPUs().States() {
		out = append(out, reporter.GPU{UUID: d.UUID, Index: d.Index, NUMANode: d.NUMANode,
			Lendable: d.Lendable, Reason: d.Reason, AssignedTo: d.AssignedTo})
	}
	return out
}
