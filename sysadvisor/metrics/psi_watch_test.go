package metrics

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const procCPUPressure = "/proc/pressure/cpu"

// startWatch runs WatchPressure in a goroutine. Events are signalled on the
// returned channel (coalesced), the return value on done.
func startWatch(ctx context.Context, path string, stall, window time.Duration) (events <-chan struct{}, done <-chan error) {
	ev := make(chan struct{}, 1)
	d := make(chan error, 1)
	go func() {
		d <- WatchPressure(ctx, path, stall, window, func() {
			select {
			case ev <- struct{}{}:
			default:
			}
		})
	}()
	return ev, d
}

// waitReturn cancels ctx and checks that the watcher returns nil within 1s.
func waitReturn(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchPressure after cancel = %v, want nil", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("WatchPressure took %v to return after cancel, want < 1s", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WatchPressure did not return within 2s of cancel")
	}
}

// hogCPUs keeps more threads runnable than there are CPUs, so the kernel
// sees tasks waiting for a CPU. GOMAXPROCS is raised for the duration:
// goroutines beyond GOMAXPROCS would queue in the Go scheduler, invisible to
// PSI. The returned stop is idempotent.
func hogCPUs() (stop func()) {
	n := 4 * runtime.NumCPU()
	prev := runtime.GOMAXPROCS(n)
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for !quit.Load() {
			}
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			quit.Store(true)
			wg.Wait()
			runtime.GOMAXPROCS(prev)
		})
	}
}

func TestWatchPressureFiresUnderCPULoad(t *testing.T) {
	if _, err := os.Stat(procCPUPressure); err != nil {
		t.Skipf("no PSI in this kernel: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A 2s window is accepted with or without CAP_SYS_RESOURCE; 1ms of
	// stall in it is a threshold a CPU hog crosses at once.
	events, done := startWatch(ctx, procCPUPressure, time.Millisecond, 2*time.Second)

	stop := hogCPUs()
	defer stop()
	start := time.Now()
	select {
	case <-events:
		t.Logf("PSI event %v after the hog started", time.Since(start).Round(time.Millisecond))
	case err := <-done:
		t.Skipf("kernel rejected the PSI trigger: %v", err)
	case <-time.After(15 * time.Second): // the kernel took up to ~5s here with a 2s window
		t.Fatal("no PSI event within 15s of CPU hog")
	}
	stop()

	waitReturn(t, cancel, done)
}

// On a regular file the trigger write succeeds and POLLPRI never comes, which
// shows the exact bytes the kernel gets and that cancel alone ends the watch.
func TestWatchPressureWritesTriggerAndStopsOnCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pressure")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, done := startWatch(ctx, path, 150*time.Millisecond, 2*time.Second)

	var got []byte
	for deadline := time.Now().Add(5 * time.Second); len(got) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("trigger never written")
		}
		var err error
		if got, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel replaces the last byte written with NUL, hence the terminator.
	if want := "some 150000 2000000\x00"; string(got) != want {
		t.Errorf("trigger = %q, want %q", got, want)
	}

	time.Sleep(50 * time.Millisecond) // let it settle in poll
	waitReturn(t, cancel, done)
	select {
	case <-events:
		t.Error("onEvent called without pressure")
	default:
	}
}

func TestWatchPressureAlreadyCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pressure")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WatchPressure(ctx, path, time.Millisecond, 2*time.Second, func() {}); err != nil {
		t.Errorf("WatchPressure with a done ctx = %v, want nil", err)
	}
}

func TestWatchPressureBadTrigger(t *testing.T) {
	if _, err := os.Stat(procCPUPressure); err != nil {
		t.Skipf("no PSI in this kernel: %v", err)
	}
	// A 1ms window is below the kernel's 500ms minimum.
	err := WatchPressure(context.Background(), procCPUPressure, time.Millisecond, time.Millisecond, func() {})
	if err == nil || !strings.Contains(err.Error(), procCPUPressure) {
		t.Errorf("err = %v, want an error naming %s", err, procCPUPressure)
	}
}

func TestWatchPressureMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "cpu.pressure")
	err := WatchPressure(context.Background(), path, time.Millisecond, 2*time.Second, func() {})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want a not-exist error naming %s", err, path)
	}
}

// cgroup2Mount finds where cgroup v2 is mounted, from /proc/self/mountinfo.
func cgroup2Mount() (string, bool) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(data)) {
		// "36 25 0:31 / /sys/fs/cgroup rw,... shared:9 - cgroup2 cgroup2 rw"
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], true
			}
		}
	}
	return "", false
}

// Removing a watched cgroup must end the watch with an error, not hang it.
func TestWatchPressureCgroupRemoved(t *testing.T) {
	mnt, ok := cgroup2Mount()
	if !ok {
		t.Skip("no cgroup v2 mount")
	}
	dir, err := os.MkdirTemp(mnt, "tidal-psi-test-")
	if err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	defer os.Remove(dir) // in case the test fails before its own rmdir
	path := filepath.Join(dir, "cpu.pressure")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("cgroup has no PSI: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, done := startWatch(ctx, path, time.Millisecond, 2*time.Second)
	time.Sleep(300 * time.Millisecond) // let it arm the trigger and block in poll
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "went away") || !strings.Contains(err.Error(), path) {
			t.Errorf("err = %v, want a went-away error naming %s", err, path)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WatchPressure still running 2s after its cgroup was removed")
	}
}
