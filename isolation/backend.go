package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// backend does the version-specific work for one knob or one cgroup. Paths are relative to the
// hierarchy root.
type backend interface {
	// create makes cgroup path if it is missing. It returns the knob values it read on the
	// way (nil if none), so the writer need not read those files again.
	create(path string) (map[knob]string, error)
	attach(path string, pid int) error
	// fileValue turns a version-independent knob value (see wanted) into the canonical text
	// this version's file holds; read returns that form and write takes it.
	fileValue(k knob, value string) string
	read(path string, k knob) (string, error)
	write(path string, k knob, value string) error
	// supports says whether this cgroup version has the knob at all; Apply leaves out the
	// ones it has not (memory.low on v1, oom_kill_disable on v2).
	supports(k knob) bool
	// forget drops cached handles, so a cgroup removed behind tidal's back is re-created;
	// forgetPaths does so for those cgroups and the ones below them only, and with root
	// also re-reads what it knows of the hierarchy's root.
	forget()
	forgetPaths(paths []string, root bool)
}

func newBackend(layout *cgroupfs.Layout) (backend, error) {
	if layout.Version == cgroupfs.V2 {
		return &v2Backend{layout: layout}, nil
	}
	for name, mount := range layout.Controllers() {
		named := filepath.Join(filepath.Dir(mount), name)
		if a, b := resolve(named), resolve(mount); a != b {
			return nil, fmt.Errorf("cgroup v1 controller %s is mounted at %s but %s is not that mount; tidal needs the usual /sys/fs/cgroup/<controller> names", name, mount, named)
		}
	}
	return newV1Backend(layout), nil
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// v1Backend drives the cpu, cpuacct, cpuset and memory hierarchies through containerd/cgroups.
// Knob writes go to the one controller that owns the knob: the library's aggregate Update
// would run every controller, and its cpuset controller re-reads the whole ancestry on each
// call, which costs more than the write itself.
type v1Backend struct {
	layout *cgroupfs.Layout
	groups map[string]cgroup1.Cgroup
	subs   []cgroup1.Subsystem
	memory interface {
		Update(string, *specs.LinuxResources) error
	}
	// rootBalances is the root cpuset's sched_load_balance, read at start and on forget.
	rootBalances bool
}

func v1CpusetFile(k knob) string {
	if k == knobMems {
		return "cpuset.mems"
	}
	return "cpuset.cpus"
}

// newV1Backend limits containerd/cgroups to the controllers tidal owns, so it never creates or
// removes directories in hierarchies (devices, freezer, pids...) tidal does not manage.
// containerd/cgroups finds a controller at <root>/<name>, as every distribution mounts it (a
// co-mounted cpu,cpuacct has cpu and cpuacct links); newBackend checks that this holds.
func newV1Backend(layout *cgroupfs.Layout) *v1Backend {
	b := &v1Backend{layout: layout, groups: map[string]cgroup1.Cgroup{}}
	b.readRootBalance()
	for name, mount := range layout.Controllers() {
		root := filepath.Dir(mount)
		switch name {
		case "cpu":
			b.subs = append(b.subs, cgroup1.NewCpu(root))
		case "cpuacct":
			b.subs = append(b.subs, cgroup1.NewCpuacct(root))
		case "cpuset":
			b.subs = append(b.subs, cgroup1.NewCpuset(root))
		case "memory":
			c := cgroup1.NewMemory(root)
			b.memory = c
			b.subs = append(b.subs, c)
		case "devices":
			b.subs = append(b.subs, cgroup1.NewDevices(root))
		case "blkio":
			b.subs = append(b.subs, cgroup1.NewBlkio(root))
		}
	}
	return b
}

func (b *v1Backend) hierarchy() ([]cgroup1.Subsystem, error) { return b.subs, nil }

func (b *v1Backend) group(path string) (cgroup1.Cgroup, error) {
	g, _, err := b.load(path)
	return g, err
}

// load returns the handle of cgroup path, creating what is missing. A cgroup whose directory
// is there in every hierarchy is only loaded: after Forget (drift repair) every cgroup comes
// here again, and New checks each cpuset up to the root on the way, reading their files
// (most of the cost of a re-read pass). It also returns the cpuset values it read to decide.
func (b *v1Backend) load(path string) (cgroup1.Cgroup, map[knob]string, error) {
	if g, ok := b.groups[path]; ok {
		return g, nil, nil
	}
	if g, err := cgroup1.Load(cgroup1.StaticPath("/"+path), cgroup1.WithHierarchy(b.hierarchy)); err == nil && len(g.Subsystems()) == len(b.subs) {
		if seen, filled := b.cpusetFilled(path); filled {
			b.groups[path] = g
			return g, seen, nil
		}
	}
	// New creates missing directories and, for cpuset, copies the parent's cpus and mems so a
	// task can join at once.
	g, err := cgroup1.New(cgroup1.StaticPath("/"+path), &specs.LinuxResources{}, cgroup1.WithHierarchy(b.hierarchy))
	if err != nil {
		return nil, nil, err
	}
	b.groups[path] = g
	return g, nil, nil
}

// cpusetFilled says whether cgroup path has CPUs and memory nodes in its cpuset (or there is
// no cpuset hierarchy), and returns the values it read: one made by someone else's mkdir has
// neither until they are copied from its parent, which New does.
func (b *v1Backend) cpusetFilled(path string) (map[knob]string, bool) {
	if _, ok := b.layout.Controllers()["cpuset"]; !ok {
		return nil, true
	}
	seen := map[knob]string{}
	for _, k := range []knob{knobCPUs, knobMems} {
		v, err := b.read(path, k)
		if err != nil || v == "" {
			return nil, false
		}
		seen[k] = v
	}
	return seen, true
}

func (b *v1Backend) forget() {
	b.groups = map[string]cgroup1.Cgroup{}
	b.readRootBalance()
}

func (b *v1Backend) forgetPaths(paths []string, root bool) {
	for cached := range b.groups {
		for _, p := range paths {
			if cached == p || strings.HasPrefix(cached, p+"/") {
				delete(b.groups, cached)
				break
			}
		}
	}
	if root {
		b.readRootBalance()
	}
}

// readRootBalance notes whether the root cpuset balances load over all CPUs (the default).
// Then the kernel makes one scheduling domain of every CPU whatever the cgroups below say, yet
// rebuilds its domains on each write to the cpuset.cpus of a cgroup whose own flag is on:
// most of what a pool resize costs, once per reclaimed workload (BenchmarkPoolResize200).
// Turning the flag off in tidal's cgroups changes no domain and saves those rebuilds. With the
// root's off (CPUs partitioned on purpose) the flags below decide the domains: left alone.
func (b *v1Backend) readRootBalance() {
	if !b.layout.Has("cpuset") {
		b.rootBalances = false
		return
	}
	data, err := cgroupfs.ReadFile(filepath.Join(b.layout.Dir("cpuset", ""), "cpuset.sched_load_balance"))
	b.rootBalances = err == nil && strings.TrimSpace(string(data)) == "1"
}

func (b *v1Backend) create(path string) (map[knob]string, error) {
	_, seen, err := b.load(path)
	return seen, err
}

func (b *v1Backend) attach(path string, pid int) error {
	g, err := b.group(path)
	if err != nil {
		return err
	}
	return g.AddProc(uint64(pid))
}

func (b *v1Backend) fileValue(_ knob, value string) string { return value }

func (b *v1Backend) read(path string, k knob) (string, error) {
	file := func(controller, name string) (string, error) {
		data, err := cgroupfs.ReadFile(filepath.Join(b.layout.Dir(controller, path), name))
		return strings.TrimSpace(string(data)), err
	}
	switch k {
	case knobCPUs:
		v, err := file("cpuset", "cpuset.cpus")
		return canonicalCPUs(v), err
	case knobCPUBalance:
		return file("cpuset", "cpuset.sched_load_balance")
	case knobMems:
		v, err := file("cpuset", "cpuset.mems")
		return canonicalCPUs(v), err
	case knobIdle:
		return file("cpu", "cpu.idle")
	case knobShares:
		return file("cpu", "cpu.shares")
	case knobQuota:
		q, err := file("cpu", "cpu.cfs_quota_us")
		if err != nil {
			return "", err
		}
		p, err := file("cpu", "cpu.cfs_period_us")
		if err != nil || q == "-1" {
			return q, err
		}
		// A period other than ours means the quota text differs: rewrite it with ours.
		if p != strconv.Itoa(translate.PeriodMicros) {
			return q + "/" + p, nil
		}
		return q, nil
	case knobMemoryLimit:
		v, err := file("memory", "memory.limit_in_bytes")
		if n, perr := strconv.ParseInt(v, 10, 64); perr == nil && n >= v1MemoryUnlimited {
			return "-1", err
		}
		return v, err
	case knobDevices:
		// devices.list cannot be read back as rules (a default-allow group lists only
		// "a *:* rwm"): the value is what tidal wrote, which Forget keeps.
		return "", nil
	case knobBurst:
		return file("cpu", "cpu.cfs_burst_us")
	case knobMemoryHigh:
		v, err := file("memory", "memory.soft_limit_in_bytes")
		if n, perr := strconv.ParseInt(v, 10, 64); perr == nil && n >= v1MemoryUnlimited {
			return "-1", err
		}
		return v, err
	case knobMemoryOOMWait:
		v, err := file("memory", "memory.oom_control")
		for _, line := range strings.Split(v, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill_disable" {
				return f[1], err
			}
		}
		return "", err
	case knobIOMax:
		return b.readThrottles(path)
	case knobIOWeight:
		v, err := file("blkio", "blkio.bfq.weight")
		return ioWeightValue(v), err
	}
	return "", fmt.Errorf("unknown knob %d", k)
}

func (b *v1Backend) supports(k knob) bool {
	switch k {
	case knobMemoryLow, knobMemoryMin:
		return false
	case knobIOMax, knobIOWeight:
		return b.layout.Has("blkio")
	case knobCPUBalance:
		return b.rootBalances
	}
	return true
}

// v1ThrottleFiles are the blkio throttle files, in the order of an io.max line's fields.
var v1ThrottleFiles = [4]string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
	"blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"}

func ioFields(l *plugins.IOLimit) [4]*uint64 {
	return [4]*uint64{&l.ReadBps, &l.WriteBps, &l.ReadIOPS, &l.WriteIOPS}
}

// readThrottles gathers the four v1 throttle files ("MAJ:MIN value" lines) into canonical
// io.max text.
func (b *v1Backend) readThrottles(path string) (string, error) {
	byDev := map[string]*plugins.IOLimit{}
	var order []string
	for i, name := range v1ThrottleFiles {
		data, err := os.ReadFile(filepath.Join(b.layout.Dir("blkio", path), name))
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				continue
			}
			l := byDev[f[0]]
			if l == nil {
				l = &plugins.IOLimit{Device: f[0]}
				byDev[f[0]] = l
				order = append(order, f[0])
			}
			*ioFields(l)[i] = n
		}
	}
	limits := make([]plugins.IOLimit, 0, len(order))
	for _, d := range order {
		limits = append(limits, *byDev[d])
	}
	return translate.IOMax(limits), nil
}

// writeThrottles makes the v1 throttle files say value (canonical io.max text): each wanted
// device's four rates, and 0 (no limit) for every device throttled now but not wanted.
func (b *v1Backend) writeThrottles(path, value string) error {
	want, err := translate.ParseIOMax(value)
	if err != nil {
		return err
	}
	cur, err := b.readThrottles(path)
	if err != nil {
		return err
	}
	want = clearingUnwanted(want, cur)
	var errs []error
	for _, l := range want {
		if deviceGone(l.Device) {
			continue
		}
		for i, name := range v1ThrottleFiles {
			// 0 removes the device's rule.
			line := l.Device + " " + strconv.FormatUint(*ioFields(&l)[i], 10)
			errs = append(errs, writeFile(filepath.Join(b.layout.Dir("blkio", path), name), line))
		}
	}
	return errors.Join(errs...)
}

// sysDevBlock lists the block devices the kernel has, by MAJ:MIN.
var sysDevBlock = "/sys/dev/block"

// deviceGone says a block device no longer exists (a disk removed, a loop device detached):
// its throttle rules went with it, and writing one would fail with ENODEV, failing the whole
// pass. Not knowing (no /sys) counts as present.
func deviceGone(dev string) bool {
	_, err := os.Stat(filepath.Join(sysDevBlock, dev))
	return errors.Is(err, os.ErrNotExist) && dirExists(sysDevBlock)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// ioWeightValue is the cgroup-wide weight of a weight file: "100", or "default 100" and
// per-device lines.
func ioWeightValue(v string) string {
	for _, line := range strings.Split(v, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 1:
			return f[0]
		case len(f) == 2 && f[0] == "default":
			return f[1]
		}
	}
	return v
}

func (b *v1Backend) write(path string, k knob, value string) error {
	switch k {
	case knobIdle:
		// containerd/cgroups has no cpu.idle (Linux 5.15+).
		return writeFile(filepath.Join(b.layout.Dir("cpu", path), "cpu.idle"), value)
	case knobBurst:
		// Nor a CFS burst (Linux 5.14+).
		return writeFile(filepath.Join(b.layout.Dir("cpu", path), "cpu.cfs_burst_us"), value)
	}
	switch k {
	case knobCPUs, knobMems:
		// Written directly: the library's cpuset Update re-reads and re-copies every
		// ancestor's cpuset on each call, while Writer.Apply already orders parents and
		// children, and New copied the parent's values when the cgroup was made.
		return writeFile(filepath.Join(b.layout.Dir("cpuset", path), v1CpusetFile(k)), value)
	// Written directly too: the library's cpu Update is its Create, which makes the folder
	// first, and would bring back a pod's cgroup the kubelet removed a moment before.
	case knobShares:
		return writeFile(filepath.Join(b.layout.Dir("cpu", path), "cpu.shares"), value)
	case knobQuota:
		dir := b.layout.Dir("cpu", path)
		return errors.Join(writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(translate.PeriodMicros)),
			writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), value))
	case knobMemoryLimit:
		n, _ := strconv.ParseInt(value, 10, 64)
		return b.memory.Update(path, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &n}})
	case knobDevices:
		if !b.layout.Has("devices") {
			return nil
		}
		return writeDeviceRules(b.layout.Dir("devices", path), value)
	case knobMemoryHigh:
		// The kernel takes -1 as unlimited.
		return writeFile(filepath.Join(b.layout.Dir("memory", path), "memory.soft_limit_in_bytes"), value)
	case knobMemoryOOMWait:
		return writeFile(filepath.Join(b.layout.Dir("memory", path), "memory.oom_control"), value)
	case knobCPUBalance:
		return writeFile(filepath.Join(b.layout.Dir("cpuset", path), "cpuset.sched_load_balance"), value)
	case knobIOMax:
		return b.writeThrottles(path, value)
	case knobIOWeight:
		return writeFile(filepath.Join(b.layout.Dir("blkio", path), "blkio.bfq.weight"), value)
	}
	return fmt.Errorf("unknown knob %d", k)
}

// writeDeviceRules writes "allow r;deny r;..." to devices.allow and devices.deny in order.
func writeDeviceRules(dir, value string) error {
	for _, rule := range strings.Split(value, ";") {
		verb, r, ok := strings.Cut(rule, " ")
		if !ok || verb != "allow" && verb != "deny" {
			return fmt.Errorf("device rule %q: want allow or deny and a rule", rule)
		}
		if err := writeFile(filepath.Join(dir, "devices."+verb), r); err != nil {
			return err
		}
	}
	return nil
}

// v2Backend drives a unified hierarchy through containerd/cgroups.
type v2Backend struct {
	layout *cgroupfs.Layout
}

func (b *v2Backend) manager(path string) (*cgroup2.Manager, error) {
	return cgroup2.Load("/"+path, cgroup2.WithMountpoint(b.layout.Unified))
}

func (b *v2Backend) forget()                               {}
func (b *v2Backend) forgetPaths(paths []string, root bool) {}

// create makes the cgroup and enables cpu, cpuset and memory (those the kernel offers: a
// hybrid host's unified mount may carry none) in the subtree_control of each parent below the
// mount root. The root cgroup belongs to the host: tidal never writes it, so the controllers
// must already be enabled there (systemd does).
func (b *v2Backend) create(path string) (map[knob]string, error) {
	if _, err := cgroup2.NewManager(b.layout.Unified, "/"+path, &cgroup2.Resources{}); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(b.layout.Unified, "cgroup.subtree_control"))
	if err != nil {
		return nil, err
	}
	var want []string
	for _, c := range strings.Fields(string(data)) {
		if c == "cpu" || c == "cpuset" || c == "memory" || c == "io" {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		parent := filepath.Join(b.layout.Unified, filepath.Join(parts[:i]...))
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), strings.Join(want, " ")); err != nil {
			return nil, fmt.Errorf("enable %v in %s: %w", want, parent, err)
		}
	}
	return nil, nil
}

func (b *v2Backend) attach(path string, pid int) error {
	m, err := b.manager(path)
	if err != nil {
		return err
	}
	return m.AddProc(uint64(pid))
}

func (b *v2Backend) fileValue(k knob, value string) string {
	if k == knobShares {
		n, _ := strconv.ParseUint(value, 10, 64)
		return strconv.FormatUint(translate.Weight(n), 10)
	}
	return value
}

func (b *v2Backend) read(path string, k knob) (string, error) {
	switch k {
	case knobDevices:
		return "", nil // see write
	case knobIOWeight:
		v, _, err := b.readIOWeight(path)
		return v, err
	}
	name := v2File(k)
	data, err := cgroupfs.ReadFile(filepath.Join(b.layout.Unified, path, name))
	v := strings.TrimSpace(string(data))
	switch k {
	case knobCPUs, knobMems:
		v = canonicalCPUs(v)
	case knobQuota:
		// "max 100000" or "<quota> 100000"
		q, p, _ := strings.Cut(v, " ")
		switch {
		case q == "max":
			v = "-1"
		case p != strconv.Itoa(translate.PeriodMicros):
			v = q + "/" + p
		default:
			v = q
		}
	case knobMemoryLimit, knobMemoryHigh, knobMemoryLow, knobMemoryMin:
		if v == "max" {
			v = "-1"
		}
	case knobIOMax:
		limits, perr := translate.ParseIOMax(v)
		if perr != nil && err == nil {
			err = perr
		}
		v = translate.IOMax(limits)
	}
	return v, err
}

// readIOWeight reads the cgroup-wide weight from io.weight (io.cost) or, without it,
// io.bfq.weight, and says which file it was.
func (b *v2Backend) readIOWeight(path string) (value, file string, err error) {
	for _, name := range []string{"io.weight", "io.bfq.weight"} {
		data, rerr := os.ReadFile(filepath.Join(b.layout.Unified, path, name))
		if rerr == nil {
			return ioWeightValue(strings.TrimSpace(string(data))), name, nil
		}
		err = rerr
	}
	return "", "", err
}

// writeIOMax writes one io.max line per device (the file takes one per write): each wanted
// device's rates, and "max" for every device throttled now but not wanted.
func (b *v2Backend) writeIOMax(path, value string) error {
	want, err := translate.ParseIOMax(value)
	if err != nil {
		return err
	}
	file := filepath.Join(b.layout.Unified, path, "io.max")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	want = clearingUnwanted(want, string(data))
	var errs []error
	for _, l := range want {
		if !deviceGone(l.Device) {
			errs = append(errs, writeFile(file, translate.IOMaxLine(l)))
		}
	}
	return errors.Join(errs...)
}

func (b *v2Backend) supports(k knob) bool { return k != knobMemoryOOMWait && k != knobCPUBalance }

func (b *v2Backend) write(path string, k knob, value string) error {
	switch {
	case k == knobDevices:
		// v2 filters devices with an eBPF program attached by the runtime; tidal does not
		// replace it (NVIDIA_VISIBLE_DEVICES still limits what the toolkit exposes).
		return nil
	case k == knobIdle, k == knobBurst:
		return writeFile(filepath.Join(b.layout.Unified, path, v2File(k)), value)
	case k == knobIOMax:
		return b.writeIOMax(path, value)
	case k == knobIOWeight:
		_, name, err := b.readIOWeight(path)
		if err != nil {
			return err
		}
		return writeFile(filepath.Join(b.layout.Unified, path, name), "default "+value)
	case k == knobMemoryLimit && value == "-1":
		return writeFile(filepath.Join(b.layout.Unified, path, "memory.max"), "max")
	case k == knobMemoryHigh || k == knobMemoryLow || k == knobMemoryMin:
		n, _ := strconv.ParseInt(value, 10, 64)
		return writeFile(filepath.Join(b.layout.Unified, path, v2File(k)), translate.MemoryFile(n))
	}
	m, err := b.manager(path)
	if err != nil {
		return err
	}
	r := &cgroup2.Resources{}
	switch k {
	case knobCPUs:
		r.CPU = &cgroup2.CPU{Cpus: value}
	case knobMems:
		r.CPU = &cgroup2.CPU{Mems: value}
	case knobShares:
		w, _ := strconv.ParseUint(value, 10, 64)
		r.CPU = &cgroup2.CPU{Weight: &w}
	case knobQuota:
		var q *int64
		if n, _ := strconv.ParseInt(value, 10, 64); n >= 0 {
			q = &n
		}
		p := uint64(translate.PeriodMicros)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(q, &p)}
	case knobMemoryLimit:
		n, _ := strconv.ParseInt(value, 10, 64)
		r.Memory = &cgroup2.Memory{Max: &n}
	}
	return m.Update(r)
}

// v2File is the unified-hierarchy file behind a knob.
func v2File(k knob) string {
	return [...]string{"cpuset.cpus", "cpuset.mems", "cpu.idle", "cpu.weight", "cpu.max", "memory.max", "", "cpu.max.burst",
		"memory.high", "memory.low", "memory.min", "", "io.max", "io.weight", ""}[k]
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	return errors.Join(werr, f.Close())
}

// clearingUnwanted is want plus a "no limit" entry for every device throttled now (in
// current, io.max's form) that want leaves out: a disk no longer lent on is not left
// throttled.
func clearingUnwanted(want []plugins.IOLimit, current string) []plugins.IOLimit {
	have, _ := translate.ParseIOMax(current)
	wanted := map[string]bool{}
	for _, l := range want {
		wanted[l.Device] = true
	}
	for _, l := range have {
		if !wanted[l.Device] {
			want = append(want, plugins.IOLimit{Device: l.Device})
		}
	}
	return want
}
