// Package state is the node state in one place, in the shape of kubelet's cpumanager state:
// the registry of managed workloads, the one allocator of dedicated cores and GPUs, and the
// checkpoint that survives a restart. Readers get immutable snapshots; the checkpoint is
// written by its own goroutine from a snapshot, never under the lock, so a source's update
// or the fast path never waits on an fsync.
package state

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Record is the registry's entry for one workload: the shared model plus what the loops
// observed of it and where an eviction stands.
type Record struct {
	plugins.Workload
	// Source names the workload source that reported it last (standalone, kubernetes,
	// runtime): it decides which evictor stops it.
	Source string
	// Children are the workload's child cgroups (a pod's containers), for writes that
	// cgroup v1 needs on every level (a narrowed cpuset).
	Children []string

	PIDs         []int
	UsedMilliCPU int64 // CPU rate over the last sample (its own cap is Workload.MilliCPU)
	cpuPrev      time.Duration
	cpuAt        time.Time

	Evicting bool
	// RefusedUntil: the last eviction was refused (a PodDisruptionBudget); the next victim
	// is tried meanwhile.
	RefusedUntil time.Time
}

// Sampled says whether the loops have read the workload's usage yet.
func (r Record) Sampled() bool { return !r.cpuAt.IsZero() }

// Snapshot is the registry at one moment. Nothing in it changes afterwards: the slices are
// copies, so readers need no lock.
type Snapshot struct {
	// Workloads sorted by cgroup path.
	Workloads []Record
	// Dedicated are the cores owned by dedicated workloads and pinned pods.
	Dedicated cpuset.CPUSet
	// Generation grows with every change of the registry.
	Generation uint64
}

// Get finds a workload by name.
func (s Snapshot) Get(name string) (Record, bool) {
	for _, r := range s.Workloads {
		if r.Name == name {
			return r, true
		}
	}
	return Record{}, false
}

// ByCgroup finds a workload by its cgroup path.
func (s Snapshot) ByCgroup(cgroup string) (Record, bool) {
	i, ok := slices.BinarySearchFunc(s.Workloads, cgroup, func(r Record, c string) int { return cmp.Compare(r.Cgroup, c) })
	if !ok {
		return Record{}, false
	}
	return s.Workloads[i], true
}

// Plugins are the workloads as plugins see them.
func (s Snapshot) Plugins() []plugins.Workload {
	out := make([]plugins.Workload, len(s.Workloads))
	for i, r := range s.Workloads {
		out[i] = r.Workload
	}
	return out
}

// Spec is what a source asks for a workload. Put turns it into a Record, allocating what it
// needs; an update keeps what the workload already holds.
type Spec struct {
	plugins.Workload
	Source string
	// Origin says where its tier came from (an annotation, a command line), for the action log.
	Origin string
	// WholeCores is how many whole cores a dedicated workload needs, allocated by the
	// store (0 when DedicatedCPUs is given: cores someone else pinned).
	WholeCores int
	// GPUs is how many GPUs it needs: lent ones (reclaimed) or its own (dedicated).
	GPUs int
	// Children as in Record (nil keeps the ones known).
	Children []string
	// Terminating: its owner is stopping it already (a pod being deleted), so it is no
	// victim to pick.
	Terminating bool
}

// Usage is one sample of a workload, taken outside the lock and recorded with Observe.
type Usage struct {
	PIDs        []int // nil: unknown, keep the last list
	Gone        bool  // the cgroup has no process (or is gone)
	CPU         time.Duration
	HaveCPU     bool
	MemoryBytes int64
	HaveMemory  bool
}

// Store holds the node state. It is safe for concurrent use; every method is short and does
// no I/O (the checkpoint has its own goroutine).
type Store struct {
	alloc *Allocator

	mu        sync.Mutex
	workloads map[string]*Record
	// order is workloads sorted by cgroup, as snapshots list them; nil when one was added
	// or removed since (snapshots are taken several times a second, workloads change rarely).
	order      []*Record
	generation uint64
	saved      *checkpointer
}

// NewStore returns an empty store whose checkpoint lives in dir.
func NewStore(alloc *Allocator, dir string) *Store {
	return &Store{alloc: alloc, workloads: map[string]*Record{}, saved: newCheckpointer(dir)}
}

// Allocator is the store's allocator of cores and GPUs.
func (s *Store) Allocator() *Allocator { return s.alloc }

// AllocationError is an allocation the node cannot meet: too few free cores or GPUs.
type AllocationError struct{ Err error }

func (e *AllocationError) Error() string { return e.Err.Error() }
func (e *AllocationError) Unwrap() error { return e.Err }

// ErrExists is returned by Add for a name already in use.
var ErrExists = errors.New("a workload of that name exists")

// Add registers a new workload, allocating its cores and GPUs. It fails without changing
// anything when the name is taken or the allocation cannot be met.
func (s *Store) Add(spec Spec) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.workloads[spec.Name]; dup {
		return Record{}, fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	return s.putLocked(spec, nil)
}

// Put adds a workload or updates the one of the same name: a workload that stays dedicated
// keeps its cores, and what the loops observed carries over. A replaced workload (its UID
// changed) starts afresh. On an allocation error nothing changes.
func (s *Store) Put(spec Spec) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.workloads[spec.Name]
	if old != nil && old.UID != spec.UID {
		s.dropLocked(old)
		old = nil
	}
	return s.putLocked(spec, old)
}

func (s *Store) putLocked(spec Spec, old *Record) (Record, error) {
	r := &Record{Workload: spec.Workload, Source: spec.Source, Children: spec.Children, Evicting: spec.Terminating}
	if r.DedicatedCPUs.IsEmpty() {
		r.DedicatedCPUs = cpuset.New()
	}
	if old != nil {
		r.PIDs, r.UsedMilliCPU, r.cpuPrev, r.cpuAt = old.PIDs, old.UsedMilliCPU, old.cpuPrev, old.cpuAt
		r.MemoryUsage, r.RefusedUntil = old.MemoryUsage, old.RefusedUntil
		r.Evicting = r.Evicting || old.Evicting
		if r.Children == nil {
			r.Children = old.Children
		}
		if r.GPUs == nil && spec.GPUs > 0 {
			r.GPUs = old.GPUs
		}
	}
	if err := s.allocateLocked(r, spec, old); err != nil {
		return Record{}, err
	}
	s.workloads[r.Name] = r
	s.order = nil
	s.changedLocked()
	return r.copy(), nil
}

// allocateLocked gives a dedicated workload its cores (its old ones when it keeps them) and
// any workload the GPUs it asks for.
func (s *Store) allocateLocked(r *Record, spec Spec, old *Record) error {
	if r.Tier == qos.Dedicated && spec.WholeCores > 0 && r.DedicatedCPUs.IsEmpty() {
		if old != nil && old.Tier == qos.Dedicated && old.Owner.OwnsCPUSets() && !old.DedicatedCPUs.IsEmpty() {
			r.DedicatedCPUs = old.DedicatedCPUs
		} else {
			taken := s.dedicatedLocked()
			if old != nil {
				taken = taken.Difference(old.DedicatedCPUs)
			}
			cpus, gpus, err := s.alloc.Dedicated(taken, spec.WholeCores, r.NUMABinding, spec.GPUs, s.dedicatedGPUsLocked(r.Name))
			if err != nil {
				return &AllocationError{err}
			}
			r.DedicatedCPUs, r.GPUs = cpus, gpus
		}
	}
	if r.Tier == qos.Reclaimed && spec.GPUs > 0 && len(r.GPUs) == 0 {
		uuids, err := s.alloc.LendGPUs(r.Name, spec.GPUs, r.ReclaimPriority)
		if err != nil {
			return &AllocationError{err}
		}
		r.GPUs = uuids
	}
	return nil
}

// Adopt registers workloads found at start (checkpoint, cgroups on disk) as they are, with
// no allocation: their cores are theirs already. It returns the lent GPUs it could not give
// back to their workloads (GPUs not seen yet, or held by another).
func (s *Store) Adopt(rs []Record) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, r := range rs {
		r := r.copy()
		if r.DedicatedCPUs.IsEmpty() {
			r.DedicatedCPUs = cpuset.New()
		}
		s.workloads[r.Name] = &r
		s.order = nil
		if r.Tier == qos.Reclaimed && len(r.GPUs) > 0 {
			if err := s.alloc.gpus.Adopt(r.Name, r.ReclaimPriority, r.GPUs); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.changedLocked()
	return errs
}

// Remove forgets a workload and gives back what it held. It reports whether it was there.
func (s *Store) Remove(name string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.workloads[name]
	if !ok {
		return Record{}, false
	}
	s.dropLocked(r)
	s.changedLocked()
	return r.copy(), true
}

// RemoveIf forgets a workload only if it is still the one with uid, so a late goroutine does
// not drop a workload that replaced it.
func (s *Store) RemoveIf(name, uid string, started time.Time) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.workloads[name]
	if !ok || r.UID != uid || !r.Started.Equal(started) {
		return Record{}, false
	}
	s.dropLocked(r)
	s.changedLocked()
	return r.copy(), true
}

func (s *Store) dropLocked(r *Record) {
	delete(s.workloads, r.Name)
	s.order = nil
	s.alloc.gpus.Release(r.Name)
}

// Observe records a sample of a workload's processes and usage.
func (s *Store) Observe(name string, now time.Time, u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.workloads[name]
	if !ok {
		return
	}
	switch {
	case u.Gone:
		r.PIDs = nil
	case u.PIDs != nil:
		r.PIDs = u.PIDs
	}
	if u.HaveCPU {
		switch {
		case !r.cpuAt.IsZero():
			r.UsedMilliCPU = Milli(u.CPU-r.cpuPrev, now.Sub(r.cpuAt))
		case !r.Started.IsZero() && now.After(r.Started):
			// The first sample: the average since it started, rather than nothing.
			r.UsedMilliCPU = Milli(u.CPU, now.Sub(r.Started))
		}
		r.cpuPrev, r.cpuAt = u.CPU, now
	}
	if u.HaveMemory {
		r.MemoryUsage = u.MemoryBytes
	}
}

// SetChildren records a workload's child cgroups.
func (s *Store) SetChildren(name string, children []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.workloads[name]; ok && !slices.Equal(r.Children, children) {
		r.Children = children
		s.generation++ // not checkpointed: read again from disk at start
	}
}

// SetEvicting marks where a workload's eviction stands: evicting, or refused until a time.
// It reports false when the workload is gone or (evicting=true) already being evicted.
func (s *Store) SetEvicting(name string, evicting bool, refusedUntil time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.workloads[name]
	if !ok || (evicting && r.Evicting) {
		return false
	}
	r.Evicting, r.RefusedUntil = evicting, refusedUntil
	s.generation++
	return true
}

// Get returns one workload as it is now, without copying the rest of the registry.
func (s *Store) Get(name string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.workloads[name]
	if !ok {
		return Record{}, false
	}
	return r.copy(), true
}

// Snapshot returns the registry as it is now.
func (s *Store) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Store) snapshotLocked() Snapshot {
	out := Snapshot{Workloads: make([]Record, 0, len(s.workloads)), Dedicated: s.dedicatedLocked(), Generation: s.generation}
	for _, r := range s.sortedLocked() {
		out.Workloads = append(out.Workloads, r.copy())
	}
	return out
}

// sortedLocked is the workloads sorted by cgroup.
func (s *Store) sortedLocked() []*Record {
	if s.order == nil {
		s.order = make([]*Record, 0, len(s.workloads))
		for _, r := range s.workloads {
			s.order = append(s.order, r)
		}
		slices.SortFunc(s.order, func(a, b *Record) int { return cmp.Compare(a.Cgroup, b.Cgroup) })
	}
	return s.order
}

// dedicatedLocked are all cores owned by dedicated workloads or pinned by the kubelet.
func (s *Store) dedicatedLocked() cpuset.CPUSet {
	all := cpuset.New()
	for _, r := range s.workloads {
		if !r.DedicatedCPUs.IsEmpty() { // Union makes a new set each time
			all = all.Union(r.DedicatedCPUs)
		}
	}
	return all
}

// dedicatedGPUsLocked are the GPUs dedicated workloads other than name were given.
func (s *Store) dedicatedGPUsLocked(name string) map[string]string {
	out := map[string]string{}
	for _, r := range s.workloads {
		if r.Tier == qos.Dedicated && r.Name != name {
			for _, u := range r.GPUs {
				out[u] = r.Name
			}
		}
	}
	return out
}

// changedLocked bumps the generation and asks the checkpointer to write it.
func (s *Store) changedLocked() {
	s.generation++
	s.saved.want(s.generation, s.snapshotLocked().Plugins())
}

func (r *Record) copy() Record {
	c := *r
	c.PIDs = slices.Clone(r.PIDs)
	c.Children = slices.Clone(r.Children)
	c.GPUs = slices.Clone(r.GPUs)
	c.GPUMinors = slices.Clone(r.GPUMinors)
	return c
}

// Milli is a CPU rate in millicores: d of CPU time over elapsed.
func Milli(d, elapsed time.Duration) int64 {
	if elapsed <= 0 || d < 0 {
		return 0
	}
	return int64(float64(d) / float64(elapsed) * 1000)
}
