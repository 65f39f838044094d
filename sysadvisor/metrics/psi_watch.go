package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// WatchPressure arms a kernel PSI trigger on path (/proc/pressure/cpu, or a
// cgroup v2 cpu.pressure, memory.pressure, io.pressure) and calls onEvent
// each time the kernel reports that tasks were stalled ("some") for at least
// stall within a window. It blocks until ctx is done (and then returns nil),
// or returns an error if the trigger cannot be armed or the file goes away
// (its cgroup was removed). Run it in a goroutine of your own; onEvent runs
// on that goroutine, so a slow onEvent delays the next event.
//
// The kernel wants stall <= window and a window of 500ms..10s; without
// CAP_SYS_RESOURCE (missing in many containers, even as root) the window must
// also be a multiple of 2s. After an event the kernel stays quiet for the
// rest of the window.
//
// Why a trigger rather than reading avg10: the kernel wakes us within the
// window instead of us polling a 10-second average, so reclaimed work can be
// throttled before online latency suffers.
func WatchPressure(ctx context.Context, path string, stall, window time.Duration, onEvent func()) error {
	// A raw fd rather than os.File: the Go runtime poller cannot wait for
	// POLLPRI, which is the only event PSI raises.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("metrics: open %s: %w", path, err)
	}
	defer unix.Close(fd)

	// The kernel overwrites the last byte written with a NUL before parsing,
	// so the trigger must carry its own terminator or it loses a digit.
	trigger := fmt.Sprintf("some %d %d", stall.Microseconds(), window.Microseconds())
	if _, err := unix.Write(fd, []byte(trigger+"\x00")); err != nil {
		return fmt.Errorf("metrics: arm PSI trigger %q on %s: %w", trigger, path, err)
	}

	// An eventfd wakes the poll the moment ctx is done, so there is no
	// timeout loop spinning per watched cgroup.
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("metrics: watch %s: eventfd: %w", path, err)
	}
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woken)
		_, _ = unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0}) // any non-zero 8-byte add wakes the poll
	})
	defer func() {
		// If the wake-up already started, let it finish before closing its
		// fd, or it could write into an unrelated file reusing the number.
		if !stop() {
			<-woken
		}
		unix.Close(wake)
	}()

	fds := []unix.PollFd{
		{Fd: int32(fd), Events: unix.POLLPRI},
		{Fd: int32(wake), Events: unix.POLLIN},
	}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("metrics: poll %s: %w", path, err)
		}
		if fds[1].Revents != 0 {
			return nil // ctx is done
		}
		switch ev := fds[0].Revents; {
		case ev&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("metrics: watch %s: file went away (poll events %#x)", path, ev)
		case ev&unix.POLLPRI != 0:
			onEvent()
		}
	}
}
