// Package interference measures whether online work is being hurt by the work beside it, the
// same way on cgroup v1 and v2: how long its threads wait in the CPU run queue for each unit
// of CPU they run (/proc/<tid>/schedstat), and how often its own CFS quota throttles it
// (cpu.stat); and, where the hardware counts them, the cycles its threads spent per
// instruction (perf events: cache and memory-bandwidth interference, which the wait does not
// show). CPU usage alone cannot tell these apart from demand: a server whose requests wait
// behind offline work uses no more CPU, it only answers later.
package interference

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/perfcount"
)

// Group is one online workload to measure.
type Group struct {
	Name   string
	Cgroup string
	// Recursive counts the threads of child cgroups too (a pod's are in its containers').
	Recursive bool
}

// Reading is what a group's threads did between two Reads. Threads that started or ended in
// between are left out of both figures, so the ratio stays true while they come and go.
type Reading struct {
	Group
	// Run is the CPU time its threads ran, Wait the time they were runnable but waited for a
	// CPU.
	Run, Wait time.Duration
	// Periods and Throttled are its CFS bandwidth periods and those in which its quota ran
	// out (both 0 without a quota).
	Periods, Throttled int64
	// Cycles and Instructions are what its threads' CPUs did, counted only after CountCPI
	// (and from at most maxCountedThreads threads).
	Cycles, Instructions uint64
	// Err is set when the group could not be read (its cgroup just went away).
	Err error
	// First: the group was read for the first time, so its figures are only a baseline.
	First bool
}

// WaitRatio is run-queue wait per unit of CPU run: 0.1 means the threads waited 1 ms for
// every 10 ms they ran.
func (r Reading) WaitRatio() float64 {
	if r.Run <= 0 {
		return 0
	}
	return float64(r.Wait) / float64(r.Run)
}

// CPI is cycles per instruction, 0 when no instructions were counted.
func (r Reading) CPI() float64 {
	if r.Instructions == 0 {
		return 0
	}
	return float64(r.Cycles) / float64(r.Instructions)
}

// ThrottledRatio is the fraction of CFS periods in which the group was throttled.
func (r Reading) ThrottledRatio() float64 {
	if r.Periods <= 0 {
		return 0
	}
	return float64(r.Throttled) / float64(r.Periods)
}

// taskTimes are one thread's cumulative schedstat figures at the round it was last read.
type taskTimes struct {
	run, wait time.Duration
	round     uint64
	// listed is the last round the thread was in its group's list.
	listed uint64
	// active: the thread ran or waited between its last two readings (or is new), so it is
	// read every round; an idle one only in its turn (idleReadsPerRound).
	active bool
}

// idleReadsPerRound bounds how many of a group's idle threads (those that neither ran nor
// waited between their last two readings) one Read looks at; the rest wait their turn. A JVM
// or a thread-pool server has hundreds of threads of which a few run: reading every one's
// schedstat twice a second would cost more than the rest of the agent, and an idle thread adds
// nothing to either sum. One that wakes up is found within ceil(idle/idleReadsPerRound) rounds.
const idleReadsPerRound = 32

// Meter keeps the last figures of every thread and cgroup it read, to turn them into
// deltas. It is not safe for concurrent use; one loop owns it.
type Meter struct {
	procDir  string
	layout   *cgroupfs.Layout
	tasks    map[int]taskTimes
	throttle map[string]cgroupfs.Throttling
	cgroups  map[string]*cgroupCPU
	round    uint64
	buf      []byte
	// pair and counted: each thread's perf counters, after CountCPI.
	pair    *perfcount.Pair
	counted map[int]*threadCount
	// threadReads counts schedstat reads, for the tests of what a round costs.
	threadReads uint64
}

// maxCountedThreads bounds the perf counters a Meter keeps open (two file descriptors each):
// threads past it are left out of the CPI, not of the run-queue wait.
const maxCountedThreads = 2048

// threadCount is one thread's perf counter and its counts at the last round it was read.
type threadCount struct {
	counter *perfcount.Counter
	last    perfcount.Counts
	round   uint64
}

// cgroupCPU is a group's CPU counter, kept open, and its last value: a group that ran less
// than minRun since is not looked at more closely (most online workloads idle most of the
// time, and listing threads costs far more than one pread). nextIdle is the thread ID at
// which the next turn of its idle threads starts.
type cgroupCPU struct {
	counter  *cgroupfs.CPUCounter
	used     time.Duration
	round    uint64
	nextIdle int
}

// NewMeter reads threads under procDir ("/proc") and cgroups through layout.
func NewMeter(procDir string, layout *cgroupfs.Layout) *Meter {
	return &Meter{procDir: procDir, layout: layout, tasks: map[int]taskTimes{},
		throttle: map[string]cgroupfs.Throttling{}, cgroups: map[string]*cgroupCPU{}, buf: make([]byte, 128)}
}

// CountCPI makes Read count each measured thread's pair of perf events too (perfcount.CPI:
// cycles and instructions) into its Reading's Cycles and Instructions. It returns why it
// cannot where this machine does not count them (most VMs expose no hardware counters); Read
// then goes on without.
func (m *Meter) CountCPI(pair perfcount.Pair) error {
	if err := perfcount.Supported(pair); err != nil {
		return err
	}
	m.pair, m.counted = &pair, map[int]*threadCount{}
	return nil
}

// Close releases the counters kept open.
func (m *Meter) Close() {
	for cg, c := range m.cgroups {
		c.counter.Close()
		delete(m.cgroups, cg)
	}
	for tid, t := range m.counted {
		t.counter.Close()
		delete(m.counted, tid)
	}
}

// count adds what thread tid's perf counters counted since the last round to r. A thread
// counted for the first time only sets its baseline.
func (m *Meter) count(tid int, r *Reading) {
	t := m.counted[tid]
	if t == nil {
		if len(m.counted) >= maxCountedThreads {
			return
		}
		c, err := perfcount.Open(tid, *m.pair)
		if err != nil {
			return // the thread ended since the list was read
		}
		t = &threadCount{counter: c}
		m.counted[tid] = t
	}
	n, err := t.counter.Read()
	if err != nil {
		t.counter.Close()
		delete(m.counted, tid)
		return
	}
	if t.round != 0 && t.round == m.round-1 && n.Over >= t.last.Over && n.By >= t.last.By {
		r.Cycles += n.Over - t.last.Over
		r.Instructions += n.By - t.last.By
	}
	t.last, t.round = n, m.round
}

// ran reads group's CPU counter and returns what it used since the last round (-1 the first
// time, or when the counter cannot be read).
func (m *Meter) ran(g Group) time.Duration {
	c := m.cgroups[g.Cgroup]
	if c == nil {
		counter, err := m.layout.OpenCPUCounter(g.Cgroup)
		if err != nil {
			return -1
		}
		c = &cgroupCPU{counter: counter, used: -1}
		m.cgroups[g.Cgroup] = c
	}
	used, err := c.counter.Read()
	if err != nil {
		c.counter.Close()
		delete(m.cgroups, g.Cgroup)
		return -1
	}
	delta := time.Duration(-1)
	if c.used >= 0 && c.round == m.round-1 && used >= c.used {
		delta = used - c.used
	}
	c.used, c.round = used, m.round
	return delta
}

// Read measures each group since the previous Read. A group read for the first time (and
// each thread seen for the first time) only sets its baseline: its first Reading is zero.
// A group whose cgroup used less than minRun of CPU since the last Read gets a Reading with
// only that Run: too little CPU for its ratios to say anything, and not worth a closer look.
func (m *Meter) Read(groups []Group, minRun time.Duration) []Reading {
	m.round++
	out := make([]Reading, 0, len(groups))
	seenCgroup := make(map[string]bool, len(groups))
	for _, g := range groups {
		r := Reading{Group: g}
		_, seen := m.cgroups[g.Cgroup] // counters of groups not read last round are closed
		r.First = !seen
		if ran := m.ran(g); ran >= 0 && ran < minRun {
			r.Run = ran
			out = append(out, r)
			continue
		}
		tids, err := m.layout.Threads(g.Cgroup, g.Recursive)
		if err != nil {
			r.Err = err
			out = append(out, r)
			continue
		}
		var idle []int
		for _, tid := range tids {
			if t, known := m.tasks[tid]; known && !t.active {
				t.listed = m.round
				m.tasks[tid] = t
				idle = append(idle, tid)
				continue
			}
			m.readThread(tid, &r)
		}
		for _, tid := range m.idleTurn(g.Cgroup, idle) {
			m.readThread(tid, &r)
		}
		if t, err := m.layout.Throttling(g.Cgroup); err == nil {
			if prev, ok := m.throttle[g.Cgroup]; ok && t.Periods >= prev.Periods && t.Throttled >= prev.Throttled {
				r.Periods, r.Throttled = t.Periods-prev.Periods, t.Throttled-prev.Throttled
			}
			m.throttle[g.Cgroup] = t
			seenCgroup[g.Cgroup] = true
		}
		out = append(out, r)
	}
	for tid, t := range m.tasks {
		if t.listed != m.round {
			delete(m.tasks, tid)
		}
	}
	for tid, t := range m.counted {
		if m.tasks[tid].listed != m.round {
			t.counter.Close()
			delete(m.counted, tid)
		}
	}
	for cg := range m.throttle {
		if !seenCgroup[cg] {
			delete(m.throttle, cg)
		}
	}
	for cg, c := range m.cgroups {
		if c.round != m.round {
			c.counter.Close()
			delete(m.cgroups, cg)
		}
	}
	return out
}

// readThread reads thread tid and adds what it ran and waited since the previous round to r,
// when it was read then too (a thread read after a gap only sets its figures).
func (m *Meter) readThread(tid int, r *Reading) {
	m.threadReads++
	run, wait, err := m.schedstat(tid)
	if err != nil {
		return // the thread ended since the list was read
	}
	prev, known := m.tasks[tid]
	m.tasks[tid] = taskTimes{run: run, wait: wait, round: m.round, listed: m.round,
		active: !known || run != prev.run || wait != prev.wait}
	if known && prev.round == m.round-1 && run >= prev.run && wait >= prev.wait {
		r.Run += run - prev.run
		r.Wait += wait - prev.wait
	}
	if m.pair != nil {
		m.count(tid, r)
	}
}

// idleTurn picks the idle threads of cgroup to read this round: up to idleReadsPerRound of
// them in thread ID order, from where the last turn stopped, wrapping around.
func (m *Meter) idleTurn(cgroup string, idle []int) []int {
	if len(idle) <= idleReadsPerRound {
		return idle
	}
	c := m.cgroups[cgroup]
	if c == nil {
		return idle // no cursor to keep (its CPU counter could not be opened): read them all
	}
	slices.Sort(idle)
	start, _ := slices.BinarySearch(idle, c.nextIdle)
	turn := make([]int, 0, idleReadsPerRound)
	for i := 0; i < idleReadsPerRound; i++ {
		turn = append(turn, idle[(start+i)%len(idle)])
	}
	c.nextIdle = turn[len(turn)-1] + 1
	return turn
}

// schedstat reads /proc/<tid>/schedstat: "<run ns> <wait ns> <timeslices>".
func (m *Meter) schedstat(tid int) (run, wait time.Duration, err error) {
	path := filepath.Join(m.procDir, strconv.Itoa(tid), "schedstat")
	data, err := cgroupfs.ReadFileInto(path, m.buf)
	if err != nil {
		return 0, 0, err
	}
	m.buf = data[:0]
	return parseSchedstat(data)
}

var errSchedstat = errors.New("malformed schedstat")

func parseSchedstat(data []byte) (run, wait time.Duration, err error) {
	f := bytes.Fields(data)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("%w: %q", errSchedstat, data)
	}
	r, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	w, err2 := strconv.ParseInt(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil || r < 0 || w < 0 {
		return 0, 0, fmt.Errorf("%w: %q", errSchedstat, data)
	}
	return time.Duration(r), time.Duration(w), nil
}
