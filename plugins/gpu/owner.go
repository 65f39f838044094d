package gpu

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// OwnerByCgroup builds an OwnerFunc from the managed workloads: a process belongs to the
// workload whose cgroup is the process's cgroup or its closest ancestor (a container's
// cgroup sits under its pod's). cgroupOf returns a PID's cgroup path relative to the
// cgroup root (sysadvisor/gpu.ProcessCgroup with "/proc"). A process that no longer
// exists is Gone; one whose cgroup cannot be read or matches no workload has no owner,
// which blocks lending of its GPU.
func OwnerByCgroup(workloads []plugins.Workload, cgroupOf func(pid int) (string, error)) OwnerFunc {
	byPath := make(map[string]plugins.Workload, len(workloads))
	for _, w := range workloads {
		if p := strings.Trim(w.Cgroup, "/"); p != "" {
			byPath[p] = w
		}
	}
	return func(pid int) Owner {
		cg, err := cgroupOf(pid)
		if errors.Is(err, fs.ErrNotExist) {
			return Owner{Gone: true}
		}
		if err != nil {
			return Owner{}
		}
		for p := strings.Trim(cg, "/"); p != ""; {
			if w, ok := byPath[p]; ok {
				return Owner{Workload: w.Name, Online: w.Tier != qos.Reclaimed, ReclaimPriority: w.ReclaimPriority}
			}
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
		}
		return Owner{}
	}
}
