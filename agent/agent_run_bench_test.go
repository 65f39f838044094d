package agent

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/sysadvisor/spikewatch"
	"golang.org/x/sys/unix"
)

// BenchmarkRun200 runs the whole agent (every loop, the API, the checkpoints) with its
// defaults and 200 idle workloads (half shared, half reclaimed) on real cgroups, one second
// per iteration, and reports the agent's CPU as a percentage of one core: the overhead
// measurement of tests/colocation (-overhead), in a form `go test -cpuprofile` can profile.
//
//	sudo go test -run '^$' -bench Run200 -benchtime 20x ./agent
//
// go test's -cpuprofile also covers admitting the 200 workloads, which costs more than a
// minute of running: with TIDAL_RUN_PROFILE=FILE the benchmark writes a profile of only the
// measured seconds, sampled at 1 kHz (the agent uses about a hundredth of a core).
func BenchmarkRun200(b *testing.B) {
	a := agentWith200Idle(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	time.Sleep(3 * time.Second) // settle, as the overhead measurement does
	if file := os.Getenv("TIDAL_RUN_PROFILE"); file != "" {
		f, err := os.Create(file)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		runtime.SetCPUProfileRate(1000)
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	reportProcessCPU(b)
}

// reportProcessCPU lets one second pass per iteration and reports this process's CPU over
// them as a percentage of one core, and its context switches per second: on a VM each
// wake-up costs far more than the work it does, so the switches explain most of the CPU.
func reportProcessCPU(b *testing.B) {
	before, start := processUsage(b), time.Now()
	b.ResetTimer()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	after, elapsed := processUsage(b), time.Since(start)
	b.ReportMetric(100*float64(after.cpu-before.cpu)/float64(elapsed), "cpu%")
	b.ReportMetric(float64(after.switches-before.switches)/elapsed.Seconds(), "switches/s")
}

// usage is this process's user and system CPU time and its context switches so far.
type usage struct {
	cpu      time.Duration
	switches int64
}

func processUsage(b *testing.B) usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return usage{
		cpu:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		switches: ru.Nvcsw + ru.Nivcsw,
	}
}

// BenchmarkTimerFloor is the floor under BenchmarkRun200's figure: a loop that does nothing
// but wake every default fast interval (and read one counter), one second per iteration, as a
// percentage of one core, paced three ways: as the fast path paces itself now (native-watch,
// spikewatch's thread outside the Go runtime), and as it did before, a locked Go thread in
// nanosleep (thread-sleep) and a Go runtime timer (runtime-timer). On a VM where a wake-up is
// costly the difference is most of the agent's 2% budget.
//
//	go test -run '^$' -bench 'TimerFloor|Run200' -benchtime 10x ./agent
func BenchmarkTimerFloor(b *testing.B) {
	counter := filepath.Join(b.TempDir(), "cpuacct.usage")
	if err := os.WriteFile(counter, []byte("0\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("native-watch", func(b *testing.B) {
		w, err := spikewatch.Start(spikewatch.Config{Interval: fastIntervalDefault, Window: 3 * fastIntervalDefault})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		w.SetCounters(spikewatch.Counters{Plus: []string{counter}})
		reportProcessCPU(b)
	})
	b.Run("thread-sleep", func(b *testing.B) {
		runTicking(b, func(ctx context.Context) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f, err := os.Open(counter)
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			buf := make([]byte, 64)
			ts := unix.NsecToTimespec(int64(fastIntervalDefault))
			for ctx.Err() == nil {
				_ = unix.Nanosleep(&ts, nil)
				_, _ = unix.Pread(int(f.Fd()), buf, 0)
			}
		})
	})
	b.Run("runtime-timer", func(b *testing.B) {
		runTicking(b, func(ctx context.Context) {
			t := time.NewTimer(fastIntervalDefault)
			defer t.Stop()
			for ctx.Err() == nil {
				<-t.C
				t.Reset(fastIntervalDefault)
			}
		})
	})
}

// runTicking reports the process's CPU while tick runs on its own goroutine.
func runTicking(b *testing.B, tick func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick(ctx)
	}()
	defer func() { cancel(); <-done }()
	reportProcessCPU(b)
}

// fastIntervalDefault is the agent's default loops.fastInterval.
var fastIntervalDefault = config.Default().Loops.FastInterval
