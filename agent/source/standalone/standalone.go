// Package standalone is the workload source of a plain Linux host: `tidal run` asks the agent
// over its local API to manage a process, and the source collects workloads whose processes
// have all exited.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Name is the source's name in records and actions.
const Name = "standalone"

// MinMemory is the least --memory a workload may ask for: 0 would mean "leave the limit as
// it is", and a few MiB keeps the kernel's own allocations possible.
const MinMemory = 4 << 20

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// AdmitRequest asks the agent to manage a process as a workload (`tidal run`).
type AdmitRequest struct {
	Name            string `json:"name"`
	Tier            string `json:"tier"`
	ReclaimPriority *int32 `json:"reclaimPriority,omitempty"`
	CPUs            int    `json:"cpus,omitempty"`
	NUMABinding     bool   `json:"numaBinding,omitempty"`
	MemoryBytes     int64  `json:"memoryBytes,omitempty"`
	GPUs            int    `json:"gpus,omitempty"`
	Queue           string `json:"queue,omitempty"`
	// SLOProbe or SLOMetric (with SLOQuantile), and SLOLatency, give an online workload's own
	// latency signal: a probe (an http:// or redis:// URL, qos.AnnotationSLOProbe) or a
	// histogram it exports (qos.AnnotationSLOMetric), and a duration such as "20ms", as the
	// tidalqos.io/slo-* annotations do for pods.
	SLOProbe    string `json:"sloProbe,omitempty"`
	SLOMetric   string `json:"sloMetric,omitempty"`
	SLOQuantile string `json:"sloQuantile,omitempty"`
	SLOLatency  string `json:"sloLatency,omitempty"`
	// CPUBurstPercent is --cpu-burst-percent (issue 12): a percentage of --cpus.
	CPUBurstPercent *int32   `json:"cpuBurstPercent,omitempty"`
	PID             int      `json:"pid"`
	Command         []string `json:"command,omitempty"`
}

// RequestError is a refusal the caller can fix; the API answers it with its Status.
type RequestError struct {
	Status int
	Msg    string
}

func (e *RequestError) Error() string { return e.Msg }

func refuse(status int, format string, args ...any) error {
	return &RequestError{status, fmt.Sprintf(format, args...)}
}

// Cgroups is what the source does to cgroups and processes itself.
type Cgroups interface {
	// Attach moves a process into a cgroup.
	Attach(cgroup string, pid int) error
	// SetOOMScoreAdj sets a process's OOM score adjustment.
	SetOOMScoreAdj(pid, score int) error
	// Procs lists a cgroup's processes (and its children's).
	Procs(cgroup string) ([]int, error)
}

// Options configure the source.
type Options struct {
	Node source.Node
	// Root is tidal's cgroup root ("tidal"): workloads live at Root/<tier>/<name>.
	Root string
	// CPUs is how many CPUs the node has.
	CPUs    int
	Cgroups Cgroups
	// OOMScoreAdj is what the decision function gives a workload's processes (0: leave).
	OOMScoreAdj func(plugins.Workload) int
	// ProcDir is /proc (a test's folder in unit tests).
	ProcDir string
	// Interval is how often exited workloads are collected.
	Interval time.Duration
	Log      *slog.Logger
}

// Source is the standalone workload source.
type Source struct {
	opts Options

	// admitting names the workloads Admit has registered and not yet moved a process into:
	// the collector must not take their empty cgroups for exited work.
	mu sync.Mutex
	// (A count: two requests may race for one name, and the loser must not unmark it.)
	admitting map[string]int
}

// New returns the source.
func New(opts Options) *Source { return &Source{opts: opts, admitting: map[string]int{}} }

func (s *Source) setAdmitting(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.admitting[name]++
	} else if s.admitting[name]--; s.admitting[name] <= 0 {
		delete(s.admitting, name)
	}
}

func (s *Source) isAdmitting(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admitting[name] > 0
}

// Name implements source.Source.
func (s *Source) Name() string { return Name }

// Run collects workloads whose processes are all gone, every interval.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.collectExited()
		}
	}
}

// collectExited forgets this source's workloads whose processes are all gone: the slow
// loop's last sample found none, and neither does a look at the cgroup now (the sample may
// predate the process).
func (s *Source) collectExited() {
	for _, r := range s.opts.Node.Snapshot().Workloads {
		if r.Source != Name || len(r.PIDs) > 0 || time.Since(r.Started) <= time.Second || s.isAdmitting(r.Name) {
			continue
		}
		if pids, err := s.opts.Cgroups.Procs(r.Cgroup); err == nil && len(pids) > 0 {
			continue
		}
		why := "exited"
		if r.Evicting {
			why = "evicted"
		}
		s.opts.Node.Remove(r.Name, why)
	}
}

// Admit classifies the request with the qos function, has the node state allocate what it
// needs (dedicated cores, GPUs) and write the workload's cgroup with its settings, and only
// then moves the process in, so the command's first instruction already runs confined.
// peerPID is the caller's process (0: unknown): it may manage itself or its child only.
func (s *Source) Admit(req AdmitRequest, peerPID int) (state.Record, error) {
	spec, err := s.spec(req, peerPID)
	if err != nil {
		return state.Record{}, err
	}
	spec.Origin = strings.Join(req.Command, " ")
	// Registering can take a while (a full pass); until the process is in, the workload's
	// cgroup is empty and must not be collected as exited.
	s.setAdmitting(spec.Name, true)
	defer s.setAdmitting(spec.Name, false)
	rec, err := s.opts.Node.Add(spec)
	var cannot *state.AllocationError
	switch {
	case errors.Is(err, state.ErrExists):
		return state.Record{}, refuse(409, "a workload named %q already runs; pick another --name", req.Name)
	case errors.As(err, &cannot):
		return state.Record{}, refuse(409, "%v", err)
	case errors.Is(err, syscall.ENOTDIR):
		// Its cgroup's path is a file: one the kernel keeps in every cgroup folder (tasks,
		// cpu.shares, cgroup.procs).
		return state.Record{}, cgroupFileRefusal(req.Name)
	case err != nil:
		return state.Record{}, err
	}
	if adj := s.opts.OOMScoreAdj(rec.Workload); adj != 0 {
		if err := s.opts.Cgroups.SetOOMScoreAdj(req.PID, adj); err != nil {
			s.opts.Log.Warn("cannot raise the OOM score of reclaimed work", "pid", req.PID, "err", err)
		}
	}
	if err := s.opts.Cgroups.Attach(rec.Cgroup, req.PID); err != nil {
		s.opts.Node.Remove(rec.Name, "could not attach its process")
		return state.Record{}, err
	}
	rec.PIDs = []int{req.PID}
	if err := s.opts.Node.Save(); err != nil {
		s.opts.Log.Error("cannot write checkpoint", "err", err)
	}
	return rec, nil
}

// spec validates a request and turns it into what the node state is asked for.
func (s *Source) spec(req AdmitRequest, peerPID int) (state.Spec, error) {
	if !validName.MatchString(req.Name) {
		return state.Spec{}, refuse(400, "name %q: want 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", req.Name)
	}
	if cgroupFileName(req.Name) {
		return state.Spec{}, cgroupFileRefusal(req.Name)
	}
	if req.PID <= 0 {
		return state.Spec{}, refuse(400, "pid %d: want the process to manage", req.PID)
	}
	if peerPID > 0 && req.PID != peerPID && parentOf(s.opts.ProcDir, req.PID) != peerPID {
		return state.Spec{}, refuse(403, "pid %d is neither the caller (%d) nor its child", req.PID, peerPID)
	}
	if req.CPUs < 0 || req.MemoryBytes < 0 || req.GPUs < 0 {
		return state.Spec{}, refuse(400, "cpus %d, memoryBytes %d, gpus %d: must not be negative", req.CPUs, req.MemoryBytes, req.GPUs)
	}
	if req.CPUs > s.opts.CPUs {
		return state.Spec{}, refuse(400, "cpus %d: this node has %d CPUs", req.CPUs, s.opts.CPUs)
	}
	if req.MemoryBytes > 0 && req.MemoryBytes < MinMemory {
		return state.Spec{}, refuse(400, "memory %d bytes: want at least %dMiB", req.MemoryBytes, MinMemory>>20)
	}
	tier, err := qos.ParseTier(req.Tier)
	if err != nil {
		return state.Spec{}, refuse(400, "%v", err)
	}
	if tier == qos.Dedicated && req.CPUs == 0 {
		return state.Spec{}, refuse(400, "tier dedicated needs --cpus N (whole cores of its own)")
	}
	if req.NUMABinding && tier != qos.Dedicated {
		return state.Spec{}, refuse(400, "--numa-binding applies to the dedicated tier only, not %s", tier)
	}
	if req.Queue != "" && (tier != qos.Reclaimed || !validName.MatchString(req.Queue)) {
		return state.Spec{}, refuse(400, "queue %q: only reclaimed work runs for a queue, named like a workload", req.Queue)
	}
	if req.GPUs > 0 && tier != qos.Dedicated && tier != qos.Reclaimed {
		return state.Spec{}, refuse(400, "--gpus applies to dedicated (own GPUs) and reclaimed (lent GPUs) work, not %s", tier)
	}
	// A burst is a share of a CPU cap: without one it would do nothing (0, none, says so).
	if req.CPUBurstPercent != nil && *req.CPUBurstPercent != 0 {
		const what = "--cpu-burst-percent %d: a burst is a share of the CPU cap --cpus sets on shared and system work; "
		switch {
		case tier == qos.Dedicated:
			return state.Spec{}, refuse(400, what+"dedicated work has whole cores of its own and no cap", *req.CPUBurstPercent)
		case tier != qos.Reclaimed && req.CPUs == 0: // reclaimed work: the classifier's refusal
			return state.Spec{}, refuse(400, what+"give --cpus N with it", *req.CPUBurstPercent)
		}
	}
	// tidal run's flags become the annotations every other source uses, so one function decides.
	ann := map[string]string{qos.AnnotationQoSLevel: req.Tier}
	if req.NUMABinding {
		ann[qos.AnnotationNUMABinding] = "true"
	}
	if req.ReclaimPriority != nil {
		ann[qos.AnnotationReclaimPriority] = strconv.Itoa(int(*req.ReclaimPriority))
	}
	if req.SLOProbe != "" {
		ann[qos.AnnotationSLOProbe] = req.SLOProbe
	}
	if req.SLOMetric != "" {
		ann[qos.AnnotationSLOMetric] = req.SLOMetric
	}
	if req.SLOQuantile != "" {
		ann[qos.AnnotationSLOQuantile] = req.SLOQuantile
	}
	if req.SLOLatency != "" {
		ann[qos.AnnotationSLOLatency] = req.SLOLatency
	}
	if req.CPUBurstPercent != nil {
		ann[qos.AnnotationCPUBurstPercent] = strconv.Itoa(int(*req.CPUBurstPercent))
	}
	d := qos.Classify(qos.Metadata{Name: req.Name, Annotations: ann}, qos.Policy{})
	if len(d.Problems) > 0 {
		return state.Spec{}, refuse(400, "%s", flagProblems(d.Problems))
	}
	spec := state.Spec{Source: Name, GPUs: req.GPUs, Workload: plugins.Workload{
		Name: req.Name, Tier: d.Tier, Cgroup: plugins.WorkloadPath(s.opts.Root, d.Tier, req.Name), Owner: plugins.OwnerTidal,
		NUMABinding: d.NUMABinding, MemoryLimit: req.MemoryBytes, ReclaimPriority: d.ReclaimPriority, Queue: req.Queue, SLO: d.SLO,
		Started: time.Now(), CPUBurstPercent: d.CPUBurstPercent,
	}}
	switch d.Tier {
	case qos.Dedicated:
		spec.WholeCores = req.CPUs
	case qos.Shared, qos.Reclaimed:
		spec.MilliCPU = int64(req.CPUs) * 1000
	}
	return spec, nil
}

// controllers prefix the files a controller keeps in every cgroup folder (cpu.shares, io.max).
var controllers = []string{"cgroup", "cpu", "cpuacct", "cpuset", "memory", "blkio", "io", "pids", "hugetlb",
	"net_cls", "net_prio", "devices", "freezer", "perf_event", "rdma", "misc", "dmem"}

// cgroupFileName says whether name is, or looks like, a file the kernel keeps in every cgroup
// folder (v1's tasks, a controller's cpu.shares, v2's cgroup.procs): no workload's cgroup can
// be made there, and on v1 it would fail in some hierarchies after others had made it.
// Those files never hold a '-', which tidal run's default names always do.
func cgroupFileName(name string) bool {
	switch name {
	case "tasks", "notify_on_release", "release_agent":
		return true
	}
	prefix, _, dotted := strings.Cut(name, ".")
	return dotted && !strings.Contains(name, "-") && slices.Contains(controllers, prefix)
}

func cgroupFileRefusal(name string) error {
	return refuse(400, "name %q: the cgroup file system keeps a file of that name in every cgroup; pick another --name", name)
}

// flags are tidal run's flags for the annotations spec turns them into.
var flags = strings.NewReplacer(qos.AnnotationQoSLevel, "--tier", qos.AnnotationNUMABinding, "--numa-binding",
	qos.AnnotationReclaimPriority, "--reclaim-priority", qos.AnnotationSLOProbe, "--slo-probe",
	qos.AnnotationSLOMetric, "--slo-metric", qos.AnnotationSLOQuantile, "--slo-quantile",
	qos.AnnotationSLOLatency, "--slo-latency", qos.AnnotationCPUBurstPercent, "--cpu-burst-percent")

// flagProblems says what is wrong with a request in tidal run's terms: its flags, not the
// annotations they stand for, and without the fallback a pod would get, since the request
// is refused instead.
func flagProblems(problems []error) string {
	var out []string
	for _, err := range problems {
		var p *qos.Problem
		if !errors.As(err, &p) {
			out = append(out, err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s %s: %s", flags.Replace(p.Key), p.Value, flags.Replace(p.Reason)))
	}
	return strings.Join(out, "\n")
}

// Release forgets a workload whose processes have exited. One that still has processes is
// kept; the source collects it once it is empty.
func (s *Source) Release(name string) error {
	r, ok := s.opts.Node.Get(name)
	if !ok {
		return refuse(404, "no workload named %q", name)
	}
	if pids, err := s.opts.Cgroups.Procs(r.Cgroup); err == nil && len(pids) > 0 {
		s.opts.Node.Processes(name, pids) // the caller's own process is gone from them
		return refuse(409, "workload %q still has processes %v; it is released when they exit", name, pids)
	}
	s.opts.Node.Remove(name, "exited")
	return nil
}

// parentOf reads a process's parent PID from /proc, 0 when unknown.
func parentOf(procDir string, pid int) int {
	data, err := os.ReadFile(path.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// comm may hold spaces and parentheses: the fields after the last ')' are fixed.
	st := string(data)
	i := strings.LastIndexByte(st, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(st[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
