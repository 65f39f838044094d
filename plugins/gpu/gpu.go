// Package gpu decides which GPUs the node lends to reclaimed (offline) work, which
// reclaimed workload gets which lent GPU, and whom to stop when online work needs a
// GPU back. It is pure logic: it reads nothing, writes nothing and starts no
// goroutine; every call takes the time it should act at.
//
// The agent feeds a Tracker one NVML read per control-loop tick (Observe), the
// arbiter's lease (SetLeased), and reclaimed workloads' requests (Assign, Release).
// It asks it what to report (Lendable, States), what a workload may see (Visibility)
// and whom to stop (Reclaim).
//
// A GPU is lendable when
//   - no online workload's process and no process of an unknown owner is on it, and
//   - either its utilization stayed under Config.IdleUtilizationBelow for
//     Config.IdleWindow, or the lease lends it.
//
// A process of an online workload (or of no known workload) on a GPU makes it not
// lendable at once. Utilization of a GPU that is lent, or that reclaimed work runs on,
// is the borrower's and does not restart the idle clock; utilization of any other GPU
// does.
// When a lease stops lending a GPU, its idle clock restarts too: online owns it again
// until it proves idle for a whole window.
//
// When a GPU that was lendable stops being lendable, or an online process shows up
// on it, the GPU is revoked: every reclaimed workload holding it or running on it
// becomes a victim with a deadline (revocation + Config.ReclaimGrace). Reclaim lists
// the victims, lowest reclaim priority first; the caller stops them (SIGTERM now,
// SIGKILL at the deadline) and calls Release.
package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
)

// Config holds the lending knobs. A zero field takes its default.
type Config struct {
	// IdleUtilizationBelow is the utilization (percent, 1-100) under which a GPU with
	// no online process counts as idle. Default 10.
	IdleUtilizationBelow int
	// IdleWindow is how long a GPU must stay idle before it is lent. Default 5m.
	IdleWindow time.Duration
	// ReclaimGrace is how long a reclaimed workload has between being told to give a
	// GPU back (SIGTERM) and being killed. Default 30s.
	ReclaimGrace time.Duration
}

// Defaults of Config.
const (
	DefaultIdleUtilizationBelow = 10
	DefaultIdleWindow           = 5 * time.Minute
	DefaultReclaimGrace         = 30 * time.Second
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		IdleUtilizationBelow: DefaultIdleUtilizationBelow,
		IdleWindow:           DefaultIdleWindow,
		ReclaimGrace:         DefaultReclaimGrace,
	}
}

// withDefaults fills zero fields and validates the rest.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.IdleUtilizationBelow == 0 {
		c.IdleUtilizationBelow = d.IdleUtilizationBelow
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = d.IdleWindow
	}
	if c.ReclaimGrace == 0 {
		c.ReclaimGrace = d.ReclaimGrace
	}
	var errs []error
	if c.IdleUtilizationBelow < 1 || c.IdleUtilizationBelow > 100 {
		errs = append(errs, fmt.Errorf("gpu config: IdleUtilizationBelow %d: want 1-100 (percent)", c.IdleUtilizationBelow))
	}
	if c.IdleWindow < 0 {
		errs = append(errs, fmt.Errorf("gpu config: IdleWindow %s: want > 0", c.IdleWindow))
	}
	if c.ReclaimGrace < 0 {
		errs = append(errs, fmt.Errorf("gpu config: ReclaimGrace %s: want > 0", c.ReclaimGrace))
	}
	return c, errors.Join(errs...)
}

// Owner says whom a GPU process belongs to.
type Owner struct {
	// Workload is the tidal workload the process runs in; "" when it belongs to none
	// (it then blocks lending like an online process: tidal cannot tell it may be moved).
	Workload string
	// Online is true for every tier but reclaimed.
	Online bool
	// ReclaimPriority orders reclaimed workloads when they must be stopped (lower first).
	ReclaimPriority int32
	// Gone is true when the process exited before it could be looked up; it is ignored.
	Gone bool
}

// OwnerFunc maps a host PID to its owner. OwnerByCgroup builds one from the workloads.
type OwnerFunc func(pid int) Owner

// Request asks for lent GPUs for one reclaimed workload.
type Request struct {
	Workload        string
	GPUs            int   // how many, > 0
	ReclaimPriority int32 // its order among reclaimed work (lower is stopped first)
	// PreferNUMA lists NUMA nodes to take GPUs from first, in order (for example the
	// nodes of the workload's CPUs). Empty: take them from the node with most free GPUs.
	PreferNUMA []int
}

// Victim is a reclaimed workload that must give GPUs back.
type Victim struct {
	Workload        string
	ReclaimPriority int32
	GPUs            []string // UUIDs it holds or runs on that are revoked
	Reason          string   // why, naming the first revoked GPU
	// Since is when its first GPU was revoked, or when it was first seen on a GPU
	// revoked before: stop it (SIGTERM) now.
	Since    time.Time
	Deadline time.Time // Since + ReclaimGrace: kill it (SIGKILL) if still running
	Overdue  bool      // the deadline has passed at the time Reclaim was asked
}

// DeviceState is one GPU's lending state, for `tidal status` and metrics.
type DeviceState struct {
	UUID       string
	Index      int
	NUMANode   int // -1 unknown
	Lendable   bool
	Reason     string // why it is or is not lendable
	AssignedTo string // the reclaimed workload it is lent to; "" none
}

// Tracker holds the lending state of the node's GPUs. It is safe for concurrent use
// (the control loop observes while runtime hooks ask for visibility).
type Tracker struct {
	cfg Config

	mu          sync.Mutex
	devices     map[string]*device // by UUID
	leased      map[string]bool    // UUIDs the current lease lends
	assignments map[string]*assignment
	victims     map[string]*Victim // sticky until Release
}

// device is the tracker's view of one GPU.
type device struct {
	info    sysgpu.Device
	present bool // in the latest read

	// idleSince is when the GPU's current idle stretch began (zero: not idle now);
	// busy says why it is not idle.
	idleSince time.Time
	busy      string
	// onlineUse describes the online (or unknown) process on it; "" none.
	onlineUse string
	// reclaimedUsers are the reclaimed workloads with a process on it.
	reclaimedUsers map[string]reclaimedUser

	lendable bool
	reason   string
	// revokedAt is when the GPU was taken back from reclaimed work (zero: not revoked).
	revokedAt    time.Time
	revokeReason string
	assignedTo   string
}

type reclaimedUser struct {
	priority  int32
	firstSeen time.Time // first read it was on this GPU in
}

type assignment struct {
	uuids    []string
	priority int32
}

// NewTracker returns a Tracker that knows no GPU yet.
func NewTracker(cfg Config) (*Tracker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Tracker{
		cfg:         cfg,
		devices:     map[string]*device{},
		leased:      map[string]bool{},
		assignments: map[string]*assignment{},
		victims:     map[string]*Victim{},
	}, nil
}

// Observe takes one read of every GPU at now. owner maps each GPU process to its
// workload; nil treats every process as of no known workload. A GPU missing from
// devices (lost, or its read failed) is not lendable until it is seen again, but is
// not revoked for that alone: a failed read proves no online need.
func (t *Tracker) Observe(now time.Time, devices []sysgpu.Device, owner OwnerFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	for _, info := range devices {
		if info.UUID == "" || seen[info.UUID] {
			continue
		}
		seen[info.UUID] = true
		d := t.devices[info.UUID]
		if d == nil {
			d = &device{}
			t.devices[info.UUID] = d
		}
		d.info = info
		d.present = true
		t.attribute(d, owner, now)
		t.tickIdleClock(d, now)
	}
	for uuid, d := range t.devices {
		if !seen[uuid] {
			d.present = false
			d.onlineUse = ""
			d.reclaimedUsers = nil
			d.idleSince = time.Time{}
			d.busy = "not in the latest NVML read"
		}
	}
	t.evaluateAll(now)
}

// attribute sorts the GPU's processes into online use and reclaimed users.
func (t *Tracker) attribute(d *device, owner OwnerFunc, now time.Time) {
	prev := d.reclaimedUsers
	d.onlineUse = ""
	d.reclaimedUsers = map[string]reclaimedUser{}
	for _, p := range d.info.Processes {
		var o Owner
		if owner != nil {
			o = owner(p.PID)
		}
		switch {
		case o.Gone:
		case o.Workload == "":
			if d.onlineUse == "" {
				d.onlineUse = fmt.Sprintf("used by pid %d of no known workload", p.PID)
			}
		case o.Online:
			d.onlineUse = fmt.Sprintf("used by online workload %s (pid %d)", o.Workload, p.PID)
		default:
			u := reclaimedUser{priority: o.ReclaimPriority, firstSeen: now}
			if p, ok := prev[o.Workload]; ok {
				u.firstSeen = p.firstSeen
			}
			d.reclaimedUsers[o.Workload] = u
		}
	}
}

// tickIdleClock starts or restarts the GPU's idle clock from the latest read.
func (t *Tracker) tickIdleClock(d *device, now time.Time) {
	idle := false
	switch u := d.info.UtilizationGPU; {
	case d.onlineUse != "":
		d.busy = d.onlineUse
	case len(d.reclaimedUsers) > 0 || d.assignedTo != "":
		idle = true // the utilization is the borrower's
	case u < 0:
		d.busy = "utilization unknown (not reported by NVML)"
	case u >= t.cfg.IdleUtilizationBelow:
		d.busy = fmt.Sprintf("utilization %d%%, idle needs under %d%% for %s",
			u, t.cfg.IdleUtilizationBelow, t.cfg.IdleWindow)
	default:
		idle = true
	}
	if !idle {
		d.idleSince = time.Time{}
		return
	}
	if d.idleSince.IsZero() {
		d.idleSince = now
	}
}

// evaluateAll decides lendability of every GPU at now and revokes the ones taken back.
func (t *Tracker) evaluateAll(now time.Time) {
	for uuid, d := range t.devices {
		was := d.lendable
		d.lendable, d.reason = t.lendable(uuid, d, now)
		switch {
		case d.lendable:
			d.revokedAt, d.revokeReason = time.Time{}, ""
		case d.revokedAt.IsZero() && d.present && (was || d.onlineUse != ""):
			d.revokedAt, d.revokeReason = now, d.reason
		}
	}
}

func (t *Tracker) lendable(uuid string, d *device, now time.Time) (bool, string) {
	switch {
	case !d.present:
		return false, "not in the latest NVML read"
	case d.onlineUse != "":
		return false, d.onlineUse
	case d.info.Minor < 0:
		return false, "no /dev/nvidia minor number from NVML"
	case t.leased[uuid]:
		return true, "lent by the lease"
	case d.idleSince.IsZero():
		return false, d.busy
	}
	idle := now.Sub(d.idleSince)
	switch {
	case idle < t.cfg.IdleWindow:
	case len(d.reclaimedUsers) > 0 || d.assignedTo != "":
		return true, fmt.Sprintf("no online use for %s (its utilization is the borrower's)", idle.Round(time.Second))
	default:
		return true, fmt.Sprintf("idle for %s (utilization under %d%%, no online process)",
			idle.Round(time.Second), t.cfg.IdleUtilizationBelow)
	}
	return false, fmt.Sprintf("idle for %s of %s", idle.Round(time.Second), t.cfg.IdleWindow)
}

// SetLeased replaces the set of GPUs the lease lends (empty: none), effective at now.
// A GPU the lease stops lending is taken back at once (whoever borrows it becomes a
// victim) and its idle clock restarts: it is lent again only after a whole window.
func (t *Tracker) SetLeased(now time.Time, uuids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := map[string]bool{}
	for _, u := range uuids {
		next[u] = true
	}
	for u := range t.leased {
		if d := t.devices[u]; d != nil && !next[u] {
			d.idleSince = time.Time{}
			d.busy = "the lease stopped lending it"
		}
	}
	t.leased = next
	t.evaluateAll(now)
}

// Assign lends req.GPUs lendable, unassigned GPUs to req.Workload and returns their
// UUIDs in index order. It refuses, saying why, when fewer are free or the workload
// already holds GPUs.
func (t *Tracker) Assign(req Request) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if req.Workload == "" {
		return nil, errors.New("gpu assign: empty workload name")
	}
	if req.GPUs <= 0 {
		return nil, fmt.Errorf("gpu assign %s: asks for %d GPUs, want > 0", req.Workload, req.GPUs)
	}
	if a := t.assignments[req.Workload]; a != nil {
		return nil, fmt.Errorf("gpu assign %s: already holds %s; release them first",
			req.Workload, strings.Join(a.uuids, ","))
	}
	var free []*device
	for _, d := range t.devices {
		if t.isFreeFor(d, req.Workload) {
			free = append(free, d)
		}
	}
	if len(free) < req.GPUs {
		return nil, fmt.Errorf("gpu assign %s: asks for %d GPUs, %d lendable and free (%s)",
			req.Workload, req.GPUs, len(free), t.summary())
	}
	pickOrder(free, req.PreferNUMA)
	picked := free[:req.GPUs]
	sort.Slice(picked, func(i, j int) bool { return picked[i].info.Index < picked[j].info.Index })
	a := &assignment{priority: req.ReclaimPriority}
	for _, d := range picked {
		d.assignedTo = req.Workload
		a.uuids = append(a.uuids, d.info.UUID)
	}
	t.assignments[req.Workload] = a
	return slices.Clone(a.uuids), nil
}

// Adopt records that workload already holds the given GPUs, for an agent rebuilding
// its state after a restart (from its checkpoint or the workloads' environment). The
// GPUs need not be lendable yet: they are not taken back unless online work shows up
// on them or they were lendable and stop being so. It fails when a GPU is unknown
// (not observed yet) or held by another workload, or the workload holds GPUs.
func (t *Tracker) Adopt(workload string, priority int32, uuids []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if workload == "" || len(uuids) == 0 {
		return fmt.Errorf("gpu adopt %q: want a workload name and GPUs, got %v", workload, uuids)
	}
	if a := t.assignments[workload]; a != nil {
		return fmt.Errorf("gpu adopt %s: already holds %s", workload, strings.Join(a.uuids, ","))
	}
	var ds []*device
	for _, u := range uuids {
		d := t.devices[u]
		switch {
		case d == nil:
			return fmt.Errorf("gpu adopt %s: GPU %s is not known (observe the GPUs first)", workload, u)
		case d.assignedTo != "":
			return fmt.Errorf("gpu adopt %s: GPU %s is held by %s", workload, u, d.assignedTo)
		case slices.Contains(ds, d):
			return fmt.Errorf("gpu adopt %s: GPU %s listed twice", workload, u)
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].info.Index < ds[j].info.Index })
	a := &assignment{priority: priority}
	for _, d := range ds {
		d.assignedTo = workload
		a.uuids = append(a.uuids, d.info.UUID)
	}
	t.assignments[workload] = a
	return nil
}

// isFreeFor: lendable, not revoked, not lent, and no other workload's process on it
// (after an agent restart a reclaimed job may still run on a GPU nobody assigned).
func (t *Tracker) isFreeFor(d *device, workload string) bool {
	if !d.lendable || !d.revokedAt.IsZero() || d.assignedTo != "" {
		return false
	}
	for w := range d.reclaimedUsers {
		if w != workload {
			return false
		}
	}
	return true
}

// pickOrder sorts candidate GPUs best first: preferred NUMA nodes in the order given;
// then nodes with more candidates (so a job stays on one node); then by index.
func pickOrder(ds []*device, prefer []int) {
	perNode := map[int]int{}
	for _, d := range ds {
		perNode[d.info.NUMANode]++
	}
	rank := func(node int) int {
		if i := slices.Index(prefer, node); i >= 0 {
			return i
		}
		return len(prefer)
	}
	sort.Slice(ds, func(i, j int) bool {
		a, b := ds[i].info, ds[j].info
		if ra, rb := rank(a.NUMANode), rank(b.NUMANode); ra != rb {
			return ra < rb
		}
		if a.NUMANode != b.NUMANode {
			if (a.NUMANode < 0) != (b.NUMANode < 0) {
				return a.NUMANode >= 0 // known nodes before unknown
			}
			if perNode[a.NUMANode] != perNode[b.NUMANode] {
				return perNode[a.NUMANode] > perNode[b.NUMANode]
			}
			return a.NUMANode < b.NUMANode
		}
		return a.Index < b.Index
	})
}

// summary counts the GPUs by state for refusal messages.
func (t *Tracker) summary() string {
	var lendable, lent, revoked int
	for _, d := range t.devices {
		switch {
		case !d.revokedAt.IsZero():
			revoked++
		case d.assignedTo != "":
			lent++
		case d.lendable:
			lendable++
		}
	}
	return fmt.Sprintf("%d GPUs: %d lent, %d being taken back, %d lendable, the rest not lendable",
		len(t.devices), lent, revoked, lendable)
}

// Release ends the workload's hold on its GPUs (it stopped or was stopped) and forgets
// it as a victim. Releasing a workload that holds nothing does nothing.
func (t *Tracker) Release(workload string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.assignments[workload]; a != nil {
		for _, u := range a.uuids {
			if d := t.devices[u]; d != nil && d.assignedTo == workload {
				d.assignedTo = ""
			}
		}
		delete(t.assignments, workload)
	}
	delete(t.victims, workload)
}

// Reclaim returns every reclaimed workload that must give GPUs back, lowest reclaim
// priority first (then earliest deadline, then name). A workload stays listed, with
// the deadline it first got, until Release; the caller sends SIGTERM when it first
// sees a victim and SIGKILL once Overdue. A workload released while its process is
// still on a revoked GPU is listed again with the deadline already passed.
func (t *Tracker) Reclaim(now time.Time) []Victim {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uuid, d := range t.devices {
		if d.revokedAt.IsZero() {
			continue
		}
		if d.assignedTo != "" {
			t.addVictim(d.assignedTo, t.assignments[d.assignedTo].priority, uuid, d, d.revokedAt)
		}
		for w, u := range d.reclaimedUsers {
			prio := u.priority
			if a := t.assignments[w]; a != nil {
				prio = a.priority
			}
			// One that started on the GPU after it was revoked still gets its grace.
			since := d.revokedAt
			if u.firstSeen.After(since) {
				since = u.firstSeen
			}
			t.addVictim(w, prio, uuid, d, since)
		}
	}
	out := make([]Victim, 0, len(t.victims))
	for _, v := range t.victims {
		c := *v
		c.GPUs = slices.Clone(v.GPUs)
		c.Overdue = !now.Before(c.Deadline)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ReclaimPriority != b.ReclaimPriority {
			return a.ReclaimPriority < b.ReclaimPriority
		}
		if !a.Deadline.Equal(b.Deadline) {
			return a.Deadline.Before(b.Deadline)
		}
		return a.Workload < b.Workload
	})
	return out
}

func (t *Tracker) addVictim(workload string, prio int32, uuid string, d *device, since time.Time) {
	v := t.victims[workload]
	if v == nil {
		v = &Victim{
			Workload:        workload,
			ReclaimPriority: prio,
			Reason:          fmt.Sprintf("GPU %d (%s) taken back: %s", d.info.Index, uuid, d.revokeReason),
			Since:           since,
			Deadline:        since.Add(t.cfg.ReclaimGrace),
		}
		t.victims[workload] = v
	}
	if !slices.Contains(v.GPUs, uuid) {
		v.GPUs = append(v.GPUs, uuid)
		slices.Sort(v.GPUs)
	}
}

// Visibility returns what a workload may see: the environment (NVIDIA_VISIBLE_DEVICES
// and CUDA_VISIBLE_DEVICES, see Env) and the minors N of the /dev/nvidiaN devices to
// allow in its device cgroup (char major 195; nvidiactl 195:255 and nvidia-uvm must
// be allowed too for CUDA to work). A workload that holds no GPU gets the "no GPU"
// environment and no minors.
func (t *Tracker) Visibility(workload string) (env map[string]string, deviceMinors []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.assignments[workload]
	if a == nil {
		return Env(nil), nil
	}
	for _, u := range a.uuids {
		if d := t.devices[u]; d != nil && d.info.Minor >= 0 {
			deviceMinors = append(deviceMinors, d.info.Minor)
		}
	}
	slices.Sort(deviceMinors)
	return Env(a.uuids), deviceMinors
}

// Minors are the /dev/nvidiaN minors of every GPU known, sorted.
func (t *Tracker) Minors() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for _, d := range t.devices {
		if d.info.Minor >= 0 {
			out = append(out, d.info.Minor)
		}
	}
	slices.Sort(out)
	return out
}

// DeviceRules are the device cgroup rules that let a workload reach only the GPUs whose
// minors it holds, on a node whose GPUs have minors all. A v1 devices cgroup under a
// default-allow parent keeps a list of denied devices, and an allow only removes the exact
// entry: so the rules first clear every entry tidal may have made (all NVIDIA devices, each
// GPU), then deny all NVIDIA devices (nvidiactl too) when it holds none, or each GPU it does
// not hold (nvidiactl and nvidia-uvm stay reachable: CUDA needs them, they give no GPU).
func DeviceRules(all, held []int) []string {
	rules := []string{fmt.Sprintf("allow c %d:* rwm", NvidiaMajor)}
	for _, m := range all {
		rules = append(rules, fmt.Sprintf("allow c %d:%d rwm", NvidiaMajor, m))
	}
	if len(held) == 0 {
		return append(rules, fmt.Sprintf("deny c %d:* rwm", NvidiaMajor))
	}
	for _, m := range all {
		if !slices.Contains(held, m) {
			rules = append(rules, fmt.Sprintf("deny c %d:%d rwm", NvidiaMajor, m))
		}
	}
	return rules
}

// Device-cgroup numbers of the NVIDIA character devices.
const (
	NvidiaMajor    = 195 // /dev/nvidiaN is 195:N
	NvidiactlMinor = 255 // /dev/nvidiactl is 195:255
)

// Env is the environment that limits a process to the given GPUs: the NVIDIA container
// toolkit reads NVIDIA_VISIBLE_DEVICES when it creates a container, CUDA reads
// CUDA_VISIBLE_DEVICES in any process (both take UUIDs). With no GPUs it sets
// NVIDIA_VISIBLE_DEVICES=void (no GPU injected, overriding images that set "all") and
// an empty CUDA_VISIBLE_DEVICES (CUDA sees none).
func Env(uuids []string) map[string]string {
	if len(uuids) == 0 {
		return map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
	}
	list := strings.Join(uuids, ",")
	return map[string]string{"NVIDIA_VISIBLE_DEVICES": list, "CUDA_VISIBLE_DEVICES": list}
}

// ForNUMA says where a dedicated workload asking for n GPUs should go: the NUMA node
// with the most GPUs free of online use (lent ones count: they are taken back when
// the workload starts on them) that has at least n, and n such GPUs on it, unlent
// ones first. ok is false when no single node has n. It reserves nothing.
func (t *Tracker) ForNUMA(n int) (node int, uuids []string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n <= 0 {
		return -1, nil, false
	}
	byNode := map[int][]*device{}
	for _, d := range t.devices {
		if d.present && d.onlineUse == "" && d.info.NUMANode >= 0 {
			byNode[d.info.NUMANode] = append(byNode[d.info.NUMANode], d)
		}
	}
	node = -1
	for nd, ds := range byNode {
		if len(ds) < n {
			continue
		}
		if node < 0 || len(ds) > len(byNode[node]) || (len(ds) == len(byNode[node]) && nd < node) {
			node = nd
		}
	}
	if node < 0 {
		return -1, nil, false
	}
	ds := byNode[node]
	sort.Slice(ds, func(i, j int) bool {
		bi, bj := ds[i].borrowed(), ds[j].borrowed()
		if bi != bj {
			return !bi
		}
		return ds[i].info.Index < ds[j].info.Index
	})
	for _, d := range ds[:n] {
		uuids = append(uuids, d.info.UUID)
	}
	return node, uuids, true
}

func (d *device) borrowed() bool { return d.assignedTo != "" || len(d.reclaimedUsers) > 0 }

// NUMAOf returns the NUMA node holding most of the given GPUs (ties: the lower node),
// for a workload whose GPUs were chosen elsewhere (a Kubernetes device plugin). ok is
// false when none of them is known with a NUMA node.
func (t *Tracker) NUMAOf(uuids []string) (node int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	count := map[int]int{}
	for _, u := range uuids {
		if d := t.devices[u]; d != nil && d.info.NUMANode >= 0 {
			count[d.info.NUMANode]++
		}
	}
	node = -1
	for nd, c := range count {
		if node < 0 || c > count[node] || (c == count[node] && nd < node) {
			node = nd
		}
	}
	return node, node >= 0
}

// Lendable is the number of lendable GPUs, lent or not: the node's capacity of
// tidalqos.io/reclaimed-gpu.
func (t *Tracker) Lendable() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, d := range t.devices {
		if d.lendable {
			n++
		}
	}
	return n
}

// States returns every known GPU's lending state in index order.
func (t *Tracker) States() []DeviceState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]DeviceState, 0, len(t.devices))
	for uuid, d := range t.devices {
		out = append(out, DeviceState{
			UUID:       uuid,
			Index:      d.info.Index,
			NUMANode:   d.info.NUMANode,
			Lendable:   d.lendable,
			Reason:     d.reason,
			AssignedTo: d.assignedTo,
		})
	}
	slices.SortFunc(out, func(a, b DeviceState) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.UUID, b.UUID))
	})
	return out
}
