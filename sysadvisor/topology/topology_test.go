package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// writeTree creates files (path relative to root -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cpuFiles adds the topology files of one CPU.
func cpuFiles(files map[string]string, cpu, socket, coreID int) {
	dir := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", cpu)
	files[dir+"physical_package_id"] = fmt.Sprintf("%d\n", socket)
	files[dir+"core_id"] = fmt.Sprintf("%d\n", coreID)
}

// twoSocketTree is 2 sockets x 2 cores x 2 threads, one NUMA node per socket,
// siblings 0,4 / 1,5 / 2,6 / 3,7 as Intel numbers them. core_id repeats on
// each socket. node2 is memory-only (CXL-like), node3 is empty, and CPU 8 is
// offline.
func twoSocketTree(t *testing.T) string {
	t.Helper()
	files := map[string]string{
		"devices/system/cpu/online":                "0-7\n",
		"devices/system/node/online":               "0-3\n",
		"devices/system/node/possible":             "0-3\n",
		"devices/system/node/node0/cpulist":        "0-1,4-5\n",
		"devices/system/node/node0/meminfo":        "Node 0 MemTotal:       16384 kB\nNode 0 MemFree:        1024 kB\n",
		"devices/system/node/node1/cpulist":        "2-3,6-8\n", // 8 is offline
		"devices/system/node/node1/meminfo":        "Node 1 MemTotal:       32768 kB\n",
		"devices/system/node/node2/cpulist":        "\n",
		"devices/system/node/node2/meminfo":        "Node 2 MemTotal:       8192 kB\n",
		"devices/system/node/node3/cpulist":        "\n",
		"devices/system/node/node3/meminfo":        "Node 3 MemTotal:       0 kB\n",
		"devices/system/cpu/cpu8/topology/core_id": "9\n",
	}
	for cpu := range 8 {
		socket := cpu % 4 / 2
		coreID := cpu % 2
		cpuFiles(files, cpu, socket, coreID)
	}
	root := t.TempDir()
	writeTree(t, root, files)
	return root
}

func TestDiscoverTwoSocketHyperthreaded(t *testing.T) {
	root := twoSocketTree(t)
	topo, err := Discover(root, filepath.Join(root, "no-proc-needed"))
	if err != nil {
		t.Fatal(err)
	}

	if got, want := topo.AllCPUs(), cpuset.New(0, 1, 2, 3, 4, 5, 6, 7); !got.Equals(want) {
		t.Errorf("AllCPUs = %s, want %s", got, want)
	}
	for i, c := range topo.CPUs {
		if c.ID != i {
			t.Fatalf("CPUs not sorted by ID: %+v", topo.CPUs)
		}
	}

	var nodeIDs []int
	for _, n := range topo.NUMANodes {
		nodeIDs = append(nodeIDs, n.ID)
	}
	if fmt.Sprint(nodeIDs) != "[0 1 2]" {
		t.Errorf("NUMA node IDs = %v, want [0 1 2] (node3 is empty)", nodeIDs)
	}
	if got := topo.CPUsOfNUMA(1); !got.Equals(cpuset.New(2, 3, 6, 7)) {
		t.Errorf("CPUsOfNUMA(1) = %s, want 2-3,6-7 (offline CPU 8 dropped)", got)
	}
	if got := topo.CPUsOfNUMA(2); !got.IsEmpty() {
		t.Errorf("CPUsOfNUMA(2) = %s, want empty (memory-only node)", got)
	}
	if got := topo.CPUsOfNUMA(9); !got.IsEmpty() {
		t.Errorf("CPUsOfNUMA(9) = %s, want empty (unknown node)", got)
	}

	for cpu, want := range map[int]int{0: 0, 5: 0, 2: 1, 7: 1, 8: -1, 100: -1} {
		if got := topo.NUMANodeOf(cpu); got != want {
			t.Errorf("NUMANodeOf(%d) = %d, want %d", cpu, got, want)
		}
	}

	// core_id 0 exists on both sockets; siblings must not mix them.
	for cpu, want := range map[int]cpuset.CPUSet{
		0: cpuset.New(0, 4),
		4: cpuset.New(0, 4),
		1: cpuset.New(1, 5),
		2: cpuset.New(2, 6),
		7: cpuset.New(3, 7),
		8: cpuset.New(),
	} {
		if !topo.SMT() {
			t.Error("SMT() false with two threads per core")
		}
		if got := topo.CoreSiblings(cpu); !got.Equals(want) {
			t.Errorf("CoreSiblings(%d) = %s, want %s", cpu, got, want)
		}
	}
	if topo.CPUs[2].Socket != 1 || topo.CPUs[0].Socket != 0 {
		t.Errorf("sockets wrong: %+v", topo.CPUs)
	}

	if got, want := topo.TotalMemory(), int64(16384+32768+8192)*1024; got != want {
		t.Errorf("TotalMemory = %d, want %d", got, want)
	}
}

func TestDiscoverWithoutNUMA(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"sys/devices/system/cpu/online": "0-3\n",
		"proc/meminfo":                  "MemTotal:        4096 kB\nMemFree:         1024 kB\n",
	}
	for cpu := range 4 {
		dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/", cpu)
		files[dir+"physical_package_id"] = "0\n"
		files[dir+"core_id"] = fmt.Sprintf("%d\n", cpu)
	}
	writeTree(t, root, files)

	topo, err := Discover(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.NUMANodes) != 1 || topo.NUMANodes[0].ID != 0 {
		t.Fatalf("NUMANodes = %+v, want one node 0", topo.NUMANodes)
	}
	if got := topo.CPUsOfNUMA(0); !got.Equals(cpuset.New(0, 1, 2, 3)) {
		t.Errorf("CPUsOfNUMA(0) = %s, want 0-3", got)
	}
	if got := topo.TotalMemory(); got != 4096*1024 {
		t.Errorf("TotalMemory = %d, want %d", got, 4096*1024)
	}
	if topo.SMT() {
		t.Error("SMT() true with one thread per core")
	}
	if got := topo.CoreSiblings(3); !got.Equals(cpuset.New(3)) {
		t.Errorf("CoreSiblings(3) = %s, want 3 (no SMT)", got)
	}
}

func TestDiscoverErrorsNameTheFile(t *testing.T) {
	tests := []struct {
		name     string
		rel      string // file in the two-socket tree to overwrite or remove
		content  string
		remove   bool
		wantPath string
	}{
		{"malformed online", "devices/system/cpu/online", "0-x\n", false, "devices/system/cpu/online"},
		{"malformed core_id", "devices/system/cpu/cpu3/topology/core_id", "three\n", false, "cpu3/topology/core_id"},
		{"missing package id", "devices/system/cpu/cpu5/topology/physical_package_id", "", true, "cpu5/topology/physical_package_id"},
		{"malformed cpulist", "devices/system/node/node1/cpulist", "2-", false, "node1/cpulist"},
		{"malformed meminfo", "devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n", false, "node0/meminfo"},
		{"no MemTotal", "devices/system/node/node1/meminfo", "Node 1 MemFree: 1 kB\n", false, "node1/meminfo"},
		{"CPU in two nodes", "devices/system/node/node2/cpulist", "3\n", false, "cpulist"},
		{"CPU in no node", "devices/system/node/node0/cpulist", "0-1\n", false, "devices/system/node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := twoSocketTree(t)
			p := filepath.Join(root, tc.rel)
			var err error
			if tc.remove {
				err = os.Remove(p)
			} else {
				err = os.WriteFile(p, []byte(tc.content), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = Discover(root, root)
			if err == nil {
				t.Fatal("Discover succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Errorf("error %q does not name %s", err, tc.wantPath)
			}
		})
	}
}

// TestDiscoverRealSys runs against this machine's /sys.
func TestDiscoverRealSys(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu/online"); err != nil {
		t.Skipf("no sysfs here: %v", err)
	}
	topo, err := Discover("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.CPUs) < 1 {
		t.Fatal("found no CPUs")
	}
	if topo.TotalMemory() <= 0 {
		t.Errorf("TotalMemory = %d, want > 0", topo.TotalMemory())
	}
	for _, c := range topo.CPUs {
		in := 0
		for _, n := range topo.NUMANodes {
			if n.CPUs.Contains(c.ID) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("CPU %d is in %d NUMA nodes, want exactly 1", c.ID, in)
		}
		if !topo.CoreSiblings(c.ID).Contains(c.ID) {
			t.Errorf("CoreSiblings(%d) = %s lacks the CPU itself", c.ID, topo.CoreSiblings(c.ID))
		}
	}
	t.Logf("CPUs %s, %d NUMA node(s), %d MiB", topo.AllCPUs(), len(topo.NUMANodes), topo.TotalMemory()>>20)
}
