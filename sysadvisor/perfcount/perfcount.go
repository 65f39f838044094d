// Package perfcount counts what a thread's CPU does with the kernel's perf events, above all
// cycles and instructions: their ratio (cycles per instruction, CPI) rises when the caches and
// memory bandwidth a thread needs are taken by the work beside it, a harm its run-queue wait
// does not show (it runs as soon as it is woken, only slower per instruction).
//
// Most virtual machines expose no hardware counters; Supported says so, with the kernel's
// reason, and callers go on without.
package perfcount

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is one perf event: a PERF_TYPE_* and its PERF_COUNT_* config.
type Event struct {
	Type   uint32
	Config uint64
}

// Pair is the two events of a ratio, the first over the second.
type Pair struct {
	Name     string
	Over, By Event
}

// CPI is cycles per instruction.
var CPI = Pair{Name: "cycles per instruction",
	Over: Event{unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
	By:   Event{unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS}}

// Counts are the cumulative counts of a Pair's two events.
type Counts struct{ Over, By uint64 }

// Counter counts a Pair on one thread as one perf event group: the kernel schedules both
// events on the PMU together, so the ratio of their deltas holds even while it multiplexes.
type Counter struct {
	leader, member int
	buf            [3 * 8]byte // PERF_FORMAT_GROUP: nr, then one value per event
}

// Open starts counting p on thread tid (it must be root, or hold CAP_PERFMON, to count
// another process's threads).
func Open(tid int, p Pair) (*Counter, error) {
	leader, err := open(p, p.Over, tid, -1)
	if err != nil {
		return nil, err
	}
	member, err := open(p, p.By, tid, leader)
	if err != nil {
		unix.Close(leader)
		return nil, err
	}
	return &Counter{leader: leader, member: member}, nil
}

// open opens event e of pair p on thread tid, in group (-1: as its leader).
func open(p Pair, e Event, tid, group int) (int, error) {
	attr := unix.PerfEventAttr{
		Type:        e.Type,
		Config:      e.Config,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Read_format: unix.PERF_FORMAT_GROUP,
		Bits:        unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, group, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("perf_event_open %s (type %d, config %d) on thread %d: %w", p.Name, e.Type, e.Config, tid, err)
	}
	return fd, nil
}

// Read returns the counts so far.
func (c *Counter) Read() (Counts, error) {
	n, err := unix.Read(c.leader, c.buf[:])
	if err != nil {
		return Counts{}, err
	}
	if n != len(c.buf) || binary.NativeEndian.Uint64(c.buf[:8]) != 2 {
		return Counts{}, fmt.Errorf("perf event group read %d bytes, want 2 values", n)
	}
	return Counts{Over: binary.NativeEndian.Uint64(c.buf[8:]), By: binary.NativeEndian.Uint64(c.buf[16:])}, nil
}

// Close stops counting.
func (c *Counter) Close() {
	unix.Close(c.member)
	unix.Close(c.leader)
}

// Supported says whether this machine counts p, by counting it on the calling thread: nil, or
// the kernel's reason (ENOENT: no such hardware counter, as on most virtual machines).
func Supported(p Pair) error {
	c, err := Open(unix.Gettid(), p)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}
