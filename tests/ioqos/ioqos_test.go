// Package ioqos tests disk IO isolation with real processes on a real block device: a loop
// device over a file the test creates, formatted ext4. An offline writer (O_DIRECT, 1 MiB
// writes) runs against an online workload doing small synchronous writes (4 KiB, O_DSYNC),
// in interleaved rounds: once unconstrained (the writer outside tidal) and once under tidal
// (the writer in the reclaimed tier, throttled to what tidal lends on the device). It
// reports the online p99 write latency and the offline throughput of each round and their
// ratios, and asserts behaviour, not timing constants: under tidal the writer is held to
// about what is lent, and the online p99 is better than unconstrained.
//
// Run as root: go test -count=1 -v ./tests/ioqos/
package ioqos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

// The offline writer is this test binary, re-run with offlineEnv set to the file it writes
// and resultEnv to where it reports the bytes it wrote.
const (
	offlineEnv = "TIDAL_IOQOS_OFFLINE_FILE"
	resultEnv  = "TIDAL_IOQOS_RESULT"
)

const (
	offlineBlock  = 1 << 20
	offlineRegion = 128 << 20
	// offlineWriters keep several large writes in flight, as a batch job's IO does.
	offlineWriters = 4
	onlineBlock    = 4096
	onlineRegion   = 16 << 20
	// The capacity the test tells tidal the loop device has, for writes.
	capacityWriteBps = 64 << 20
	// Its write IOs per second, in the growth test: unknown, only the floor (64) would be
	// lent, and the writer's bios (split below 1 MiB by the device) would be held by that.
	capacityWriteIOPS = 4000
	phase             = 8 * time.Second
	rounds            = 3
)

func TestMain(m *testing.M) {
	if path := os.Getenv(offlineEnv); path != "" {
		if err := offline(path, os.Getenv(resultEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "offline:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testutil.RunSuite(m, &tidalBin)
}

// offline writes 1 MiB blocks with O_DIRECT from offlineWriters threads, each over its own
// 128 MiB region, until killed, and keeps the bytes written in result (every 20 ms).
func offline(path, result string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_DIRECT, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var written atomic.Int64
	errs := make(chan error, offlineWriters)
	for w := 0; w < offlineWriters; w++ {
		go func() {
			// O_DIRECT needs an aligned buffer: an anonymous mapping is page-aligned.
			buf, err := unix.Mmap(-1, 0, offlineBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				errs <- err
				return
			}
			for i := range buf {
				buf[i] = byte(i)
			}
			base := int64(w) * offlineRegion
			for n := 0; ; n++ {
				off := base + int64(n%(offlineRegion/offlineBlock))*offlineBlock
				k, err := f.WriteAt(buf, off)
				written.Add(int64(k))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// One reporter, renaming a complete file into place: a reader never sees a torn count.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errs:
			return err
		case <-tick.C:
			if err := os.WriteFile(result+".tmp", []byte(strconv.FormatInt(written.Load(), 10)), 0o600); err != nil {
				return err
			}
			if err := os.Rename(result+".tmp", result); err != nil {
				return err
			}
		}
	}
}

// loopDevice makes a 1 GiB file, attaches a loop device over it (direct IO, so the device
// behaves like a disk rather than the host's page cache), formats it ext4 and mounts it. All
// of it is undone when the test ends, also on failure.
func loopDevice(t *testing.T) (dev, mnt string) {
	t.Helper()
	isolationtest.RequireRoot(t, "to attach a loop device")
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			isolationtest.Unavailable(t, "%s not found (util-linux, e2fsprogs)", tool)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "tidal-ioqos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	backing := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 1<<30); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--show", "-f", backing).CombinedOutput()
	if err != nil {
		isolationtest.Unavailable(t, "losetup: %v: %s", err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", dev, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return dev, mnt
}

// online does one 4 KiB O_DSYNC write every 5 ms (a service's small commits) for d and
// returns each write's latency.
func online(t *testing.T, path string, d time.Duration) []time.Duration {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_DSYNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, onlineBlock)
	var lat []time.Duration
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(n%(onlineRegion/onlineBlock))*onlineBlock); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}

func p99(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)*99/100]
}

// result is one phase's figures.
type result struct {
	p99        time.Duration
	offlineBps float64
	// maxLentBps is the most tidal lent for writes on the device during the phase (0
	// unconstrained).
	maxLentBps uint64
}

// runPhase starts the offline writer (cmd), measures the online workload beside it for a
// phase, stops the writer and reads what it wrote.
func runPhase(t *testing.T, a *testutil.Agent, mnt, dev string, underTidal bool, round int) result {
	t.Helper()
	resultFile := filepath.Join(t.TempDir(), "written")
	env := []string{offlineEnv + "=" + filepath.Join(mnt, "offline.dat"), resultEnv + "=" + resultFile}
	var cmd *exec.Cmd
	if underTidal {
		cmd = a.Run(append([]string{"--tier", "reclaimed", "--name", fmt.Sprintf("writer-%d", round), "--", "env"}, append(env, os.Args[0])...)...)
	} else {
		cmd = exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	}
	// Let the writer start (and, under tidal, be admitted) before measuring.
	testutil.Eventually(t, 15*time.Second, "offline writer writing", func() error {
		if data, err := os.ReadFile(resultFile); err != nil || len(data) == 0 || string(data) == "0" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	var maxLent uint64
	done := make(chan struct{})
	if underTidal {
		go func() {
			defer close(done)
			end := time.Now().Add(phase)
			for time.Now().Before(end) {
				if s, err := a.Client.Status(); err == nil {
					maxLent = max(maxLent, lentWrite(s, dev))
				}
				time.Sleep(250 * time.Millisecond)
			}
		}()
	} else {
		close(done)
	}
	if underTidal && os.Getenv("TIDAL_IOQOS_DEBUG") != "" {
		pids, _ := a.Layout.Procs(a.Root+"-reclaimed", true)
		for _, pid := range pids {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			t.Logf("pid %d cgroup:\n%s", pid, cg)
		}
		for _, f := range []string{"blkio.throttle.write_bps_device", "blkio.throttle.io_service_bytes_recursive"} {
			v, _ := a.File("blkio", a.Root+"-reclaimed", f)
			t.Logf("%s: %s", f, v)
		}
	}
	before := readInt(resultFile)
	start := time.Now()
	lat := online(t, filepath.Join(mnt, "online.dat"), phase)
	elapsed := time.Since(start)
	after := readInt(resultFile)
	<-done
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if underTidal {
		// `tidal run` puts the writer in a process group of its own: kill it by its cgroup.
		killReclaimed(t, a)
	}
	_ = cmd.Wait()
	return result{p99: p99(lat), offlineBps: float64(after-before) / elapsed.Seconds(), maxLentBps: maxLent}
}

func killReclaimed(t *testing.T, a *testutil.Agent) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "offline writer gone", func() error {
		pids, _ := a.Layout.Procs(a.Root+"-reclaimed", true)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) > 0 {
			return fmt.Errorf("%d left", len(pids))
		}
		return nil
	})
}

func lentWrite(s reporter.Status, dev string) uint64 {
	if s.IO == nil {
		return 0
	}
	var st unix.Stat_t
	if unix.Stat(dev, &st) != nil {
		return 0
	}
	num := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	for _, d := range s.IO.Disks {
		if d.Device == num {
			return d.Lent.WriteBps
		}
	}
	return 0
}

func readInt(path string) int64 {
	data, _ := os.ReadFile(path)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Under tidal the offline writer is throttled to what tidal lends on the device, and the
// online workload's p99 write latency is better than with the writer unconstrained.
func TestOfflineWriterIsThrottledAndOnlineLatencyHolds(t *testing.T) {
	dev, mnt := loopDevice(t)
	a := testutil.NewAgent(t, tidalBin, fmt.Sprintf(`io:
  nodeDisks: false
  devices:
    - device: %s
      writeBps: %d
`, dev, capacityWriteBps), "", false)
	a.Start()
	testutil.Eventually(t, 15*time.Second, "tidal manages the loop device", func() error {
		if lentWrite(a.Status(), dev) == 0 {
			return fmt.Errorf("no IO lent on %s yet", dev)
		}
		return nil
	})

	var freeP99, tidalP99, freeBps, tidalBps, ratios []float64
	for r := 0; r < rounds; r++ {
		free := runPhase(t, a, mnt, dev, false, r)
		held := runPhase(t, a, mnt, dev, true, r)
		t.Logf("round %d: online p99 unconstrained %v, under tidal %v (%.2fx); offline unconstrained %.1f MiB/s, under tidal %.1f MiB/s (%.2fx; most lent %.1f MiB/s)",
			r+1, free.p99.Round(time.Microsecond), held.p99.Round(time.Microsecond), float64(held.p99)/float64(free.p99),
			free.offlineBps/(1<<20), held.offlineBps/(1<<20), held.offlineBps/free.offlineBps, float64(held.maxLentBps)/(1<<20))
		freeP99 = append(freeP99, float64(free.p99))
		tidalP99 = append(tidalP99, float64(held.p99))
		freeBps = append(freeBps, free.offlineBps)
		tidalBps = append(tidalBps, held.offlineBps)
		ratios = append(ratios, float64(held.p99)/float64(free.p99))
		// Held to what is lent (with room for the throttle's burst at the start of a phase).
		if held.maxLentBps == 0 {
			t.Errorf("round %d: tidal lent nothing on %s", r+1, dev)
		} else if held.offlineBps > 1.25*float64(held.maxLentBps)+float64(4<<20) {
			t.Errorf("round %d: offline writer did %.1f MiB/s under tidal, above the %.1f MiB/s lent", r+1, held.offlineBps/(1<<20), float64(held.maxLentBps)/(1<<20))
		}
	}
	s := a.Status()
	if s.IO != nil {
		for _, d := range s.IO.Disks {
			t.Logf("tidal io: disk %s (%s): lent %s, rule %q; online peak %s", d.Name, d.Device, d.Lent, d.Rule, d.Online)
		}
	}
	t.Logf("median of %d rounds: online p99 unconstrained %v, under tidal %v (ratio median %.2fx); offline unconstrained %.1f MiB/s, under tidal %.1f MiB/s",
		rounds, time.Duration(median(freeP99)).Round(time.Microsecond), time.Duration(median(tidalP99)).Round(time.Microsecond), median(ratios),
		median(freeBps)/(1<<20), median(tidalBps)/(1<<20))
	if median(tidalBps) >= median(freeBps) {
		t.Errorf("the offline writer was not throttled: %.1f MiB/s under tidal, %.1f unconstrained", median(tidalBps)/(1<<20), median(freeBps)/(1<<20))
	}
	if median(ratios) >= 1 {
		t.Errorf("online p99 under tidal is not better than unconstrained: median ratio %.2fx", median(ratios))
	}
}

// With no online IO on the device, what tidal lends grows from the floor by steps towards the
// configured capacity less the margin, and the offline writer's throughput follows it.
func TestLendingGrowsWithSlack(t *testing.T) {
	dev, mnt := loopDevice(t)
	a := testutil.NewAgent(t, tidalBin, fmt.Sprintf(`io:
  nodeDisks: false
  devices:
    - device: %s
      writeBps: %d
      writeIOPS: %d
`, dev, capacityWriteBps, capacityWriteIOPS), "", false)
	a.Start()
	resultFile := filepath.Join(t.TempDir(), "written")
	a.Run("--tier", "reclaimed", "--name", "writer", "--", "env", offlineEnv+"="+filepath.Join(mnt, "offline.dat"), resultEnv+"="+resultFile, os.Args[0])
	t.Cleanup(func() { killReclaimed(t, a) })
	var lent []float64
	var last uint64
	start := time.Now()
	for time.Since(start) < 14*time.Second {
		last = lentWrite(a.Status(), dev)
		lent = append(lent, float64(last)/(1<<20))
		time.Sleep(time.Second)
	}
	// The writer's throughput over the last 3 s, against what was lent then.
	before := readInt(resultFile)
	time.Sleep(3 * time.Second)
	rate := float64(readInt(resultFile)-before) / 3
	end := lentWrite(a.Status(), dev)
	if w, ok := a.Workload("writer"); ok {
		v, _ := a.File("blkio", w.Cgroup, "blkio.throttle.write_bps_device")
		t.Logf("the writer's cgroup %s: blkio.throttle.write_bps_device %q", w.Cgroup, v)
	}
	t.Logf("write bandwidth lent each second (MiB/s): %.1f", lent)
	t.Logf("offline writer over the last 3 s: %.1f MiB/s with %.1f-%.1f MiB/s lent (capacity %d MiB/s)", rate/(1<<20), float64(last)/(1<<20), float64(end)/(1<<20), capacityWriteBps>>20)
	if slices.Max(lent) < 16 {
		t.Errorf("lending did not grow past 16 MiB/s with the device otherwise idle: %v", lent)
	}
	if hi := float64(max(last, end)); rate > 1.25*hi+float64(4<<20) {
		t.Errorf("the writer did %.1f MiB/s, above the %.1f MiB/s lent", rate/(1<<20), hi/(1<<20))
	}
}

// Turning IO isolation off clears the throttles an earlier run wrote: an operator who drops
// io.devices must not find offline IO still held to 64 IO/s by a limit status no longer shows.
func TestOffClearsThrottlesAnEarlierRunLeft(t *testing.T) {
	dev, _ := loopDevice(t)
	a := testutil.NewAgent(t, tidalBin, fmt.Sprintf("io:\n  nodeDisks: false\n  devices:\n    - device: %s\n      writeBps: %d\n", dev, capacityWriteBps), "", false)
	throttles := func() string {
		rel := a.Root + "-reclaimed"
		if a.Layout.Version == cgroupfs.V2 {
			data, err := os.ReadFile(filepath.Join(a.Layout.Dir("io", rel), "io.max"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(data))
		}
		var all []string
		for _, f := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device", "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"} {
			data, err := os.ReadFile(filepath.Join(a.Layout.Dir("blkio", rel), f))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, strings.Fields(string(data))...)
		}
		return strings.Join(all, " ")
	}
	a.Start()
	testutil.Eventually(t, 15*time.Second, "the reclaimed tier throttled on the loop device", func() error {
		if throttles() == "" {
			return fmt.Errorf("no throttle yet (lent %d B/s)", lentWrite(a.Status(), dev))
		}
		return nil
	})
	a.Kill9()
	testutil.AppendFile(t, a.Config, "  enabled: false\n") // under io:, the config's last key
	a.Start()
	testutil.Eventually(t, 10*time.Second, "the earlier run's throttles cleared", func() error {
		if th := throttles(); th != "" {
			return fmt.Errorf("reclaimed tier still throttled: %s", th)
		}
		return nil
	})
}
