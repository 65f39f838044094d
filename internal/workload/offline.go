package workload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// paddedCounter keeps per-thread counters on their own cache lines.
type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

// runThreads starts n goroutines, each locked to its own OS thread, running
// body(i, stop, counter) until stop is set, and reports the counters' sum
// through report every interval until ctx is done. It returns after every
// thread has stopped.
func runThreads(ctx context.Context, n int, every time.Duration, body func(i int, stop *atomic.Bool, c *atomic.Uint64),
	report func(now, dt time.Duration, total uint64, final bool)) {
	counters := make([]paddedCounter, n)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			body(i, &stop, &counters[i].n)
		}()
	}
	sum := func() uint64 {
		var t uint64
		for i := range counters {
			t += counters[i].n.Load()
		}
		return t
	}
	start := time.Now()
	tickLoop(ctx.Done(), every, start, func(now, dt time.Duration) { report(now, dt, sum(), false) })
	stop.Store(true)
	wg.Wait()
	report(time.Since(start), 0, sum(), true)
}

// BurnerConfig configures RunBurner.
type BurnerConfig struct {
	Threads int           // default 1
	Report  time.Duration // default 1s
}

// burnerBlock is the burner's unit of work: one SHA-256 of a 4 KiB block.
const burnerBlock = 4096

// RunBurner is the offline CPU burner: Threads goroutines, each locked to an
// OS thread, hash their own 4 KiB block over and over (one unit = one
// SHA-256 of the block, a few microseconds) until ctx is done; each checks
// for cancellation after every unit. Reports are BurnerLine.
func RunBurner(ctx context.Context, cfg BurnerConfig, out io.Writer) error {
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	lw := newLineWriter(out)
	var last uint64
	runThreads(ctx, cfg.Threads, orDefault(cfg.Report),
		func(i int, stop *atomic.Bool, c *atomic.Uint64) {
			var block [burnerBlock]byte
			binary.LittleEndian.PutUint64(block[:], uint64(i)+1)
			for !stop.Load() {
				s := sha256.Sum256(block[:])
				copy(block[:32], s[:]) // chain, so no unit can be skipped
				c.Add(1)
			}
		},
		func(now, dt time.Duration, total uint64, final bool) {
			l := BurnerLine{Kind: KindBurner, T: secs(now), Threads: cfg.Threads, Units: total - last,
				UnitsPerS: rate(total-last, dt), Total: total}
			if final {
				l.Units, l.UnitsPerS, l.Final = total, rate(total, now), true
			}
			last = total
			lw.write(l)
		})
	return lw.error()
}

// AntagonistConfig configures RunAntagonist.
type AntagonistConfig struct {
	Threads   int           // default 1
	SizeBytes int64         // total buffer, default 64 MiB (larger than the LLC)
	Report    time.Duration // default 1s
}

const (
	cacheLine       = 64
	antagonistChunk = 64 << 10 // bytes swept between cancellation checks
)

// RunAntagonist is the offline cache and memory-bandwidth thrasher: a
// SizeBytes buffer is split between Threads goroutines (each locked to an OS
// thread), and each sweeps its part over and over, reading and writing one
// word per 64-byte cache line, so the whole buffer streams through the cache
// hierarchy and evicts whatever else lives there. Bytes reported are cache
// lines touched times 64. Reports are AntagonistLine.
func RunAntagonist(ctx context.Context, cfg AntagonistConfig, out io.Writer) error {
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	if cfg.SizeBytes <= 0 {
		cfg.SizeBytes = 64 << 20
	}
	per := cfg.SizeBytes / int64(cfg.Threads)
	per -= per % cacheLine
	if per < cacheLine {
		return fmt.Errorf("antagonist: SizeBytes %d too small for %d threads", cfg.SizeBytes, cfg.Threads)
	}
	if per > int64(^uint(0)>>1) {
		return errors.New("antagonist: SizeBytes too large")
	}
	lw := newLineWriter(out)
	var last uint64
	runThreads(ctx, cfg.Threads, orDefault(cfg.Report),
		func(i int, stop *atomic.Bool, c *atomic.Uint64) {
			buf := make([]uint64, per/8) // zeroed pages, faulted in by the first sweep
			const step = cacheLine / 8
			chunk := antagonistChunk / 8
			for pos := 0; !stop.Load(); {
				end := min(pos+chunk, len(buf))
				for j := pos; j < end; j += step {
					buf[j]++
				}
				c.Add(uint64((end - pos + step - 1) / step * cacheLine))
				pos = end
				if pos == len(buf) {
					pos = 0
				}
			}
			runtime.KeepAlive(buf)
		},
		func(now, dt time.Duration, total uint64, final bool) {
			l := AntagonistLine{Kind: KindAntagonist, T: secs(now), Threads: cfg.Threads, SizeBytes: per * int64(cfg.Threads),
				Bytes: total - last, BytesPerS: rate(total-last, dt), Total: total}
			if final {
				l.Bytes, l.BytesPerS, l.Final = total, rate(total, now), true
			}
			last = total
			lw.write(l)
		})
	return lw.error()
}

// MemoryHogConfig configures RunMemoryHog.
type MemoryHogConfig struct {
	TargetBytes     int64         // required, > 0
	RateBytesPerSec int64         // 0: as fast as possible
	Report          time.Duration // default 1s
	// Retouch, when > 0, rewrites every held page at that period, keeping
	// the memory hot (an active working set the kernel will not find idle).
	Retouch time.Duration
}

const hogPage = 4096

// RunMemoryHog maps anonymous memory outside the Go heap in chunks (up to 4
// MiB, fewer per step at low rates) and writes every page of each, paced to
// RateBytesPerSec, until TargetBytes are resident, then holds it until ctx is
// done and unmaps it. Reports are MemoryHogLine. A failed mapping stops the
// growth and is returned at the end.
func RunMemoryHog(ctx context.Context, cfg MemoryHogConfig, out io.Writer) error {
	if cfg.TargetBytes <= 0 {
		return errors.New("memhog: TargetBytes must be > 0")
	}
	if cfg.RateBytesPerSec < 0 {
		return errors.New("memhog: RateBytesPerSec must be >= 0")
	}
	chunk := int64(4 << 20)
	if cfg.RateBytesPerSec > 0 {
		// about 10ms worth of the rate per step
		chunk = min(chunk, max(cfg.RateBytesPerSec/100, hogPage))
	}
	chunk -= chunk % hogPage

	var (
		mu        sync.Mutex
		chunks    [][]byte
		releases  []func()
		allocated atomic.Int64
		allocErr  error
	)
	defer func() {
		mu.Lock()
		for _, r := range releases {
			r()
		}
		mu.Unlock()
	}()
	touch := func(b []byte, v byte) {
		for i := 0; i < len(b); i += hogPage {
			b[i] = v
		}
	}

	lw := newLineWriter(out)
	start := time.Now()
	line := func(now time.Duration, final bool) MemoryHogLine {
		a := allocated.Load()
		return MemoryHogLine{Kind: KindMemoryHog, T: secs(now), TargetBytes: cfg.TargetBytes,
			AllocatedBytes: a, ResidentBytes: residentBytes(), Reached: a >= cfg.TargetBytes, Final: final}
	}
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		tickLoop(ctx.Done(), orDefault(cfg.Report), start, func(now, _ time.Duration) { lw.write(line(now, false)) })
	}()

	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	// Grow.
	for a := int64(0); a < cfg.TargetBytes && ctx.Err() == nil; {
		n := min(chunk, cfg.TargetBytes-a)
		n += (hogPage - n%hogPage) % hogPage
		if cfg.RateBytesPerSec > 0 {
			due := time.Duration(float64(a+n) / float64(cfg.RateBytesPerSec) * 1e9)
			if el := time.Since(start); el < due && !wait(due-el) {
				break
			}
		}
		b, release, err := allocTouchable(int(n))
		if err != nil {
			allocErr = fmt.Errorf("memhog: mapping %d bytes after %d: %w", n, a, err)
			break
		}
		touch(b, 1)
		mu.Lock()
		chunks = append(chunks, b)
		releases = append(releases, release)
		mu.Unlock()
		a += n
		allocated.Store(a)
	}
	// Hold (and optionally keep hot).
	for v := byte(2); ctx.Err() == nil; v++ {
		if cfg.Retouch <= 0 {
			<-ctx.Done()
			break
		}
		if !wait(cfg.Retouch) {
			break
		}
		for _, b := range chunks {
			touch(b, v|1)
		}
	}
	<-tickDone
	lw.write(line(time.Since(start), true))
	if allocErr != nil {
		return allocErr
	}
	return lw.error()
}
