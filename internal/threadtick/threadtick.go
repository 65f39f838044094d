// Package threadtick paces a periodic loop with the kernel's own sleep (nanosleep) on the
// loop's own OS thread, instead of the Go runtime's timers.
//
// Why: a runtime timer that fires every 10 ms wakes the netpoller and often a second thread
// to look for work; on a VM where every wake-up exits to the hypervisor, that alone cost about
// 2% of a core (BenchmarkTimerFloor in agent), the agent's whole budget. One thread sleeping
// in the kernel costs about half of that. Use it only for a loop that ticks often and does
// little: the thread is held for the loop's lifetime.
package threadtick

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Pacer paces one goroutine. Start it on that goroutine, and Stop it there.
type Pacer struct {
	base time.Time     // deadlines count from here, on Go's monotonic clock (no syscall to read)
	next time.Duration // the last deadline
}

// Start locks the calling goroutine to its OS thread and starts the deadlines from now.
func Start() *Pacer {
	runtime.LockOSThread()
	return &Pacer{base: time.Now()}
}

// Stop lets the goroutine's thread go back to the runtime.
func (p *Pacer) Stop() { runtime.UnlockOSThread() }

// Sleep sleeps until d after the previous deadline, or d after now if the loop has fallen
// behind by a whole period (a late tick is not followed by a burst of catch-up ticks). It
// returns how late it woke after its deadline.
func (p *Pacer) Sleep(d time.Duration) (late time.Duration) {
	p.next += d
	now := time.Since(p.base)
	if p.next < now {
		p.next = now + d
	}
	// A relative sleep for what is left: the time between reading the clock and entering
	// the kernel is a few microseconds, and an interrupted sleep goes on to the same deadline.
	for left := p.next - now; left > 0; left = p.next - time.Since(p.base) {
		ts := unix.NsecToTimespec(int64(left))
		if err := unix.Nanosleep(&ts, nil); !errors.Is(err, unix.EINTR) {
			break // nothing else can fail with a valid duration
		}
	}
	return time.Since(p.base) - p.next
}
