//go:build linux

package workload

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUTime returns the CPU time used by the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID); ok is false where that clock is unavailable.
// The caller must hold runtime.LockOSThread for readings to be comparable.
func threadCPUTime() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// timerfdSleeper sleeps with a timerfd read through the runtime's netpoller:
// the timer fires with hrtimer precision (tens of microseconds late here,
// against about 1ms for a Go timer, whose netpoll wait rounds to
// milliseconds) while the goroutine stays parked, not spinning, and no P is
// held in a syscall.
type timerfdSleeper struct {
	fd  int
	f   *os.File
	its unix.ItimerSpec
	buf [8]byte
}

func newSleeper() sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newGoSleeper()
	}
	return &timerfdSleeper{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

func (s *timerfdSleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	s.its.Value = unix.NsecToTimespec(int64(d))
	if err := unix.TimerfdSettime(s.fd, 0, &s.its, nil); err != nil {
		time.Sleep(d)
		return
	}
	if _, err := s.f.Read(s.buf[:]); err != nil {
		time.Sleep(d)
	}
}

func (s *timerfdSleeper) close() { s.f.Close() }

// allocTouchable returns n bytes of fresh anonymous memory outside the Go
// heap (so the GC neither scans it nor sizes its goal by it) and a release
// function.
func allocTouchable(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// residentBytes returns this process's resident set size from
// /proc/self/statm, or -1.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}
