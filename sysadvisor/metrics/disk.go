package metrics

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DiskStat is one block device's cumulative counters from /proc/diskstats.
type DiskStat struct {
	Name                    string
	Reads, Writes           uint64 // IOs completed
	ReadBytes, WriteBytes   uint64
	ReadTicks, WriteTicks   uint64 // ms spent by reads and writes, summed over IOs
	TimeInQueue, BusyMillis uint64 // weighted ms in queue; ms the device had IO in flight
}

// ReadDiskStats reads /proc/diskstats, keyed by "MAJ:MIN".
func ReadDiskStats(procRoot string) (map[string]DiskStat, error) {
	f, err := os.Open(filepath.Join(procRoot, "diskstats"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]DiskStat{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// major minor name reads rmerged rsectors rticks writes wmerged wsectors wticks
		// inflight ioticks timeinqueue [discards... flushes...]
		fl := strings.Fields(s.Text())
		if len(fl) < 14 {
			continue
		}
		var n [11]uint64
		ok := true
		for i := range n {
			if n[i], err = strconv.ParseUint(fl[3+i], 10, 64); err != nil {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		out[fl[0]+":"+fl[1]] = DiskStat{Name: fl[2], Reads: n[0], ReadBytes: n[2] * 512, ReadTicks: n[3],
			Writes: n[4], WriteBytes: n[6] * 512, WriteTicks: n[7], BusyMillis: n[9], TimeInQueue: n[10]}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("diskstats: %w", err)
	}
	return out, nil
}

// Disk is a whole block device of the node.
type Disk struct {
	Name   string // "vda"
	Device string // "254:0"
	// Scheduler is the IO scheduler in use ("mq-deadline", "bfq", "none").
	Scheduler string
}

// virtualDisk says a /sys/block name is not a disk of the node's own (loop, RAM, compressed
// RAM, device-mapper and md stacks over real disks, optical, floppy, network block devices):
// throttling those would count IO twice or throttle memory.
func virtualDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// WholeDisks lists the node's real disks from sysRoot/block (/sys/block).
func WholeDisks(sysRoot string) ([]Disk, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return nil, err
	}
	var out []Disk
	for _, e := range entries {
		if virtualDisk(e.Name()) {
			continue
		}
		if d, err := ReadDisk(sysRoot, e.Name()); err == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// ReadDisk reads one /sys/block entry.
func ReadDisk(sysRoot, name string) (Disk, error) {
	dir := filepath.Join(sysRoot, "block", name)
	dev, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return Disk{}, err
	}
	d := Disk{Name: name, Device: strings.TrimSpace(string(dev))}
	if sched, err := os.ReadFile(filepath.Join(dir, "queue", "scheduler")); err == nil {
		d.Scheduler = activeScheduler(string(sched))
	}
	return d, nil
}

// activeScheduler is the bracketed entry of a queue/scheduler file ("none [bfq]").
func activeScheduler(s string) string {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return strings.TrimSpace(s)
}

// DiskByDevice finds the /sys/block entry of a "MAJ:MIN" device number.
func DiskByDevice(sysRoot, device string) (Disk, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return Disk{}, err
	}
	for _, e := range entries {
		if d, err := ReadDisk(sysRoot, e.Name()); err == nil && d.Device == device {
			return d, nil
		}
	}
	return Disk{}, fmt.Errorf("no block device %s in %s/block", device, sysRoot)
}
