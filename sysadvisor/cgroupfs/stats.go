package cgroupfs

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CPUUsage is the cumulative CPU time used by cgroup rel and its descendants.
func (l *Layout) CPUUsage(rel string) (time.Duration, error) {
	if l.Version == V1 {
		v, err := readInt(filepath.Join(l.Dir("cpuacct", rel), "cpuacct.usage"))
		return time.Duration(v), err
	}
	v, err := readKey(filepath.Join(l.Dir("cpu", rel), "cpu.stat"), "usage_usec")
	return time.Duration(v) * time.Microsecond, err
}

// MemoryUsage is the working set of cgroup rel: usage less inactive page cache, the figure
// kubelet evicts on and the kernel reclaims last.
func (l *Layout) MemoryUsage(rel string) (int64, error) {
	dir := l.Dir("memory", rel)
	if l.Version == V1 {
		usage, err := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return 0, err
		}
		inactive, err := readKey(filepath.Join(dir, "memory.stat"), "total_inactive_file")
		if err != nil {
			return 0, err
		}
		return max(usage-inactive, 0), nil
	}
	usage, err := readInt(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, err
	}
	inactive, err := readKey(filepath.Join(dir, "memory.stat"), "inactive_file")
	if err != nil {
		return 0, err
	}
	return max(usage-inactive, 0), nil
}

// MemoryStat is what the memory controller says of one cgroup and its descendants, in bytes.
type MemoryStat struct {
	// WorkingSet is usage less inactive page cache (as MemoryUsage).
	WorkingSet int64
	// ActiveFile is its active page cache.
	ActiveFile int64
	// UnderOOM: v1 with oom_kill_disable, its tasks wait at the hard limit.
	UnderOOM bool
}

// MemoryStat reads cgroup rel's working set, active page cache and (v1) OOM state.
func (l *Layout) MemoryStat(rel string) (MemoryStat, error) {
	dir := l.Dir("memory", rel)
	usageFile, prefix := "memory.current", ""
	if l.Version == V1 {
		usageFile, prefix = "memory.usage_in_bytes", "total_"
	}
	usage, err := readInt(filepath.Join(dir, usageFile))
	if err != nil {
		return MemoryStat{}, err
	}
	keys, err := readKeys(filepath.Join(dir, "memory.stat"), prefix+"inactive_file", prefix+"active_file")
	if err != nil {
		return MemoryStat{}, err
	}
	st := MemoryStat{WorkingSet: max(usage-keys[0], 0), ActiveFile: keys[1]}
	if l.Version == V1 {
		oom, err := readKeys(filepath.Join(dir, "memory.oom_control"), "under_oom")
		if err != nil {
			return MemoryStat{}, err
		}
		st.UnderOOM = oom[0] != 0
	}
	return st, nil
}

// readKeys reads the values of keys in a flat keyed file, in one pass; a missing key is an
// error.
func readKeys(path string, keys ...string) ([]int64, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, want := range keys {
			if k == want {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, k, err)
				}
				out[i] = n
				found++
			}
		}
	}
	if found < len(keys) {
		return nil, fmt.Errorf("%s: want lines %v", path, keys)
	}
	return out, nil
}

// Procs lists the processes in cgroup rel (and its descendants when recursive).
func (l *Layout) Procs(rel string, recursive bool) ([]int, error) {
	return l.ids(rel, "cgroup.procs", recursive)
}

// Children lists the names of the child cgroups of rel.
func (l *Layout) Children(rel string) ([]string, error) {
	entries, err := os.ReadDir(l.Dir("cpu", rel))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func readInt(path string) (int64, error) {
	data, err := ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readKey reads the value of "key value" in a flat keyed file such as cpu.stat or memory.stat.
func readKey(path, key string) (int64, error) {
	data, err := ReadFile(path)
	if err != nil {
		return 0, err
	}
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no %q line", path, key)
}

// CPUs reads the cpuset of cgroup rel (used to rebuild state after a restart).
func (l *Layout) CPUs(rel string) (string, error) {
	data, err := ReadFile(filepath.Join(l.Dir("cpuset", rel), "cpuset.cpus"))
	return strings.TrimSpace(string(data)), err
}

// CPUCounter reads a cgroup's cumulative CPU time again and again through a file kept open:
// the fast path reads it a hundred times a second, and opening a cgroup file costs more than
// reading it.
type CPUCounter struct {
	f   *os.File
	fd  int // f's descriptor, for a plain pread
	v2  bool
	buf []byte
}

// CPUCounterPath is the file holding cgroup rel's cumulative CPU time: cpuacct.usage
// (nanoseconds) on v1, cpu.stat (its usage_usec line) on v2.
func (l *Layout) CPUCounterPath(rel string) string {
	if l.Version == V2 {
		return filepath.Join(l.Dir("cpu", rel), "cpu.stat")
	}
	return filepath.Join(l.Dir("cpuacct", rel), "cpuacct.usage")
}

// OpenCPUCounter opens the CPU counter of cgroup rel.
func (l *Layout) OpenCPUCounter(rel string) (*CPUCounter, error) {
	f, err := os.Open(l.CPUCounterPath(rel))
	if err != nil {
		return nil, err
	}
	return &CPUCounter{f: f, fd: int(f.Fd()), v2: l.Version == V2, buf: make([]byte, 4096)}, nil
}

// Read returns the CPU time used so far.
func (c *CPUCounter) Read() (time.Duration, error) {
	// One pread: a counter file is far shorter than the buffer, and File.ReadAt would read
	// again to see EOF, doubling the fast path's system calls.
	n, err := unix.Pread(c.fd, c.buf, 0)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: read: %w", c.f.Name(), cmp.Or(err, io.ErrUnexpectedEOF))
	}
	data := c.buf[:n]
	if !c.v2 {
		v, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.f.Name(), err)
		}
		return time.Duration(v), nil
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("usage_usec ")); ok {
			us, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", c.f.Name(), err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("%s: no usage_usec line", c.f.Name())
}

// Close closes the file.
func (c *CPUCounter) Close() error { return c.f.Close() }
