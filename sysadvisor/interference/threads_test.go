package interference

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
)

// threadsHelperEnv makes the test binary a helper process instead (see TestMain): a server
// with that many OS threads asleep, like a JVM's or a thread pool's.
const threadsHelperEnv = "TIDAL_TEST_SLEEPING_THREADS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(threadsHelperEnv)); err == nil {
		sleepingThreads(n)
		return
	}
	os.Exit(m.Run())
}

// sleepingThreads starts n goroutines, each locked to an OS thread of its own and asleep on a
// channel, says "ready", and for each line on stdin wakes one of them to spin for good.
func sleepingThreads(n int) {
	wake := make(chan struct{})
	started := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			<-wake
			for time.Now().After(time.Time{}) { // spins for good, on its own thread
			}
		}()
	}
	for range n {
		<-started
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		wake <- struct{}{}
	}
}

// startThreads runs the helper with n sleeping threads in cgroup group and returns a function
// that wakes one of them.
func startThreads(t testing.TB, attach func(pid int) error, n int) (wakeOne func()) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), threadsHelperEnv+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("thread helper: %q, %v", line, err)
	}
	// cgroup.procs moves every thread of the process.
	if err := attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := stdin.Write([]byte("wake\n")); err != nil {
			t.Fatal(err)
		}
	}
}

// A server with hundreds of sleeping threads costs a round the threads that run, plus a turn
// of the idle ones, not a read of every thread; a sleeping thread that starts running is
// found within a full turn of them.
func TestMeterReadsIdleThreadsInTurn(t *testing.T) {
	const sleeping = 300
	layout, root, w := testTree(t)
	group := path.Join(root, "jvm")
	all := plugins.Settings{CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)}
	if err := w.Apply([]plugins.Cgroup{{Path: root, Settings: all}, {Path: group, Settings: all}}); err != nil {
		t.Fatal(err)
	}
	wakeOne := startThreads(t, func(pid int) error { return w.Attach(group, pid) }, sleeping)
	m := NewMeter("/proc", layout)
	defer m.Close()
	groups := []Group{{Name: "jvm", Cgroup: group}}
	round := func() (Reading, uint64) {
		time.Sleep(20 * time.Millisecond)
		before := m.threadReads
		r := m.Read(groups, 0)[0]
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r, m.threadReads - before
	}
	// The first two rounds read every thread: new ones are read until seen idle.
	for i := range 2 {
		if _, n := round(); n < sleeping {
			t.Fatalf("round %d read %d threads, want every one of the %d at first", i+1, n, sleeping)
		}
	}
	// The Go runtime's own threads (sysmon, the GC's) may run now and then: a few more.
	const runtimeThreads = 8
	for i := range 3 {
		if _, n := round(); n > min(idleReadsPerRound+runtimeThreads, sleeping/4) {
			t.Errorf("steady round %d read %d threads of %d, want at most %d idle ones and the few that run", i+1, n, sleeping, idleReadsPerRound)
		}
	}
	wakeOne()
	turns := (sleeping+runtimeThreads)/idleReadsPerRound + 2
	for i := range turns {
		if r, _ := round(); r.Run > 5*time.Millisecond {
			t.Logf("the thread that woke was found %d rounds later (ran %v in the last)", i+1, r.Run)
			// Found, it is read every round from then on.
			for range 3 {
				if r, _ := round(); r.Run < 5*time.Millisecond {
					t.Fatalf("a spinning thread, once found, ran only %v in a round", r.Run)
				}
			}
			return
		}
	}
	t.Fatalf("a sleeping thread that started spinning was not found within %d rounds", turns)
}

// One interference round over a server of 2000 threads, one of them spinning:
//
//	go test -run '^$' -bench MeterRead ./sysadvisor/interference
func BenchmarkMeterRead2000Threads(b *testing.B) {
	layout, root, w := testTree(b)
	group := path.Join(root, "jvm")
	all := plugins.Settings{CPUs: cpuset.New(0, 1), Mems: cpuset.New(0)}
	if err := w.Apply([]plugins.Cgroup{{Path: root, Settings: all}, {Path: group, Settings: all}}); err != nil {
		b.Fatal(err)
	}
	startThreads(b, func(pid int) error { return w.Attach(group, pid) }, 2000)()
	m := NewMeter("/proc", layout)
	defer m.Close()
	groups := []Group{{Name: "jvm", Cgroup: group}}
	for range 3 {
		m.Read(groups, 0)
	}
	for b.Loop() {
		if r := m.Read(groups, 0)[0]; r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
