// Package isolation is the only code that writes cgroups. Every write goes through Writer,
// which writes a knob only when its value changes, orders cpuset and quota changes so the
// kernel accepts them (widen parents first, narrow children first), counts every write and
// logs it at debug level.
package isolation

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// Writer applies desired cgroup settings. It is safe for concurrent use; writes are serialized.
type Writer struct {
	layout  *cgroupfs.Layout
	procDir string
	log     *slog.Logger

	mu      sync.Mutex
	backend backend
	// known holds the last value written or read for each cgroup and knob, so unchanged
	// values cost no system call. Forget drops it to re-check the files (drift repair).
	known map[string]map[knob]string
	// written is the last value tidal wrote to each cgroup's knob; unlike known it survives
	// Forget, so a re-read that finds something else is drift someone else made.
	written map[string]map[knob]string
	writes  [numKnobs]uint64
	errs    [numKnobs]uint64
	repairs [numKnobs]uint64
	// absent are optional knobs the kernel has no file for: skipped from then on, said once.
	absent [numKnobs]bool
	// applied is the last desired tree Apply brought every cgroup to without an error, while
	// nothing since made what is remembered doubtful (Forget, Remove, a failed write): an
	// Apply of the same tree has nothing to read or write and returns at once, and one that
	// differs only goes through the cgroups that changed. nil when unknown.
	applied []plugins.Cgroup
	// recheck are the cgroups Recheck forgot since the last Apply: that Apply goes through
	// them, re-reading their files, even where the tree is unchanged.
	recheck map[string]bool
	// urgent counts ApplyUrgent calls waiting for mu: a long Apply stops between two cgroups
	// and hands them the lock (ErrPreempted).
	urgent atomic.Int32
	// pause waits between the tries of a cgroup removal (time.Sleep; a test holds it).
	pause func(time.Duration)
}

// ErrPreempted is an Apply that stopped part way so that an urgent write (the fast path
// taking CPU back from reclaimed work) need not wait for hundreds of cgroups. What it wrote
// is valid for the kernel; the rest waits for the next Apply.
var ErrPreempted = errors.New("cgroup pass preempted by an urgent write")

// errAbsent is an optional knob's file missing from a cgroup that exists: the kernel lacks it.
var errAbsent = errors.New("the kernel has no such file")

// NewWriter returns a Writer for the hierarchies in layout.
func NewWriter(layout *cgroupfs.Layout, log *slog.Logger) (*Writer, error) {
	b, err := newBackend(layout)
	if err != nil {
		return nil, err
	}
	return &Writer{
		layout:  layout,
		procDir: "/proc",
		log:     log,
		backend: b,
		pause:   time.Sleep,
		known:   map[string]map[knob]string{},
		written: map[string]map[knob]string{},
	}, nil
}

// Layout is the cgroup layout this writer works on.
func (w *Writer) Layout() *cgroupfs.Layout { return w.layout }

// SupportsIdle says whether the kernel offers cpu.idle (Linux 5.15+), the lowest CPU priority.
func (w *Writer) SupportsIdle() bool {
	if w.layout.Version == cgroupfs.V2 {
		// The root of a unified hierarchy has no cpu.idle file; only children do.
		return kernelAtLeast(5, 15)
	}
	_, err := os.Stat(filepath.Join(w.layout.Dir("cpu", ""), "cpu.idle"))
	return err == nil
}

// Apply brings every cgroup in desired to its settings, creating missing cgroups. It writes
// only knobs whose value differs, widens cpusets and raises quotas parent-first, then narrows
// them child-first, so each write is valid for the kernel at the time it is made. It keeps
// going after an error and returns all of them.
func (w *Writer) Apply(desired []plugins.Cgroup) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applyTreeLocked(desired, true)
}

// ApplyUrgent is Apply for a write that must not wait: an Apply in progress stops at its next
// cgroup (returning ErrPreempted) and this one goes first. It is never preempted itself.
func (w *Writer) ApplyUrgent(desired []plugins.Cgroup) error {
	w.urgent.Add(1)
	w.mu.Lock()
	w.urgent.Add(-1)
	defer w.mu.Unlock()
	return w.applyTreeLocked(desired, false)
}

func (w *Writer) applyTreeLocked(desired []plugins.Cgroup, preemptible bool) error {
	if w.applied != nil && len(w.recheck) == 0 && sameTree(w.applied, desired) {
		// The slow loop's steady state: the same tree every pass, already in place.
		return nil
	}
	todo := desired
	if w.applied != nil && cacheable(desired) {
		// Only what changed or is to be re-read: a cgroup whose settings are those it was
		// last brought to has nothing to widen, narrow or write (one limit moving must not
		// cost 200 cgroups).
		todo = changedCgroups(w.applied, desired, w.recheck)
	}
	// A recheck this Apply does not finish is not lost: what was remembered of those cgroups
	// is gone, and a failed or preempted Apply leaves applied nil, so the next goes through
	// the whole tree.
	w.recheck = nil
	w.applied = nil
	err := w.applyLocked(todo, preemptible)
	if err == nil && cacheable(desired) {
		w.applied = cloneTree(desired)
	}
	return err
}

// changedCgroups are the cgroups of desired not in applied with the same settings, and those
// in recheck.
func changedCgroups(applied, desired []plugins.Cgroup, recheck map[string]bool) []plugins.Cgroup {
	was := make(map[string]*plugins.Cgroup, len(applied))
	for i := range applied {
		was[applied[i].Path] = &applied[i]
	}
	var out []plugins.Cgroup
	for _, c := range desired {
		if old, ok := was[c.Path]; ok && !recheck[c.Path] && old.Foreign == c.Foreign && reflect.DeepEqual(old.Settings, c.Settings) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// cacheable says whether an unchanged tree may skip the next Apply: not when a cgroup is
// someone else's (it may come and go between passes, and is checked each time) or has its
// burst sized on a quota someone else sets.
func cacheable(desired []plugins.Cgroup) bool {
	for _, c := range desired {
		if c.Foreign || c.Settings.CPUBurstPercent != 0 {
			return false
		}
	}
	return true
}

// sameTree reports whether two desired trees are the same, in the same order.
func sameTree(x, y []plugins.Cgroup) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Path != y[i].Path || x[i].Foreign != y[i].Foreign || !reflect.DeepEqual(x[i].Settings, y[i].Settings) {
			return false
		}
	}
	return true
}

// cloneTree copies a desired tree, so a caller changing its slice later changes nothing here.
func cloneTree(desired []plugins.Cgroup) []plugins.Cgroup {
	out := slices.Clone(desired)
	for i := range out {
		out[i].Settings.Devices = slices.Clone(out[i].Settings.Devices)
	}
	return out
}

func (w *Writer) applyLocked(desired []plugins.Cgroup, preemptible bool) error {
	preempted := func() bool { return preemptible && w.urgent.Load() > 0 }
	nodes := append([]plugins.Cgroup(nil), desired...)
	sort.SliceStable(nodes, func(i, j int) bool { return depth(nodes[i].Path) < depth(nodes[j].Path) })
	wants := make([]map[knob]string, len(nodes))
	var errs []error
	nodeErrs := make([][]error, len(nodes))
	fail := func(i int, err error) {
		if err != nil {
			nodeErrs[i] = append(nodeErrs[i], err)
		}
	}
	for i, n := range nodes {
		if n.Foreign {
			// Someone else's cgroup (a pod's): written while it exists, never created. One
			// that is gone (a pod that just ended) is not an error.
			if !w.layout.Exists(n.Path) {
				delete(w.known, n.Path)
				continue
			}
		} else if err := w.ensure(n.Path); err != nil {
			// Nothing to write to: leave this cgroup (and its knobs) out of both passes.
			errs = append(errs, err)
			continue
		}
		wants[i] = wanted(n.Settings)
		if c := translate.ToCgroup(n.Settings); c.BurstPercent > 0 && !w.absent[knobBurst] {
			// Sized on the quota the cgroup has (the kubelet's), as last read (a quota the
			// owner changes is seen again at the next Forget), or on the owner's limit if lower.
			if q, err := w.current(n.Path, knobQuota); err == nil {
				if b, ok := burstOfQuota(q, c.BurstPercent, c.BurstLimitMilli); ok {
					wants[i][knobBurst] = b
				}
			}
		}
		for k, v := range wants[i] {
			if w.absent[k] || !w.backend.supports(k) {
				delete(wants[i], k)
				continue
			}
			wants[i][k] = w.backend.fileValue(k, v)
		}
	}
	skip := func(i int, err error) {
		if !errors.Is(err, errAbsent) {
			fail(i, err)
		}
	}

	// Pass 1, parents first: widen cpusets to old ∪ new and raise quotas.
	for i, n := range nodes {
		if preempted() {
			return ErrPreempted
		}
		for _, k := range []knob{knobCPUs, knobMems} {
			v, ok := wants[i][k]
			if !ok {
				continue
			}
			cur, err := w.current(n.Path, k)
			if err != nil {
				fail(i, err)
				continue
			}
			if widened := union(cur, v); widened != cur {
				fail(i, w.write(n.Path, k, widened))
			}
		}
		if v, ok := wants[i][knobQuota]; ok {
			if cur, err := w.current(n.Path, knobQuota); err == nil && quotaMicros(v) > quotaMicros(cur) {
				fail(i, w.write(n.Path, knobQuota, v))
			}
		}
		// A burst goes down before its quota may (the kernel refuses a burst above the quota).
		if v, ok := wants[i][knobBurst]; ok {
			cur, err := w.current(n.Path, knobBurst)
			if err != nil {
				skip(i, err)
			} else if quotaMicros(v) < quotaMicros(cur) {
				fail(i, w.write(n.Path, knobBurst, v))
			}
		}
	}
	// Pass 2, children first: every knob to its final value.
	for i := len(nodes) - 1; i >= 0; i-- {
		if preempted() {
			return ErrPreempted
		}
		for k := knob(0); k < numKnobs; k++ {
			v, ok := wants[i][k]
			if !ok {
				continue
			}
			cur, err := w.current(nodes[i].Path, k)
			if err != nil && k == knobIOMax && v == "" && errors.Is(err, os.ErrNotExist) {
				continue // no throttle files (no blk-throttle, or io not enabled here): nothing to clear
			}
			if err != nil {
				skip(i, err)
				continue
			}
			if cur != v {
				fail(i, w.write(nodes[i].Path, k, v))
			}
		}
	}
	for i, n := range nodes {
		if n.Foreign && nodeErrs[i] != nil && !w.layout.Exists(n.Path) {
			// Removed by its owner while we wrote (a pod ending): not a failure of ours.
			delete(w.known, n.Path)
			continue
		}
		errs = append(errs, nodeErrs[i]...)
	}
	return errors.Join(errs...)
}

// Ensure creates cgroup path (and its parents) in every hierarchy tidal uses.
func (w *Writer) Ensure(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = nil
	return w.ensure(path)
}

func (w *Writer) ensure(path string) error {
	if _, ok := w.known[path]; ok {
		return nil
	}
	seen, err := w.backend.create(path)
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", path, err)
	}
	if seen == nil {
		seen = map[knob]string{}
	}
	w.known[path] = seen
	return nil
}

// Attach moves process pid (all its threads) into cgroup path.
func (w *Writer) Attach(path string, pid int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = nil
	if err := w.ensure(path); err != nil {
		return err
	}
	if err := w.backend.attach(path, pid); err != nil {
		return fmt.Errorf("move pid %d to cgroup %s: %w", pid, path, err)
	}
	w.log.Debug("cgroup attach", "path", path, "pid", pid)
	return nil
}

// Remove deletes cgroup path, which must hold no process, and the cgroups below it, and
// forgets what it knew of them. A cgroup that is already gone is not an error. It holds the
// writer's lock only to forget: a process that has just exited keeps its cgroup busy until it
// is reaped, and the tries meanwhile (removeBackoff) must not hold up the fast path's writes.
func (w *Writer) Remove(path string) error {
	w.ForgetPath(path)
	err := w.removeTree(path)
	// A write meanwhile, from a plan older than the removal, may have made it again.
	w.ForgetPath(path)
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	w.log.Debug("cgroup remove", "path", path)
	return nil
}

// removeBackoff spaces the tries of a cgroup that will not go at once, about 150 ms in all
// (as long as containerd/cgroups tries, which held the lock meanwhile).
var removeBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}

// removeTree removes path in every hierarchy, without the lock. One that still holds a
// process is refused at once: no wait makes it go.
func (w *Writer) removeTree(path string) error {
	if pids, err := w.layout.Procs(path, true); err == nil && len(pids) > 0 {
		return fmt.Errorf("it holds %d processes", len(pids))
	}
	for try := 0; ; try++ {
		var errs []error
		for _, mount := range w.layout.Mounts() {
			if err := os.RemoveAll(filepath.Join(mount, path)); err != nil {
				errs = append(errs, err)
			}
		}
		err := errors.Join(errs...)
		if err == nil || try == len(removeBackoff) {
			return err
		}
		w.pause(removeBackoff[try])
	}
}

// ForgetPath drops what is remembered of a cgroup and the cgroups below it, without touching
// them: one someone else removes (a pod's), or one Remove is removing.
func (w *Writer) ForgetPath(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = nil
	w.dropLocked(path)
	w.backend.forgetPaths([]string{path}, false)
}

// Forget drops everything remembered, so the next Apply re-creates missing cgroups and
// re-reads the files: drift made by someone else is repaired.
func (w *Writer) Forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = nil
	for p := range w.known {
		w.forgetLocked(p)
	}
	w.backend.forget()
}

// Recheck is Forget for a share of the cgroups: those whose turn it is, one in `of` (picked
// by a hash of the path, so a new cgroup gets a turn too). The next Apply re-reads their files,
// re-creates one that is gone and repairs drift, and over `of` calls with turns 0..of-1 every
// cgroup comes up once. The slow loop repairs drift this way: re-reading every file of 200
// workloads' cgroups in one pass (Forget) cost about 60 ms of CPU within 100 ms on a 2-vCPU
// VM, once every 30 s, a burst online work on those CPUs waited behind.
func (w *Writer) Recheck(turn, of int) {
	if of < 1 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var paths []string
	for p := range w.known {
		if turnOf(p, of) == turn%of {
			paths = append(paths, p)
		}
	}
	if w.recheck == nil {
		w.recheck = map[string]bool{}
	}
	for _, p := range paths {
		w.forgetLocked(p)
		w.recheck[p] = true
	}
	// What the backend knows of the hierarchy's root is re-read once over the turns.
	w.backend.forgetPaths(paths, turn%of == 0)
}

// turnOf is path's turn among `of` (FNV-1a of the path, computed in place: the slow loop asks
// for every cgroup on every pass).
func turnOf(path string, of int) int {
	h := uint32(2166136261)
	for i := 0; i < len(path); i++ {
		h ^= uint32(path[i])
		h *= 16777619
	}
	return int(h % uint32(of))
}

// forgetLocked drops what is remembered of path's files but its device rules, which cannot be
// read back: kept as written, or each forget would write them again.
func (w *Writer) forgetLocked(path string) {
	if v, ok := w.known[path][knobDevices]; ok {
		w.known[path] = map[knob]string{knobDevices: v}
		return
	}
	delete(w.known, path)
}

// Signal sends sig to every process in cgroup path and its descendants and returns how many
// it reached.
func (w *Writer) Signal(path string, sig syscall.Signal) (int, error) {
	pids, err := w.layout.Procs(path, true)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err == nil {
			n++
		} else if !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal %v to pid %d: %w", sig, pid, err))
		}
	}
	return n, errors.Join(errs...)
}

// SetOOMScoreAdj sets a process's OOM score adjustment (inherited by its children), so the
// kernel's OOM killer picks reclaimed work before online work.
func (w *Writer) SetOOMScoreAdj(pid, score int) error {
	path := filepath.Join(w.procDir, strconv.Itoa(pid), "oom_score_adj")
	if err := writeFile(path, strconv.Itoa(score)); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	return nil
}

// WriteStats counts cgroup writes, failed writes and repairs (a value tidal had written,
// found changed by someone else and written back) by knob name.
type WriteStats struct {
	Writes  map[string]uint64
	Errors  map[string]uint64
	Repairs map[string]uint64
}

// Stats returns the write counters.
func (w *Writer) Stats() WriteStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := WriteStats{Writes: map[string]uint64{}, Errors: map[string]uint64{}, Repairs: map[string]uint64{}}
	for k := knob(0); k < numKnobs; k++ {
		s.Writes[k.String()] = w.writes[k]
		s.Errors[k.String()] = w.errs[k]
		s.Repairs[k.String()] = w.repairs[k]
	}
	return s
}

// remember records a knob's value for path.
func (w *Writer) remember(path string, k knob, v string) {
	if w.known[path] == nil {
		w.known[path] = map[knob]string{}
	}
	w.known[path][k] = v
}

// current is the knob's value: remembered, else read from the file.
func (w *Writer) current(path string, k knob) (string, error) {
	if v, ok := w.known[path][k]; ok {
		return v, nil
	}
	v, err := w.backend.read(path, k)
	if err != nil && k.optional() && errors.Is(err, os.ErrNotExist) && w.layout.Exists(path) {
		if !w.absent[k] {
			w.absent[k] = true
			w.log.Info("the kernel has no file for this knob; tidal leaves it alone", "knob", k.String(), "cgroup", path, "err", err)
		}
		return "", errAbsent
	}
	if err != nil {
		return "", fmt.Errorf("read %s of cgroup %s: %w", k, path, err)
	}
	w.remember(path, k, v)
	return v, nil
}

func (w *Writer) write(path string, k knob, value string) error {
	old := w.known[path][k]
	if err := w.backend.write(path, k, value); err != nil {
		w.errs[k]++
		// The file's value is now unknown: read it again next time.
		delete(w.known[path], k)
		w.log.Warn("cgroup write failed", "path", path, "knob", k.String(), "from", old, "to", value, "err", err)
		return fmt.Errorf("write %s=%s to cgroup %s: %w", k, value, path, err)
	}
	w.writes[k]++
	if k == knobIdle {
		// The kernel reports a minimum weight for an idle group (cpu.shares 3, cpu.weight 0)
		// and resets it to the default (1024, 100) when idle goes off, whatever was written
		// before: what is remembered of shares is no longer the file's, nor was the change
		// someone else's.
		delete(w.known[path], knobShares)
		delete(w.written[path], knobShares)
	}
	if prev, ok := w.written[path][k]; ok && old != prev && value == prev {
		// We had written this value, yet the file held another: someone changed it.
		w.repairs[k]++
		w.log.Info("cgroup drift repaired", "path", path, "knob", k.String(), "found", old, "to", value)
	}
	if w.written[path] == nil {
		w.written[path] = map[knob]string{}
	}
	w.written[path][k] = value
	w.remember(path, k, value)
	w.log.Debug("cgroup write", "path", path, "knob", k.String(), "from", old, "to", value)
	return nil
}

func depth(path string) int { return strings.Count(strings.Trim(path, "/"), "/") }

// union returns the cpuset a ∪ b in canonical form; text it cannot parse is returned as b.
func union(a, b string) string {
	sa, err1 := cpuset.Parse(a)
	sb, err2 := cpuset.Parse(b)
	if err1 != nil || err2 != nil {
		return b
	}
	return sa.Union(sb).String()
}

// dropLocked forgets what is known and was written of path and its descendants.
func (w *Writer) dropLocked(path string) {
	for _, m := range []map[string]map[knob]string{w.known, w.written} {
		for p := range m {
			if p == path || strings.HasPrefix(p, path+"/") {
				delete(m, p)
			}
		}
	}
}
