package workload

import (
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The online service's per-request work is a fixed number of work units,
// each a SHA-256 of the next workChunk bytes of a shared read-only working
// set (default 4 MiB, so it lives in the last-level cache when the service
// runs alone and is evicted by a cache antagonist). The number of units per
// unit of time is calibrated once per process against the thread CPU clock
// (CLOCK_THREAD_CPUTIME_ID, the fastest of several trials), so cpu=D costs
// about D of CPU on an otherwise idle machine. Because the amount of work is
// fixed, not timed, interference shows up in latency both ways it happens:
// CPU contention stretches the wall time, and cache or memory-bandwidth
// contention makes the same work take more CPU.

const workChunk = 1024

type workSet struct {
	buf  []byte
	next atomic.Uint64 // rotating start offset, so requests cover the set
	sink atomic.Uint32
}

func newWorkSet(size int64) *workSet {
	if size < workChunk {
		size = workChunk
	}
	size -= size % workChunk
	w := &workSet{buf: make([]byte, size)}
	// Deterministic, incompressible-ish content.
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; i+8 <= len(w.buf); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(w.buf[i:], x)
	}
	return w
}

// units runs n work units and returns a value derived from them.
func (w *workSet) units(n int64) uint32 {
	chunks := int64(len(w.buf) / workChunk)
	off := int64(w.next.Add(uint64(n)) % uint64(chunks))
	var acc uint32
	for i := int64(0); i < n; i++ {
		s := sha256.Sum256(w.buf[off*workChunk : (off+1)*workChunk])
		acc += uint32(s[0]) | uint32(s[31])<<8
		off++
		if off == chunks {
			off = 0
		}
	}
	return acc
}

// burnUnits does a fixed amount of work worth d of CPU per the calibration.
func (w *workSet) burnUnits(d time.Duration) {
	if d <= 0 {
		return
	}
	n := int64(float64(d)/unitCost() + 0.5)
	if n < 1 {
		n = 1
	}
	w.sink.Add(w.units(n))
}

// burnCPUClock works until the calling thread has used d of CPU time (the
// goroutine is locked to its thread meanwhile). Falls back to wall time when
// the thread clock is unavailable.
func (w *workSet) burnCPUClock(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPUTime()
	wall := time.Now()
	step := int64(float64(20*time.Microsecond)/unitCost()) + 1
	var acc uint32
	for {
		acc += w.units(step)
		if ok {
			if now, _ := threadCPUTime(); now-start >= d {
				break
			}
		} else if time.Since(wall) >= d {
			break
		}
	}
	w.sink.Add(acc)
}

var calibration struct {
	once sync.Once
	ns   float64 // CPU ns per work unit
}

// unitCost returns the calibrated CPU nanoseconds per work unit.
func unitCost() float64 {
	calibration.once.Do(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w := newWorkSet(256 * 1024)
		best := 0.0
		for trial := 0; trial < 7; trial++ {
			c0, ok := threadCPUTime()
			t0 := time.Now()
			n := int64(0)
			for {
				w.units(64)
				n += 64
				var el time.Duration
				if ok {
					c1, _ := threadCPUTime()
					el = c1 - c0
				} else {
					el = time.Since(t0)
				}
				if el >= 8*time.Millisecond {
					per := float64(el) / float64(n)
					if best == 0 || per < best {
						best = per
					}
					break
				}
			}
		}
		if best <= 0 {
			best = 1000
		}
		calibration.ns = best
	})
	return calibration.ns
}
