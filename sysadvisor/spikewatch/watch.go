package spikewatch

/*
#cgo CFLAGS: -O2 -Wall
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// One crossing, as written to the pipe.
typedef struct {
	int64_t window_milli, burst_milli, at_ns, late_ns;
} sw_crossing;

typedef struct {
	// Fixed before the thread starts.
	int64_t interval, window, burst; // nanoseconds
	int64_t slow_ticks;
	int notify;                      // the crossings pipe's write end, non-blocking

	// The counters: Go swaps them under mu, the thread reads them under mu (a few preads).
	// The thread also sleeps on wake under mu, so that Go can cut a slow tick short.
	pthread_mutex_t mu;
	pthread_cond_t wake;
	int woken;
	int *fds;                        // plus, then minus; -1: could not be opened, -2: dropped
	int nplus, nminus;
	int restart;                     // the set changed: the window starts over

	// Shared without the lock (atomics).
	int64_t window_limit, burst_limit;
	int slow, stop, stale;

	// The thread's own: the readings of the last window.
	int64_t *t, *u;
	int cap, len;
	pthread_t thread;
} sw_watch;

static int64_t sw_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// sw_read returns a counter's CPU time in nanoseconds, or -1: cpuacct.usage on cgroup v1,
// cpu.stat's usage_usec line on v2.
static int64_t sw_read(int fd) {
	char buf[4096];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	if (n <= 0) return -1;
	buf[n] = 0;
	const char *p = buf;
	int64_t scale = 1;
	const char *usec = strstr(buf, "usage_usec ");
	if (usec) {
		p = usec + strlen("usage_usec ");
		scale = 1000;
	}
	char *end;
	errno = 0;
	long long v = strtoll(p, &end, 10);
	if (end == p || errno != 0 || v < 0) return -1;
	return (int64_t)v * scale;
}

static int64_t sw_milli_over(int64_t used, int64_t span) {
	if (used < 0) used = 0; // a counter that went back reads as no use
	return (int64_t)((double)used / (double)span * 1000);
}

// sw_add is sysadvisor/rate's Window.Add and Over in one: it records a reading and, once the
// readings cover the window, sets the rates over it and over the burst.
static int sw_add(sw_watch *w, int64_t now, int64_t used, int64_t *window_milli, int64_t *burst_milli) {
	if (w->len == w->cap) { // only if the clock stalled: keep the newest
		memmove(w->t, w->t + 1, (w->len - 1) * sizeof *w->t);
		memmove(w->u, w->u + 1, (w->len - 1) * sizeof *w->u);
		w->len--;
	}
	w->t[w->len] = now;
	w->u[w->len] = used;
	w->len++;
	int cut = 0;
	while (cut < w->len - 1 && now - w->t[cut + 1] >= w->window) cut++;
	if (cut > 0) {
		memmove(w->t, w->t + cut, (w->len - cut) * sizeof *w->t);
		memmove(w->u, w->u + cut, (w->len - cut) * sizeof *w->u);
		w->len -= cut;
	}
	int64_t span = now - w->t[0];
	if (span < w->window || span <= 0) return 0;
	*window_milli = sw_milli_over(used - w->u[0], span);
	*burst_milli = 0;
	if (w->burst > 0) {
		int last = w->len - 1;
		for (int i = last - 1; i >= 0; i--) {
			int64_t s = w->t[last] - w->t[i];
			if (s >= w->burst - w->burst / 4 && s > 0) {
				*burst_milli = sw_milli_over(w->u[last] - w->u[i], s);
				break;
			}
		}
	}
	return 1;
}

// sw_sum reads the counters. A plus counter that fails fails the reading; a minus one (a
// cgroup that just went) is dropped from the sum and the window starts over, since the sum
// jumps. Either way Go is told to set the counters again.
static int sw_sum(sw_watch *w, int64_t *used) {
	int ok = 1;
	*used = 0;
	pthread_mutex_lock(&w->mu);
	if (w->restart) {
		w->len = 0;
		w->restart = 0;
	}
	for (int i = 0; i < w->nplus + w->nminus && ok; i++) {
		if (w->fds[i] == -2) continue; // dropped
		int64_t v = w->fds[i] < 0 ? -1 : sw_read(w->fds[i]);
		if (v >= 0) {
			*used += i < w->nplus ? v : -v;
			continue;
		}
		__atomic_store_n(&w->stale, 1, __ATOMIC_RELAXED);
		if (i < w->nplus) {
			ok = 0;
		} else {
			w->fds[i] = -2;
			w->len = 0;
			i = -1; // sum again without it
			*used = 0;
		}
	}
	pthread_mutex_unlock(&w->mu);
	if (*used < 0) *used = 0;
	return ok;
}

static void *sw_run(void *arg) {
	sw_watch *w = arg;
	int64_t deadline = sw_now();
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		int64_t step = w->interval;
		if (__atomic_load_n(&w->slow, __ATOMIC_RELAXED)) step *= w->slow_ticks;
		deadline += step;
		int64_t now = sw_now();
		if (deadline < now) deadline = now + step; // behind by a period: no catch-up burst
		struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
		pthread_mutex_lock(&w->mu);
		while (!w->woken && pthread_cond_timedwait(&w->wake, &w->mu, &ts) != ETIMEDOUT) {
		}
		int woken = w->woken;
		w->woken = 0;
		pthread_mutex_unlock(&w->mu);
		int64_t late = sw_now() - deadline;
		if (woken) { // a slow tick cut short: the fast ones count from now
			deadline = sw_now();
			late = 0;
		}
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) break;
		int64_t used, window_milli, burst_milli;
		if (!sw_sum(w, &used)) continue;
		now = sw_now(); // stamped when read: a rate over a span it does not cover is overstated
		if (!sw_add(w, now, used, &window_milli, &burst_milli)) continue;
		if (window_milli > __atomic_load_n(&w->window_limit, __ATOMIC_RELAXED) ||
		    burst_milli > __atomic_load_n(&w->burst_limit, __ATOMIC_RELAXED)) {
			sw_crossing c = {window_milli, burst_milli, now, late};
			// A full pipe drops it: Go is behind, and the next reading brings a fresher one.
			if (write(w->notify, &c, sizeof c) < 0) {
			}
		}
	}
	return NULL;
}

// sw_window is a watch without its thread: its rate window alone, for the test that holds it
// to sysadvisor/rate's.
static sw_watch *sw_window(int64_t interval, int64_t window, int64_t burst) {
	sw_watch *w = calloc(1, sizeof *w);
	w->interval = interval;
	w->window = window;
	w->burst = burst;
	w->cap = (int)(window / interval) + 8;
	w->t = calloc(w->cap, sizeof *w->t);
	w->u = calloc(w->cap, sizeof *w->u);
	return w;
}

static void sw_window_free(sw_watch *w) {
	free(w->t);
	free(w->u);
	free(w);
}

static sw_watch *sw_start(int64_t interval, int64_t window, int64_t burst, int64_t slow_ticks, int notify) {
	sw_watch *w = calloc(1, sizeof *w);
	if (!w) return NULL;
	w->interval = interval;
	w->window = window;
	w->burst = burst;
	w->slow_ticks = slow_ticks;
	w->notify = notify;
	w->window_limit = w->burst_limit = INT64_MAX;
	w->cap = (int)(window / interval) + 8;
	w->t = calloc(w->cap, sizeof *w->t);
	w->u = calloc(w->cap, sizeof *w->u);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&w->wake, &attr);
	pthread_condattr_destroy(&attr);
	if (!w->t || !w->u || pthread_create(&w->thread, NULL, sw_run, w) != 0) {
		free(w->t);
		free(w->u);
		free(w);
		return NULL;
	}
	return w;
}

static void sw_set_counters(sw_watch *w, int *fds, int nplus, int nminus) {
	int *copy = malloc((nplus + nminus + 1) * sizeof *copy);
	memcpy(copy, fds, (nplus + nminus) * sizeof *copy);
	pthread_mutex_lock(&w->mu);
	int *old = w->fds;
	w->fds = copy;
	w->nplus = nplus;
	w->nminus = nminus;
	w->restart = 1;
	__atomic_store_n(&w->stale, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&w->mu);
	free(old);
}

// sw_wake cuts the thread's sleep short.
static void sw_wake(sw_watch *w) {
	pthread_mutex_lock(&w->mu);
	w->woken = 1;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->mu);
}

static void sw_set_limits(sw_watch *w, int64_t window_milli, int64_t burst_milli, int slow) {
	__atomic_store_n(&w->window_limit, window_milli, __ATOMIC_RELAXED);
	__atomic_store_n(&w->burst_limit, burst_milli, __ATOMIC_RELAXED);
	// From slow to fast: lending just grew, and a slow tick may be most of 100 ms away.
	if (__atomic_exchange_n(&w->slow, slow, __ATOMIC_RELAXED) && !slow) sw_wake(w);
}

static int sw_stale(sw_watch *w) { return __atomic_load_n(&w->stale, __ATOMIC_RELAXED); }

static void sw_stop(sw_watch *w) {
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	sw_wake(w);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->mu);
	free(w->fds);
	free(w->t);
	free(w->u);
	free(w);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Watch is a running watch: the native thread, and the Go side of its pipe. Its methods may be
// called from any goroutine.
type Watch struct {
	w         *C.sw_watch
	notify    *os.File // the pipe's read end, read by one goroutine through the netpoller
	write     *os.File
	crossings chan Crossing
	done      chan struct{} // the reader ended

	// mu guards w (nil once stopped: a loop still winding down at shutdown may set limits
	// after Stop, and must not touch freed memory) and files.
	mu    sync.Mutex
	files []*os.File // the counters the thread reads now
}

// crossingSize is sizeof(sw_crossing).
const crossingSize = 4 * 8

// Start starts watching no counters, with limits no rate crosses; set both. Stop it.
func Start(cfg Config) (*Watch, error) {
	if cfg.Interval <= 0 || cfg.Window < cfg.Interval || cfg.Burst < 0 || cfg.Burst > cfg.Window {
		return nil, fmt.Errorf("spike watch: interval %v, window %v, burst %v: want 0 < interval <= window and 0 <= burst <= window",
			cfg.Interval, cfg.Window, cfg.Burst)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("spike watch: pipe: %w", err)
	}
	w := &Watch{crossings: make(chan Crossing, 1), done: make(chan struct{}),
		notify: os.NewFile(uintptr(p[0]), "spike watch"), write: os.NewFile(uintptr(p[1]), "spike watch")}
	w.w = C.sw_start(C.int64_t(cfg.Interval), C.int64_t(cfg.Window), C.int64_t(cfg.Burst), C.int64_t(max(cfg.SlowTicks, 1)), C.int(p[1]))
	if w.w == nil {
		w.notify.Close()
		w.write.Close()
		return nil, errors.New("spike watch: cannot start its thread")
	}
	go w.read()
	return w, nil
}

// read hands the thread's crossings to Crossings until the pipe closes.
func (w *Watch) read() {
	defer close(w.done)
	defer close(w.crossings)
	var buf [crossingSize]byte
	for {
		if _, err := io.ReadFull(w.notify, buf[:]); err != nil {
			return
		}
		at := int64(binary.NativeEndian.Uint64(buf[16:]))
		w.deliver(Crossing{
			WindowMilli: int64(binary.NativeEndian.Uint64(buf[0:])),
			BurstMilli:  int64(binary.NativeEndian.Uint64(buf[8:])),
			At:          monotonicToTime(at),
			Late:        time.Duration(binary.NativeEndian.Uint64(buf[24:])),
		})
	}
}

// monotonicToTime turns a CLOCK_MONOTONIC stamp into a time.Time on Go's clock.
func monotonicToTime(ns int64) time.Time {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Now().Add(-time.Duration(ts.Nano() - ns))
}

// SetCounters replaces the counters read; the window starts over. A file that cannot be
// opened fails every reading (plus) or is left out (minus), and makes the watch Stale.
func (w *Watch) SetCounters(c Counters) {
	files := openAll(c)
	fds := make([]C.int, len(files)+1) // one more: a valid pointer even with no counter
	for i, f := range files {
		fds[i] = -1
		if f != nil {
			fds[i] = C.int(f.Fd())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		closeAll(files)
		return
	}
	C.sw_set_counters(w.w, &fds[0], C.int(len(c.Plus)), C.int(len(c.Minus)))
	closeAll(w.files) // the thread no longer reads them
	w.files = files
}

// SetLimits replaces the limits; the next reading is compared with them.
func (w *Watch) SetLimits(l Limits) {
	slow := 0
	if l.Slow {
		slow = 1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w != nil {
		C.sw_set_limits(w.w, C.int64_t(l.WindowMilli), C.int64_t(l.BurstMilli), C.int(slow))
	}
}

// Stale says whether a counter failed since the counters were last set: a cgroup went, or
// one was re-created. Set them again.
func (w *Watch) Stale() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w != nil && C.sw_stale(w.w) != 0
}

// Stop stops the thread and closes Crossings. Calls after it do nothing.
func (w *Watch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		return
	}
	C.sw_stop(w.w)
	w.w = nil
	w.write.Close()
	<-w.done
	w.notify.Close()
	closeAll(w.files)
	w.files = nil
}

// window is the thread's rate window without the thread (sw_add alone), so that a test can
// feed it readings and hold it to sysadvisor/rate's Window.
type window struct{ w *C.sw_watch }

func newWindow(interval, length, burst time.Duration) window {
	return window{C.sw_window(C.int64_t(interval), C.int64_t(length), C.int64_t(burst))}
}

// add records a reading taken at now (any monotonic origin) and returns the rates over the
// window and the burst, once the readings cover the window.
func (w window) add(now, used time.Duration) (milli, burst int64, ok bool) {
	var m, b C.int64_t
	if C.sw_add(w.w, C.int64_t(now), C.int64_t(used), &m, &b) == 0 {
		return 0, 0, false
	}
	return int64(m), int64(b), true
}

func (w window) free() { C.sw_window_free(w.w) }
