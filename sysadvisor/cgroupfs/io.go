package cgroupfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// IOCounters are a cgroup's cumulative IO on one device.
type IOCounters struct {
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64
}

// IOStat is the IO cgroup rel and its descendants issued, by "MAJ:MIN": v1's
// blkio.throttle.io_service_{bytes,ios}_recursive (counted where throttling happens, so
// buffered writes written back by the kernel's flusher are missing: they are the root's),
// v2's io.stat.
func (l *Layout) IOStat(rel string) (map[string]IOCounters, error) {
	out := map[string]IOCounters{}
	if l.Version == V2 {
		data, err := os.ReadFile(filepath.Join(l.Dir("io", rel), "io.stat"))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			var c IOCounters
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseUint(v, 10, 64)
				switch k {
				case "rbytes":
					c.ReadBytes = n
				case "wbytes":
					c.WriteBytes = n
				case "rios":
					c.Reads = n
				case "wios":
					c.Writes = n
				}
			}
			out[f[0]] = c
		}
		return out, nil
	}
	for _, file := range []string{"blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"} {
		data, err := os.ReadFile(filepath.Join(l.Dir("blkio", rel), file))
		if err != nil {
			return nil, err
		}
		bytes := strings.Contains(file, "bytes")
		for _, line := range strings.Split(string(data), "\n") {
			// "8:16 Read 4096"; the last line is "Total N".
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			n, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				continue
			}
			c := out[f[0]]
			switch {
			case f[1] == "Read" && bytes:
				c.ReadBytes = n
			case f[1] == "Write" && bytes:
				c.WriteBytes = n
			case f[1] == "Read":
				c.Reads = n
			case f[1] == "Write":
				c.Writes = n
			}
			out[f[0]] = c
		}
	}
	return out, nil
}

// IOPressure is cgroup rel's IO pressure, "some avg10" (percent), from io.pressure (cgroup
// v2; v1 has no per-cgroup pressure here).
func (l *Layout) IOPressure(rel string) (float64, error) {
	data, err := os.ReadFile(filepath.Join(l.Dir("io", rel), "io.pressure"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "some" {
			continue
		}
		if v, ok := strings.CutPrefix(f[1], "avg10="); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s/io.pressure: no some avg10", rel)
}
