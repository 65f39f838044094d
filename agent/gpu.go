package agent

import (
	"fmt"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/plugins"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
)

// gpus is the agent's view of the node's GPUs: the NVML source and the lending tracker.
// Without NVML the source reports none and every GPU path is a no-op.
type gpus struct {
	src     sysgpu.Source
	tracker *pgpu.Tracker
	// stopped remembers which reclaim victims were already sent SIGTERM.
	stopped map[string]bool
}

func newGPUs(src sysgpu.Source) (*gpus, error) {
	tr, err := pgpu.NewTracker(pgpu.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return &gpus{src: src, tracker: tr, stopped: map[string]bool{}}, nil
}

// observeGPUsLocked reads the GPUs, maps their processes to workloads, and stops reclaimed
// work on GPUs that online work needs back: SIGTERM first, SIGKILL once its grace is over.
func (a *Agent) observeGPUsLocked(now time.Time) {
	devs, err := a.gpus.src.Devices()
	if err != nil {
		a.log.Warn("GPU read failed; those GPUs are not lent", "err", err)
	}
	owner := pgpu.OwnerByCgroup(a.pluginWorkloads(), func(pid int) (string, error) {
		return sysgpu.ProcessCgroup(a.procDir, pid)
	})
	a.gpus.tracker.Observe(now, devs, owner)
	for _, v := range a.gpus.tracker.Reclaim(now) {
		w, ok := a.workloads[v.Workload]
		switch {
		case !ok:
			a.gpus.tracker.Release(v.Workload)
		case !a.gpus.stopped[v.Workload]:
			a.gpus.stopped[v.Workload] = true
			a.actionLocked("evict", "gpu-reclaim", fmt.Sprintf("%s (priority %d): %s; SIGKILL at %s", v.Workload, v.ReclaimPriority, v.Reason, v.Deadline.Format(time.TimeOnly)))
			_, _ = a.writer.Signal(w.Cgroup, syscall.SIGTERM)
		case v.Overdue:
			_, _ = a.writer.Signal(w.Cgroup, syscall.SIGKILL)
			a.gpus.tracker.Release(v.Workload)
			delete(a.gpus.stopped, v.Workload)
		}
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

// gpuStatusLocked is the per-device view for status and metrics.
func (a *Agent) gpuStatusLocked() []reporter.GPU {
	var out []reporter.GPU
	for _, d := range a.gpus.tracker.States() {
		out = append(out, reporter.GPU{UUID: d.UUID, Index: d.Index, NUMANode: d.NUMANode,
			Lendable: d.Lendable, Reason: d.Reason, AssignedTo: d.AssignedTo})
	}
	return out
}
