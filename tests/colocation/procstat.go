package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture tidal runs on (it is part of the kernel's user-space ABI).
const userHZ = 100

// processCPU is the CPU time a process has used (user + system) from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its closing parenthesis,
	// where field 3 (state) comes first, so utime (14) and stime (15) are at 11 and 12.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// memoryStatus reads a "kB" line of /proc/<pid>/status (VmHWM: peak resident set; VmRSS: now)
// in bytes.
func memoryStatus(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s: %v", pid, key, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s line", pid, key)
}

// cpuUsage is a process's CPU use between two readings, as a percentage of one core.
type cpuUsage struct {
	at   time.Time
	used time.Duration
}

func readCPUUsage(pid int) (cpuUsage, error) {
	used, err := processCPU(pid)
	return cpuUsage{at: time.Now(), used: used}, err
}

// percentSince is the use from an earlier reading to this one, in % of one core.
func (u cpuUsage) percentSince(earlier cpuUsage) float64 {
	wall := u.at.Sub(earlier.at)
	if wall <= 0 {
		return 0
	}
	return 100 * float64(u.used-earlier.used) / float64(wall)
}

// nodeCPU is one reading of the whole node's CPU time, summed over CPUs (seconds).
type nodeCPU struct {
	At                 time.Time
	Busy, Total, Steal float64 // Busy includes Steal
}

func readNodeCPU() (nodeCPU, error) {
	times, err := metrics.ReadCPUTimes("/proc")
	if err != nil {
		return nodeCPU{}, err
	}
	n := nodeCPU{At: time.Now()}
	for _, t := range times {
		n.Busy += t.Busy
		n.Total += t.Total
		n.Steal += t.Steal
	}
	return n, nil
}

// nodeUtilization is the node's mean CPU utilization (%) from from to to, interpolated
// between the readings around those times; NaN without readings.
func nodeUtilization(samples []nodeCPU, from, to time.Time) float64 {
	return nodeShare(samples, from, to, func(n nodeCPU) float64 { return n.Busy })
}

// hostSteal is the share (%) of the node's CPU time from from to to that its hypervisor gave
// to something else while the node had work: on a shared host, the noise a round suffered
// that no scenario caused.
func hostSteal(samples []nodeCPU, from, to time.Time) float64 {
	return nodeShare(samples, from, to, func(n nodeCPU) float64 { return n.Steal })
}

// nodeShare is part(t)'s growth from from to to as a percentage of the node's total CPU time.
func nodeShare(samples []nodeCPU, from, to time.Time, part func(nodeCPU) float64) float64 {
	num, total := cumulative{}, cumulative{}
	for _, s := range samples {
		num = append(num, point{s.At, part(s)})
		total = append(total, point{s.At, s.Total})
	}
	dt := total.delta(from, to)
	if !(dt > 0) {
		return math.NaN()
	}
	return 100 * num.delta(from, to) / dt
}
