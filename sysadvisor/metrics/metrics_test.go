package metrics

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc writes files (path relative to the root -> content) into a fresh
// proc root and returns it.
func fakeProc(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Times in /proc/stat are in USER_HZ (100 per second).
const fakeStat = `cpu  300 10 150 1600 100 5 5 10 20 0
cpu0 100 10 50 800 50 5 5 0 20 0
cpu1 200 0 100 800 50 0 0 10 0 0
intr 12345 0 0
ctxt 999
btime 1700000000
processes 42
procs_running 2
procs_blocked 0
softirq 10 1 2 3 4 0 0 0 0 0 0
`

func TestReadCPUTimesFake(t *testing.T) {
	root := fakeProc(t, map[string]string{"stat": fakeStat})
	got, err := ReadCPUTimes(root)
	if err != nil {
		t.Fatal(err)
	}
	// cpu0: user+nice+system+idle+iowait+irq+softirq+steal = 1020 ticks, of
	// which idle+iowait = 850; guest (20) is inside user already. cpu1's steal (10) is
	// busy time too.
	want := map[int]CPUTime{
		0: {Busy: 1.70, Total: 10.20},
		1: {Busy: 3.10, Total: 11.60, Steal: 0.10},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d CPUs (%v), want %d", len(got), got, len(want))
	}
	for id, w := range want {
		if g := got[id]; !near(g.Busy, w.Busy) || !near(g.Total, w.Total) || !near(g.Steal, w.Steal) {
			t.Errorf("cpu%d = %+v, want %+v", id, g, w)
		}
	}
}

func TestReadCPUTimesErrorsNameTheFile(t *testing.T) {
	for name, stat := range map[string]string{
		"malformed":  "cpu0 100 x 50\n",
		"no per-CPU": "cpu  1 2 3 4 5 6 7 8 9 10\nbtime 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			root := fakeProc(t, map[string]string{"stat": stat})
			_, err := ReadCPUTimes(root)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "stat")) {
				t.Errorf("err = %v, want an error naming %s", err, filepath.Join(root, "stat"))
			}
		})
	}
	if _, err := ReadCPUTimes(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ReadCPUTimes on a missing proc root succeeded")
	}
}

func TestReadMemoryFake(t *testing.T) {
	root := fakeProc(t, map[string]string{"meminfo": "MemTotal:        2048 kB\nMemFree:          512 kB\nMemAvailable:    1024 kB\nBuffers:           64 kB\n"})
	got, err := ReadMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{TotalBytes: 2048 << 10, AvailableBytes: 1024 << 10, FreeBytes: 512 << 10}); got != want {
		t.Errorf("ReadMemory = %+v, want %+v", got, want)
	}

	// Before kernel 3.14 there is no MemAvailable: fall back to MemFree.
	root = fakeProc(t, map[string]string{"meminfo": "MemTotal:        2048 kB\nMemFree:          512 kB\n"})
	got, err = ReadMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	if got.AvailableBytes != 512<<10 {
		t.Errorf("AvailableBytes without MemAvailable = %d, want MemFree %d", got.AvailableBytes, 512<<10)
	}

	root = fakeProc(t, map[string]string{"meminfo": "MemFree:          512 kB\n"})
	if _, err := ReadMemory(root); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "meminfo")) {
		t.Errorf("err = %v, want an error naming %s", err, filepath.Join(root, "meminfo"))
	}
}

func TestReadPressureFake(t *testing.T) {
	root := fakeProc(t, map[string]string{
		// System-wide cpu before 5.13 has no "full" line.
		"pressure/cpu": "some avg10=1.50 avg60=2.25 avg300=0.10 total=3927133\n",
		"pressure/io":  "some avg10=0.06 avg60=0.21 avg300=0.99 total=8537362\nfull avg10=0.04 avg60=0.13 avg300=0.96 total=8183134\n",
		"pressure/bad": "some avg10=oops\n",
	})

	cpu, err := ReadPressure(root, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Pressure{SomeAvg10: 1.5, SomeAvg60: 2.25, SomeTotal: 3927133 * time.Microsecond}); cpu != want {
		t.Errorf("cpu = %+v, want %+v", cpu, want)
	}

	io, err := ReadPressure(root, "io")
	if err != nil {
		t.Fatal(err)
	}
	want := Pressure{SomeAvg10: 0.06, SomeAvg60: 0.21, SomeTotal: 8537362 * time.Microsecond, FullAvg10: 0.04, FullTotal: 8183134 * time.Microsecond}
	if io != want {
		t.Errorf("io = %+v, want %+v", io, want)
	}

	for _, res := range []string{"bad", "memory"} {
		_, err := ReadPressure(root, res)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "pressure", res)) {
			t.Errorf("ReadPressure(%q) err = %v, want an error naming the file", res, err)
		}
	}
	if _, err := ReadPressure(root, "../stat"); err == nil || !strings.Contains(err.Error(), "../stat") {
		t.Errorf(`ReadPressure("../stat") err = %v, want an invalid-resource error`, err)
	}
}

func TestReadRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skipf("no procfs here: %v", err)
	}
	times, err := ReadCPUTimes("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if len(times) < 1 {
		t.Fatal("no CPUs in /proc/stat")
	}
	for id, c := range times {
		if c.Total <= 0 || c.Busy < 0 || c.Busy > c.Total {
			t.Errorf("cpu%d = %+v, want 0 <= Busy <= Total, Total > 0", id, c)
		}
	}

	mem, err := ReadMemory("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if mem.TotalBytes <= 0 || mem.AvailableBytes > mem.TotalBytes || mem.FreeBytes > mem.TotalBytes {
		t.Errorf("memory = %+v, want 0 < Available, Free <= Total", mem)
	}

	if _, err := os.Stat("/proc/pressure"); err != nil {
		t.Skipf("no PSI in this kernel: %v", err)
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		p, err := ReadPressure("/proc", res)
		if err != nil {
			t.Fatal(err)
		}
		if p.SomeAvg10 < 0 || p.SomeAvg10 > 100 || p.SomeTotal < 0 {
			t.Errorf("%s pressure = %+v out of range", res, p)
		}
	}
}

func BenchmarkReadCPUTimes(b *testing.B) {
	for b.Loop() {
		if _, err := ReadCPUTimes("/proc"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadPressure(b *testing.B) {
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		b.Skipf("no PSI in this kernel: %v", err)
	}
	for b.Loop() {
		if _, err := ReadPressure("/proc", "cpu"); err != nil {
			b.Fatal(err)
		}
	}
}
