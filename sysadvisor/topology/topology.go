// Package topology discovers the node's CPUs, physical cores and NUMA nodes
// from sysfs. The advisor and the resource plugins use it to build NUMA-local
// CPU pools and to keep hyperthread siblings together.
//
// Discover reads the tree once; a Topology is a plain value afterwards (no
// caches, no background refresh), so callers can build one by hand in tests.
package topology

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// CPU is one online logical CPU (a hardware thread).
type CPU struct {
	ID int
	// Core is a node-unique key for the physical core: the kernel's core_id
	// repeats on every socket, so it is combined with the socket here. CPUs
	// with the same Core are hyperthread siblings.
	Core     int
	Socket   int // physical_package_id
	NUMANode int
}

// NUMANode is one NUMA node that has CPUs, memory or both.
type NUMANode struct {
	ID          int
	CPUs        cpuset.CPUSet // online CPUs only; empty for a memory-only node
	MemoryBytes int64         // MemTotal of the node
}

// Topology is the node's CPU and memory layout.
type Topology struct {
	CPUs      []CPU      // sorted by ID, online only
	NUMANodes []NUMANode // sorted by ID, only nodes with CPUs or memory
}

// Discover reads the topology under sysRoot and procRoot ("/sys" and "/proc"
// in production). procRoot is used only on kernels without NUMA support,
// where the whole node's memory comes from procRoot/meminfo.
func Discover(sysRoot, procRoot string) (*Topology, error) {
	cpuDir := filepath.Join(sysRoot, "devices", "system", "cpu")
	online, err := readCPUList(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, err
	}
	if online.IsEmpty() {
		return nil, fmt.Errorf("topology: %s lists no online CPUs", filepath.Join(cpuDir, "online"))
	}

	cpus, err := readCPUs(cpuDir, online)
	if err != nil {
		return nil, err
	}

	nodeDir := filepath.Join(sysRoot, "devices", "system", "node")
	nodes, err := readNUMANodes(nodeDir, online)
	if err != nil {
		return nil, err
	}
	if nodes == nil {
		// No NUMA in this kernel: the whole machine is node 0.
		memPath := filepath.Join(procRoot, "meminfo")
		mem, err := readMemTotal(memPath)
		if err != nil {
			return nil, err
		}
		nodes = []NUMANode{{ID: 0, CPUs: online, MemoryBytes: mem}}
	}

	// Every online CPU must sit in exactly one node, or NUMA-local pools
	// built from this topology would be wrong.
	for i := range cpus {
		cpus[i].NUMANode = -1
		for _, n := range nodes {
			if !n.CPUs.Contains(cpus[i].ID) {
				continue
			}
			if cpus[i].NUMANode != -1 {
				return nil, fmt.Errorf("topology: CPU %d is listed in node%d/cpulist and node%d/cpulist under %s",
					cpus[i].ID, cpus[i].NUMANode, n.ID, nodeDir)
			}
			cpus[i].NUMANode = n.ID
		}
		if cpus[i].NUMANode == -1 {
			return nil, fmt.Errorf("topology: online CPU %d is in no node*/cpulist under %s", cpus[i].ID, nodeDir)
		}
	}

	return &Topology{CPUs: cpus, NUMANodes: nodes}, nil
}

// readCPUs reads socket and core of each online CPU and gives each distinct
// (socket, core_id) pair a dense Core key, numbered in (socket, core_id) order.
func readCPUs(cpuDir string, online cpuset.CPUSet) ([]CPU, error) {
	type coreKey struct{ socket, coreID int }
	byKey := func(a, b coreKey) int {
		return cmp.Or(cmp.Compare(a.socket, b.socket), cmp.Compare(a.coreID, b.coreID))
	}
	ids := online.List() // sorted
	cpus := make([]CPU, 0, len(ids))
	keys := make([]coreKey, 0, len(ids))
	for _, id := range ids {
		topoDir := filepath.Join(cpuDir, fmt.Sprintf("cpu%d", id), "topology")
		socket, err := readInt(filepath.Join(topoDir, "physical_package_id"))
		if err != nil {
			return nil, err
		}
		coreID, err := readInt(filepath.Join(topoDir, "core_id"))
		if err != nil {
			return nil, err
		}
		cpus = append(cpus, CPU{ID: id, Socket: socket})
		keys = append(keys, coreKey{socket, coreID})
	}

	distinct := slices.Clone(keys)
	slices.SortFunc(distinct, byKey)
	distinct = slices.Compact(distinct)
	for i, k := range keys {
		cpus[i].Core, _ = slices.BinarySearchFunc(distinct, k, byKey)
	}
	return cpus, nil
}

// readNUMANodes reads nodeDir/node<N>/{cpulist,meminfo}. It returns nil, nil
// when the kernel exposes no nodes (built without CONFIG_NUMA).
func readNUMANodes(nodeDir string, online cpuset.CPUSet) ([]NUMANode, error) {
	entries, err := os.ReadDir(nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}

	var nodes []NUMANode
	for _, e := range entries {
		id, ok := nodeID(e.Name())
		if !ok {
			continue // "online", "possible", "has_cpu", ... are not nodes
		}
		dir := filepath.Join(nodeDir, e.Name())
		cpus, err := readCPUList(filepath.Join(dir, "cpulist"))
		if err != nil {
			return nil, err
		}
		// Offline CPUs can linger in a node's list; only online ones count.
		cpus = cpus.Intersection(online)
		mem, err := readMemTotal(filepath.Join(dir, "meminfo"))
		if err != nil {
			return nil, err
		}
		if cpus.IsEmpty() && mem == 0 {
			continue // possible but unpopulated node
		}
		nodes = append(nodes, NUMANode{ID: id, CPUs: cpus, MemoryBytes: mem})
	}
	// ReadDir sorts by name, so node10 comes before node2.
	slices.SortFunc(nodes, func(a, b NUMANode) int { return cmp.Compare(a.ID, b.ID) })
	return nodes, nil
}

// nodeID parses "node<N>".
func nodeID(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "node")
	if !ok || digits == "" {
		return 0, false
	}
	id, err := strconv.Atoi(digits)
	return id, err == nil && id >= 0
}

// readMemTotal returns MemTotal in bytes from a meminfo file. It reads both
// /proc/meminfo ("MemTotal: N kB") and a node's meminfo ("Node 0 MemTotal: N kB").
func readMemTotal(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("topology: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		i := slices.Index(fields, "MemTotal:")
		if i < 0 {
			continue
		}
		if len(fields) != i+3 || fields[i+2] != "kB" {
			return 0, fmt.Errorf("topology: %s: malformed MemTotal line %q", path, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(fields[i+1], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("topology: %s: malformed MemTotal line %q", path, strings.TrimSpace(line))
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("topology: %s: no MemTotal line", path)
}

// readCPUList parses a kernel CPU list file such as "0-3,8-11".
func readCPUList(path string) (cpuset.CPUSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), fmt.Errorf("topology: %w", err)
	}
	set, err := cpuset.Parse(strings.TrimSpace(string(data)))
	if err != nil {
		return cpuset.New(), fmt.Errorf("topology: %s: %w", path, err)
	}
	return set, nil
}

// readInt parses a file holding one decimal integer. physical_package_id can
// be -1 on some virtual machines, so negatives are accepted.
func readInt(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("topology: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("topology: %s: %w", path, err)
	}
	return v, nil
}

// AllCPUs returns every online CPU.
func (t *Topology) AllCPUs() cpuset.CPUSet {
	ids := make([]int, len(t.CPUs))
	for i, c := range t.CPUs {
		ids[i] = c.ID
	}
	return cpuset.New(ids...)
}

// NUMANodeOf returns the node of cpu, or -1 if cpu is not an online CPU.
func (t *Topology) NUMANodeOf(cpu int) int {
	c, ok := t.cpu(cpu)
	if !ok {
		return -1
	}
	return c.NUMANode
}

// CPUsOfNUMA returns the online CPUs of node; empty for an unknown node.
func (t *Topology) CPUsOfNUMA(node int) cpuset.CPUSet {
	for _, n := range t.NUMANodes {
		if n.ID == node {
			return n.CPUs
		}
	}
	return cpuset.New()
}

// CoreSiblings returns every online CPU on cpu's physical core, cpu included;
// empty if cpu is not an online CPU.
func (t *Topology) CoreSiblings(cpu int) cpuset.CPUSet {
	c, ok := t.cpu(cpu)
	if !ok {
		return cpuset.New()
	}
	var ids []int
	for _, o := range t.CPUs {
		if o.Core == c.Core {
			ids = append(ids, o.ID)
		}
	}
	return cpuset.New(ids...)
}

// SMT says whether some physical core has more than one online CPU (hardware threads).
func (t *Topology) SMT() bool {
	cores := map[int]bool{}
	for _, c := range t.CPUs {
		if cores[c.Core] {
			return true
		}
		cores[c.Core] = true
	}
	return false
}

// TotalMemory returns the sum of MemTotal over all nodes, in bytes.
func (t *Topology) TotalMemory() int64 {
	var sum int64
	for _, n := range t.NUMANodes {
		sum += n.MemoryBytes
	}
	return sum
}

// cpu finds an online CPU by ID; t.CPUs is sorted by ID.
func (t *Topology) cpu(id int) (CPU, bool) {
	i, ok := slices.BinarySearchFunc(t.CPUs, id, func(c CPU, id int) int { return cmp.Compare(c.ID, id) })
	if !ok {
		return CPU{}, false
	}
	return t.CPUs[i], true
}
