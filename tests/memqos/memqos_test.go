// Package memqos tests memory QoS with real processes and real cgroups: an online process
// serves a page-cache working set from files, an offline anonymous-memory hog sized to evict
// part of it when nothing stops it, once without tidal and once under tidal.
//
// Run as root: go test -race -count=1 -v ./tests/memqos/
package memqos

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

// The helpers are this test binary, re-run with onlineEnv set to the folder the online
// server serves, or hogEnv to the bytes the offline hog allocates.
const (
	onlineEnv = "TIDAL_MEMQOS_ONLINE_DIR"
	hogEnv    = "TIDAL_MEMQOS_HOG_BYTES"
)

const (
	workingSetBytes = 1536 << 20
	fileBytes       = 128 << 20
	pageBytes       = 4096
)

// diskReadLatency: a second whose read p99 is over this went to the disk for some of its
// reads (a page-cache hit takes 30-40 us here).
const diskReadLatency = time.Millisecond

func TestMain(m *testing.M) {
	if dir := os.Getenv(onlineEnv); dir != "" {
		if err := serveOnline(dir); err != nil {
			fmt.Fprintln(os.Stderr, "online:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if n := os.Getenv(hogEnv); n != "" {
		if err := hog(n); err != nil {
			fmt.Fprintln(os.Stderr, "hog:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testutil.RunSuite(m, &tidalBin)
}

// serveOnline writes the working set, reads it twice (so its pages are active, as a
// server's hot files are) and then reads 4 KiB at random until killed.
func serveOnline(dir string) error {
	files, err := writeWorkingSet(dir)
	if err != nil {
		return err
	}
	buf := make([]byte, pageBytes)
	for range 2 {
		for _, f := range files {
			for off := int64(0); off < fileBytes; off += pageBytes {
				if _, err := f.ReadAt(buf, off); err != nil {
					return err
				}
			}
		}
	}
	fmt.Println("ready")
	// About 20k reads a second: a busy server, leaving the hog (and the machine's other
	// work) CPU to allocate with on a small test machine. Each second it prints the 99th
	// percentile of its reads' latency over that second: "p99 <microseconds>".
	lat := make([]time.Duration, 0, 1<<15)
	last := time.Now()
	for {
		for range 200 {
			f := files[rand.IntN(len(files))]
			start := time.Now()
			if _, err := f.ReadAt(buf, rand.Int64N(fileBytes/pageBytes)*pageBytes); err != nil {
				return err
			}
			lat = append(lat, time.Since(start))
		}
		if time.Since(last) >= time.Second {
			slices.Sort(lat)
			fmt.Printf("p99 %d\n", lat[len(lat)*99/100].Microseconds())
			lat, last = lat[:0], time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readLatency collects the online server's per-second p99 read latencies as it prints them.
type readLatency struct {
	mu      sync.Mutex
	seconds []latencySecond
}

type latencySecond struct {
	at  time.Time
	p99 time.Duration
}

func (r *readLatency) add(line string) {
	us, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "p99 "), 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seconds = append(r.seconds, latencySecond{time.Now(), time.Duration(us) * time.Microsecond})
}

// latencySummary: the per-second p99s of a run, summarised.
type latencySummary struct {
	median, worst time.Duration
	n             int // seconds
	slow          int // seconds whose p99 is over diskReadLatency
}

// between summarises the per-second p99s printed in [from, to].
func (r *readLatency) between(from, to time.Time) latencySummary {
	r.mu.Lock()
	var v []time.Duration
	for _, s := range r.seconds {
		if !s.at.Before(from) && !s.at.After(to) {
			v = append(v, s.p99)
		}
	}
	r.mu.Unlock()
	if len(v) == 0 {
		return latencySummary{}
	}
	slices.Sort(v)
	slow := 0
	for _, d := range v {
		if d > diskReadLatency {
			slow++
		}
	}
	return latencySummary{median: v[len(v)/2], worst: v[len(v)-1], n: len(v), slow: slow}
}

// hog allocates anonymous memory as fast as the kernel gives it (64 MiB mappings written a
// page at a time), reports each GiB, and holds it. The OOM killer takes it first.
//
// Its pages fault in from user space, as a program's heap does: that is where a task at a v1
// limit with oom_kill_disable waits. A charge the kernel makes for itself fails there
// instead (docs/config.md#memory-qos): with MAP_POPULATE the 64 MiB syscalls made the Go
// runtime start threads, and a clone at the limit failed ("pthread_create failed") and
// crashed the hog in about one run of four.
func hog(size string) error {
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return err
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		return err
	}
	const chunk = 64 << 20
	start := time.Now()
	var next atomic.Int64 // bytes claimed so far
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	// Two allocators: on a small, busy test machine one is too slow to pressure memory
	// within the test's time.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := next.Add(chunk); a <= n; a = next.Add(chunk) {
				b, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < len(b); i += pageBytes {
					b[i] = 1
				}
				if a%(1<<30) == 0 {
					fmt.Printf("%.1fs: %dMiB\n", time.Since(start).Seconds(), a>>20)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	fmt.Printf("%.1fs: reached %dMiB\n", time.Since(start).Seconds(), n>>20)
	for {
		time.Sleep(time.Hour)
	}
}

func writeWorkingSet(dir string) ([]*os.File, error) {
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	var files []*os.File
	for i := range workingSetBytes / fileBytes {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("ws-%d", i)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, err
		}
		for n := 0; n < fileBytes; n += len(chunk) {
			if _, err := f.Write(chunk); err != nil {
				return nil, err
			}
		}
		files = append(files, f)
	}
	return files, nil
}

// residency is the fraction of the working set's pages in the page cache (mincore).
func residency(t *testing.T, dir string) float64 {
	t.Helper()
	var resident, total int
	for i := range workingSetBytes / fileBytes {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("ws-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, fileBytes, unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		vec := make([]byte, fileBytes/pageBytes)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
		_ = unix.Munmap(mem)
		if errno != 0 {
			t.Fatalf("mincore: %v", errno)
		}
		for _, v := range vec {
			resident += int(v & 1)
		}
		total += len(vec)
	}
	return float64(resident) / float64(total)
}

// startOnline starts the online server (argv before the test binary: "tidal run ..." or
// nothing) and waits until its working set is warm; its read latencies go to lat.
func startOnline(t *testing.T, dir string, lat *readLatency, prefix ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{}, prefix...), self)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), onlineEnv+"="+dir)
	cmd.WaitDelay = 2 * time.Second
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(out)
		var err error
		switch {
		case !lines.Scan():
			err = fmt.Errorf("online said nothing: %v", lines.Err())
		case lines.Text() != "ready":
			err = fmt.Errorf("online said %q", lines.Text())
		}
		ready <- err
		for lines.Scan() {
			lat.add(lines.Text())
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("online server did not warm its working set in 60s")
	}
	return cmd
}

// hogBytes is the offline job's size: what is available less a quarter of the working set,
// so that, unconstrained, it must evict part of the online working set (other page cache goes
// first). The kernel's OOM killer takes the hog first (oom_score_adj 1000), never another
// process on the machine.
func hogBytes(t *testing.T) int64 {
	t.Helper()
	m, err := metrics.ReadMemory("/proc")
	if err != nil {
		t.Fatal(err)
	}
	return m.AvailableBytes - workingSetBytes/4
}

// hogCommand runs the hog helper, after prefix ("tidal run ..." or nothing).
func hogCommand(t *testing.T, size int64, prefix ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{}, prefix...), self)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), hogEnv+"="+strconv.FormatInt(size, 10))
	// Under `tidal run` the hog is a grandchild holding the output pipe: Wait must not wait
	// for it (startAgent's cleanup kills it).
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// runHog runs cmd (the hog) until it ends or for at most d, sampling the working set's
// residency every 250 ms; it returns the lowest residency seen and how the hog ended.
func runHog(t *testing.T, dir string, cmd *exec.Cmd, d time.Duration) (float64, string, error) {
	t.Helper()
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	defer func() { t.Logf("hog's last words: %s", testutil.Tail(out.String(), 2)) }()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	lowest := 1.0
	deadline := time.After(d)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return min(lowest, residency(t, dir)), fmt.Sprint("exited: ", err), err
		case <-deadline:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return lowest, "still running (killed by the test)", nil
		case <-tick.C:
			lowest = min(lowest, residency(t, dir))
		}
	}
}

// Under tidal, an offline hog that would evict part of the online working set is held to
// what tidal lends, which leaves the online active page cache out; the hog, allocating
// faster than lending grows, waits at its limit (v1 oom_kill_disable) or is throttled (v2
// memory.high) instead of being OOM-killed, and when lending cannot grow further it is
// evicted by tidal. The online server keeps running and its working set stays resident.
func TestOnlinePageCacheHoldsUnderAHog(t *testing.T) {
	isolationtest.RequireRoot(t, "to manage cgroups")
	if testing.Short() {
		t.Skip("fills the node's memory twice: minutes on a small, busy machine")
	}
	dir := t.TempDir()

	// Unconstrained: no agent, the hog runs as any process would.
	waitCalm(t)
	freeLat := &readLatency{}
	online := startOnline(t, dir, freeLat)
	before := residency(t, dir)
	size := hogBytes(t)
	from := time.Now()
	// The hog fills memory at the speed the hypervisor backs it: 240-290 MiB/s on this kind of
	// VM, 78-95 s to its size, so 90 s sometimes ended it before it pressed on the page cache
	// at all; 150 s leaves it a minute at its size.
	free, how, _ := runHog(t, dir, hogCommand(t, size), 150*time.Second)
	freeLatency := freeLat.between(from, time.Now())
	t.Logf("unconstrained: hog of %dMiB %s; working set resident %.0f%% before, lowest %.0f%% during; online read p99 per second over %d s: median %s, worst %s, %d over %s",
		size>>20, how, before*100, free*100, freeLatency.n, freeLatency.median, freeLatency.worst, freeLatency.slow, diskReadLatency)
	if online.ProcessState != nil {
		t.Fatal("online server ended in the unconstrained run")
	}
	if free > 0.9 {
		t.Fatalf("the unconstrained hog left %.0f%% of the working set resident: the scenario does not pressure online page cache", free*100)
	}
	_ = syscall.Kill(-online.Process.Pid, syscall.SIGKILL)
	_ = online.Wait()

	// Under tidal, once the first run's memory pressure has passed (tidal evicts on it).
	waitCalm(t)
	a := startAgent(t, "")
	tidalLat := &readLatency{}
	online = startOnline(t, dir, tidalLat, tidalBin, "run", "--socket", a.Socket, "--tier", "shared", "--name", "online", "--")
	before = residency(t, dir)
	size = hogBytes(t)
	hog := hogCommand(t, size, tidalBin, "run", "--socket", a.Socket, "--tier", "reclaimed", "--name", "hog", "--")
	kills := nodeOOMKills(t)
	from = time.Now()
	held, how, exit := runHog(t, dir, hog, 90*time.Second)
	tidalLatency := tidalLat.between(from, time.Now())
	kills = nodeOOMKills(t) - kills
	st := a.Status()
	t.Logf("under tidal: hog of %dMiB %s; working set resident %.0f%% before, lowest %.0f%% during (%.2fx the unconstrained run); online read p99 per second over %d s: median %s, worst %s, %d over %s",
		size>>20, how, before*100, held*100, held/max(free, 0.01), tidalLatency.n, tidalLatency.median, tidalLatency.worst, tidalLatency.slow, diskReadLatency)
	t.Logf("online read p99 under tidal / unconstrained: median %.2fx, worst %.2fx",
		float64(tidalLatency.median)/float64(max(freeLatency.median, time.Microsecond)), float64(tidalLatency.worst)/float64(max(freeLatency.worst, time.Microsecond)))
	if m := st.Memory; m != nil {
		t.Logf("tidal memory: lent %dMiB, throttle %dMiB, online %dMiB of which hot page cache %dMiB", m.LentBytes>>20, m.ThrottleBytes>>20, m.OnlineBytes>>20, m.OnlinePageCacheBytes>>20)
	}
	evicted := evictions(a)
	t.Logf("evictions: %q; OOM kills on the node meanwhile: %d", evicted, kills)

	if online.ProcessState != nil {
		t.Fatal("online server ended under tidal")
	}
	if held < 0.95 || held < free+0.1 {
		t.Errorf("under tidal the working set fell to %.0f%% resident (unconstrained %.0f%%): want >= 95%% and 10 points above", held*100, free*100)
	}
	// The latency the residency stands for: unconstrained, the seconds in which the hog pushed
	// the working set out are disk reads (the disk here is fast, so they are few and the
	// median second barely moves); under tidal they should be fewer. Not the worst second:
	// on this shared VM a second stalls now and then whatever holds memory (CI, 2026-12-03:
	// 6.5 ms under tidal with the working set 100% resident, 3.3 ms unconstrained at 0%).
	// Some days the VM's disk answers the evicted reads from the host's cache in well under
	// a millisecond: with fewer than minSlowSeconds slow seconds unconstrained, the
	// comparison tells nothing and the residency above is the check.
	const minSlowSeconds = 3
	switch {
	case freeLatency.n == 0 || tidalLatency.n == 0:
		t.Errorf("no online latency figures: %d seconds unconstrained, %d under tidal", freeLatency.n, tidalLatency.n)
	case freeLatency.slow < minSlowSeconds:
		t.Logf("unconstrained, %d seconds' p99 over %s: the evicted reads came back too fast to tell from other stalls; the residency above is the check", freeLatency.slow, diskReadLatency)
	case tidalLatency.slow >= freeLatency.slow:
		t.Errorf("online read p99 over %s in %d seconds under tidal, %d unconstrained: want fewer under tidal", diskReadLatency, tidalLatency.slow, freeLatency.slow)
	}
	if oomKilled(exit, evicted) {
		t.Errorf("the kernel OOM-killed the hog (%v): it should have been slowed at its limit", exit)
	}
	for _, r := range evicted {
		if !strings.Contains(r, "hog") {
			t.Errorf("tidal evicted something other than the hog: %s", r)
		}
	}
}

// startAgent starts an agent with extra config. When the test ends every process left in
// its cgroups is killed first: `tidal run` puts its command in a process group of its own,
// which killing `tidal run` does not reach.
func startAgent(t *testing.T, extra string) *testutil.Agent {
	t.Helper()
	a := testutil.NewAgent(t, tidalBin, extra, "", false)
	t.Cleanup(func() {
		pids, _ := a.Layout.Procs(a.Root, true)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		testutil.Eventually(t, 10*time.Second, "test processes gone", func() error {
			if pids, _ := a.Layout.Procs(a.Root, true); len(pids) > 0 {
				return fmt.Errorf("%d left", len(pids))
			}
			return nil
		})
	})
	a.Start()
	return a
}

// waitCalm waits until memory pressure (PSI some avg10) is under 1%.
func waitCalm(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, "memory pressure under 1%", func() error {
		p, err := metrics.ReadPressure("/proc", "memory")
		if err != nil {
			return err
		}
		if p.SomeAvg10 >= 1 {
			return fmt.Errorf("memory PSI some avg10 %.1f%%", p.SomeAvg10)
		}
		return nil
	})
}

// oomKilled says the kernel killed the hog: `tidal run` passes on its SIGKILL as status
// 137, and tidal did not evict it (an eviction starts with SIGTERM, which the hog dies of).
func oomKilled(exit error, evicted []string) bool {
	var ee *exec.ExitError
	return errors.As(exit, &ee) && ee.ExitCode() == 128+int(syscall.SIGKILL) && len(evicted) == 0
}

// nodeOOMKills is the kernel's count of OOM kills on the node (/proc/vmstat oom_kill).
func nodeOOMKills(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
			v, _ := strconv.Atoi(n)
			return v
		}
	}
	return 0
}

// head is the first lines of s: where a Go runtime's fatal error says what it was.
func head(s string, lines int) string {
	l := strings.SplitN(s, "\n", lines+1)
	return strings.Join(l[:min(len(l), lines)], "\n")
}

// evictions are the reasons of the agent's evict actions.
func evictions(a *testutil.Agent) []string {
	var out []string
	for _, act := range a.Status().Actions {
		if act.Kind == "evict" {
			out = append(out, act.Reason)
		}
	}
	return out
}

// An offline job that allocates faster than lending grows is slowed at its limit, not
// OOM-killed, while the node has memory to lend; with memory.oomWait off (the old behaviour)
// the kernel kills it, which shows the test can tell the two apart.
func TestFastAllocatorIsSlowedNotKilled(t *testing.T) {
	isolationtest.RequireRoot(t, "to manage cgroups")
	const size = 1 << 30
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprintf("oomWait=%v", wait), func(t *testing.T) {
			// Lending grows 64Mi a second from 256Mi; the hog asks for 1Gi at once.
			a := startAgent(t, fmt.Sprintf("memory:\n  growStepBytes: 64Mi\n  oomWait: %v\n", wait))
			start := time.Now()
			hog := hogCommand(t, size, tidalBin, "run", "--socket", a.Socket, "--tier", "reclaimed", "--name", "fast", "--")
			out := &testutil.SyncBuffer{}
			hog.Stdout, hog.Stderr = out, out
			hog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := hog.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- hog.Wait() }()
			t.Cleanup(func() {
				_ = syscall.Kill(-hog.Process.Pid, syscall.SIGKILL)
				<-done
			})
			waited := false
			kills := nodeOOMKills(t)
			var exit error
			deadline := time.After(60 * time.Second)
			for !strings.Contains(out.String(), "reached") {
				select {
				case exit = <-done:
					done <- exit
					goto ended
				case <-deadline:
					t.Fatalf("the hog did not reach %dMiB in 60s: %s", size>>20, testutil.Tail(out.String(), 3))
				case <-time.After(200 * time.Millisecond):
					if m := a.Status().Memory; m != nil && m.ReclaimedWaiting {
						waited = true
					}
					if oom, _ := a.File("memory", plugins.TierPath(a.Root, qos.Reclaimed), "memory.oom_control"); strings.Contains(oom, "under_oom 1") {
						waited = true
					}
				}
			}
		ended:
			kills = nodeOOMKills(t) - kills
			killed := oomKilled(exit, evictions(a))
			t.Logf("oomWait=%v: after %.1fs (exit %v) the hog said %q; waited at its limit: %v; OOM-killed: %v (OOM kills on the node: %d)",
				wait, time.Since(start).Seconds(), exit, testutil.Tail(out.String(), 2), waited, killed, kills)
			switch {
			case wait && (killed || !strings.Contains(out.String(), "reached")):
				// All it said: a Go runtime that dies at its limit says why (a thread it could
				// not create, memory it could not map) well above its last two lines.
				t.Errorf("with oomWait the hog was killed (%v) instead of slowed; it said, first:\n%s\n...and last:\n%s",
					exit, head(out.String(), 30), testutil.Tail(out.String(), 15))
			case wait && !waited:
				t.Errorf("the hog never waited at its limit: it was not faster than lending, the test shows nothing")
			case !wait && !killed:
				t.Errorf("without oomWait the kernel did not OOM-kill the fast hog: the test cannot tell the cases apart")
			}
		})
	}
}
