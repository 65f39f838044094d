package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
)

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// AdmitRequest asks the agent to manage a process as a workload (`tidal run`).
type AdmitRequest struct {
	Name            string   `json:"name"`
	Tier            string   `json:"tier"`
	ReclaimPriority *int32   `json:"reclaimPriority,omitempty"`
	CPUs            int      `json:"cpus,omitempty"`
	NUMABinding     bool     `json:"numaBinding,omitempty"`
	MemoryBytes     int64    `json:"memoryBytes,omitempty"`
	GPUs            int      `json:"gpus,omitempty"`
	Queue           string   `json:"queue,omitempty"`
	PID             int      `json:"pid"`
	Command         []string `json:"command,omitempty"`
}

// requestError is a refusal the caller can fix; the API answers it with 4xx.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) error {
	return &requestError{status, fmt.Sprintf(format, args...)}
}

// Admit classifies the request with the qos function, reserves what it needs (dedicated
// cores), creates the workload's cgroup with its settings and only then moves the process in,
// so the command's first instruction already runs confined.
func (a *Agent) Admit(req AdmitRequest, peerPID int) (reporter.Workload, error) {
	if !validName.MatchString(req.Name) {
		return reporter.Workload{}, refuse(400, "name %q: want 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", req.Name)
	}
	if req.PID <= 0 {
		return reporter.Workload{}, refuse(400, "pid %d: want the process to manage", req.PID)
	}
	if peerPID > 0 && req.PID != peerPID && parentOf(a.procDir, req.PID) != peerPID {
		return reporter.Workload{}, refuse(403, "pid %d is neither the caller (%d) nor its child", req.PID, peerPID)
	}
	if req.CPUs < 0 || req.MemoryBytes < 0 || req.GPUs < 0 {
		return reporter.Workload{}, refuse(400, "cpus %d, memoryBytes %d, gpus %d: must not be negative", req.CPUs, req.MemoryBytes, req.GPUs)
	}
	if n := a.topo.AllCPUs().Size(); req.CPUs > n {
		return reporter.Workload{}, refuse(400, "cpus %d: this node has %d CPUs", req.CPUs, n)
	}
	if req.MemoryBytes > 0 && req.MemoryBytes < minWrittenMemory {
		return reporter.Workload{}, refuse(400, "memory %d bytes: want at least %dMiB", req.MemoryBytes, minWrittenMemory>>20)
	}
	tier, err := qos.ParseTier(req.Tier)
	if err != nil {
		return reporter.Workload{}, refuse(400, "%v", err)
	}
	if tier == qos.Dedicated && req.CPUs == 0 {
		return reporter.Workload{}, refuse(400, "tier dedicated needs --cpus N (whole cores of its own)")
	}
	if req.NUMABinding && tier != qos.Dedicated {
		return reporter.Workload{}, refuse(400, "--numa-binding applies to the dedicated tier only, not %s", tier)
	}
	if req.Queue != "" && (tier != qos.Reclaimed || !validName.MatchString(req.Queue)) {
		return reporter.Workload{}, refuse(400, "queue %q: only reclaimed work runs for a queue, named like a workload", req.Queue)
	}
	if req.GPUs > 0 && tier != qos.Dedicated && tier != qos.Reclaimed {
		return reporter.Workload{}, refuse(400, "--gpus applies to dedicated (own GPUs) and reclaimed (lent GPUs) work, not %s", tier)
	}
	// tidal run's flags become the annotations every other source uses, so one function decides.
	ann := map[string]string{qos.AnnotationQoSLevel: req.Tier}
	if req.NUMABinding {
		ann[qos.AnnotationNUMABinding] = "true"
	}
	if req.ReclaimPriority != nil {
		ann[qos.AnnotationReclaimPriority] = strconv.Itoa(int(*req.ReclaimPriority))
	}
	d := qos.Classify(qos.Metadata{Name: req.Name, Annotations: ann}, qos.Policy{})
	if len(d.Problems) > 0 {
		return reporter.Workload{}, refuse(400, "%v", errors.Join(d.Problems...))
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.workloads[req.Name]; dup {
		return reporter.Workload{}, refuse(409, "a workload named %q already runs; pick another --name", req.Name)
	}
	w := &workload{Workload: plugins.Workload{
		Name: req.Name, Tier: d.Tier, Cgroup: plugins.WorkloadPath(a.cfg.Cgroup.Root, d.Tier, req.Name),
		NUMABinding: d.NUMABinding, MemoryLimit: req.MemoryBytes, ReclaimPriority: d.ReclaimPriority, Queue: req.Queue,
		Started: time.Now(), DedicatedCPUs: cpuset.New(),
	}}
	switch d.Tier {
	case qos.Dedicated:
		taken := a.dedicatedCPUsLocked()
		if req.GPUs > 0 {
			node, uuids, ok := a.gpus.tracker.ForNUMA(req.GPUs)
			if !ok {
				return reporter.Workload{}, refuse(409, "cannot give %d GPUs on one NUMA node: no node has that many free of online use", req.GPUs)
			}
			// The tracker learns a GPU is online's once a process shows on it: until then,
			// refuse a GPU another dedicated workload was given.
			for _, other := range a.workloads {
				if other.Tier == qos.Dedicated && slices.ContainsFunc(other.GPUs, func(u string) bool { return slices.Contains(uuids, u) }) {
					return reporter.Workload{}, refuse(409, "the free GPUs on NUMA node %d (%v) include one given to %s; try again once it runs on it", node, uuids, other.Name)
				}
			}
			w.GPUs = uuids
			if req.NUMABinding {
				// Cores and memory on the GPUs' node: every other node's CPUs count as taken.
				taken = taken.Union(a.topo.AllCPUs().Difference(a.topo.CPUsOfNUMA(node)))
			}
		}
		cpus, _, err := cpu.Allocate(a.topo, a.cfg.CPU.ReservedSystemCPUs, taken, req.CPUs, req.NUMABinding)
		if err != nil {
			return reporter.Workload{}, refuse(409, "%v", err)
		}
		w.DedicatedCPUs = cpus
	case qos.Shared, qos.Reclaimed:
		w.MilliCPU = int64(req.CPUs) * 1000
	}
	if d.Tier == qos.Reclaimed && req.GPUs > 0 {
		uuids, err := a.gpus.tracker.Assign(pgpu.Request{Workload: w.Name, GPUs: req.GPUs, ReclaimPriority: w.ReclaimPriority})
		if err != nil {
			return reporter.Workload{}, refuse(409, "%v", err)
		}
		w.GPUs = uuids
	}
	a.workloads[w.Name] = w
	undo := func() {
		delete(a.workloads, w.Name)
		a.gpus.tracker.Release(w.Name)
		_ = a.writer.Remove(w.Cgroup)
	}
	if err := a.applyLocked(); err != nil {
		undo()
		_ = a.applyLocked()
		return reporter.Workload{}, fmt.Errorf("set up cgroup %s: %w", w.Cgroup, err)
	}
	if w.Tier == qos.Reclaimed {
		if err := a.writer.SetOOMScoreAdj(req.PID, memory.ReclaimedOOMScoreAdj); err != nil {
			a.log.Warn("cannot raise the OOM score of reclaimed work", "pid", req.PID, "err", err)
		}
	}
	if err := a.writer.Attach(w.Cgroup, req.PID); err != nil {
		undo()
		_ = a.applyLocked()
		return reporter.Workload{}, err
	}
	w.pids = []int{req.PID}
	a.saveLocked()
	a.actionLocked("admit", "admit", fmt.Sprintf("%s as %s (%s)%s", w.Name, w.Tier, strings.Join(req.Command, " "), describeCPUs(w.Workload)))
	a.publishLocked()
	return a.workloadStatusLocked(w), nil
}

func describeCPUs(w plugins.Workload) string {
	if w.DedicatedCPUs.IsEmpty() {
		return ""
	}
	return " on CPUs " + w.DedicatedCPUs.String()
}

// Release forgets a workload whose processes have exited and removes its cgroup. A workload
// that still has processes is kept; the slow loop removes it once it is empty.
func (a *Agent) Release(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.workloads[name]
	if !ok {
		return refuse(404, "no workload named %q", name)
	}
	if pids, err := a.layout.Procs(w.Cgroup, true); err == nil && len(pids) > 0 {
		return refuse(409, "workload %q still has processes %v; it is released when they exit", name, pids)
	}
	a.forgetLocked(w, "release", "exited")
	return nil
}

// forgetLocked drops a workload and its cgroup; what it lent goes back to the pools.
func (a *Agent) forgetLocked(w *workload, kind, why string) {
	delete(a.workloads, w.Name)
	a.gpus.tracker.Release(w.Name)
	if w.KubeletOwned {
		// The kubelet removes a pod's cgroup; tidal only stops tracking it.
		a.writer.ForgetPath(w.Cgroup)
	} else if err := a.writer.Remove(w.Cgroup); err != nil {
		a.log.Warn("cannot remove workload cgroup", "cgroup", w.Cgroup, "err", err)
	}
	a.saveLocked()
	a.actionLocked(kind, why, fmt.Sprintf("%s (%s): %s", w.Name, w.Tier, why))
	_ = a.applyLocked()
}

func (a *Agent) saveLocked() {
	if err := saveCheckpoint(a.cfg.StateDir, a.pluginWorkloads()); err != nil {
		a.log.Error("cannot write checkpoint", "dir", a.cfg.StateDir, "err", err)
	}
}

// restore rebuilds the registry after a start or restart from the checkpoint and the cgroups
// on disk: a workload is kept only while its cgroup has processes; a populated cgroup missing
// from the checkpoint is adopted (tier from its path, cores from its cpuset); empty ones go.
// Online workloads keep their cores, so nothing online moves.
func (a *Agent) restore() error {
	saved, err := loadCheckpoint(a.cfg.StateDir)
	if err != nil {
		a.log.Warn("ignoring checkpoint; rebuilding from cgroups on disk", "err", err)
	}
	byPath := map[string]plugins.Workload{}
	for _, w := range saved {
		byPath[w.Cgroup] = w
		// A pod's workload is kept while its cgroup is there, so its cores do not move; the
		// pod watch confirms or drops it once it has synced.
		if w.KubeletOwned && a.kube != nil && a.layout.Exists(w.Cgroup) {
			pids, _ := a.layout.Procs(w.Cgroup, true)
			a.workloads[w.Name] = &workload{Workload: w, pids: pids}
		}
	}
	for _, tier := range qos.AllTiers() {
		tierPath := plugins.TierPath(a.cfg.Cgroup.Root, tier)
		names, err := a.layout.Children(tierPath)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("read cgroup %s: %w", tierPath, err)
		}
		for _, name := range names {
			p := path.Join(tierPath, name)
			pids, err := a.layout.Procs(p, true)
			if err == nil && len(pids) == 0 {
				if err := a.writer.Remove(p); err != nil {
					a.log.Warn("cannot remove empty workload cgroup", "cgroup", p, "err", err)
				}
				continue
			}
			w, ok := byPath[p]
			if !ok {
				w = plugins.Workload{Name: name, Tier: tier, Cgroup: p, Started: time.Now(), DedicatedCPUs: cpuset.New()}
				if tier == qos.Dedicated {
					text, _ := a.layout.CPUs(p)
					w.DedicatedCPUs, _ = cpuset.Parse(text)
				}
				a.log.Warn("adopting a workload missing from the checkpoint", "cgroup", p, "pids", pids)
			}
			a.workloads[w.Name] = &workload{Workload: w, pids: pids}
			if w.Tier == qos.Reclaimed && len(w.GPUs) > 0 {
				if err := a.gpus.tracker.Adopt(w.Name, w.ReclaimPriority, w.GPUs); err != nil {
					a.log.Warn("cannot restore lent GPUs", "workload", w.Name, "err", err)
				}
			}
		}
	}
	a.saveLocked()
	if len(a.workloads) > 0 {
		a.log.Info("restored workloads", "count", len(a.workloads))
	}
	return nil
}

// parentOf reads a process's parent PID from /proc, 0 when unknown.
func parentOf(procDir string, pid int) int {
	data, err := os.ReadFile(path.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// comm may hold spaces and parentheses: the fields after the last ')' are fixed.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Teardown removes tidal's cgroup tree (workloads, tiers, root) once no process is left in it.
// The demo and tests call it after stopping the agent; a production agent leaves its tree.
func (a *Agent) Teardown() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, w := range a.workloads {
		if !w.KubeletOwned {
			errs = append(errs, a.writer.Remove(w.Cgroup))
		}
	}
	a.workloads = map[string]*workload{}
	for _, tier := range qos.AllTiers() {
		tierPath := plugins.TierPath(a.cfg.Cgroup.Root, tier)
		names, _ := a.layout.Children(tierPath)
		for _, n := range names {
			errs = append(errs, a.writer.Remove(path.Join(tierPath, n)))
		}
		errs = append(errs, a.writer.Remove(tierPath))
	}
	errs = append(errs, a.writer.Remove(a.cfg.Cgroup.Root))
	return errors.Join(errs...)
}
