package integration

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"golang.org/x/sys/unix"
)

// BenchmarkSpikeToShrink measures the fast path on real cgroups: from the moment an online
// process starts spinning in the shared tier to the moment the agent has lowered the reclaimed
// tier's CFS quota (which holds every reclaimed workload below it at once; the default
// mechanism, quota-on-cut, puts it on at the cut). Each iteration waits for lending to grow back over a CPU and settle first. The
// "200-workloads" case measures it while the slow loop manages 200 idle workloads (half
// shared, half reclaimed), so a fast path that waits on the slow loop's work shows. The
// "200-workloads-cores" case runs cpu.mechanism cores and times the hand-back instead: from the
// spike to the spiking workload's own cpuset widened over the lent core, which comes after the
// quota, the reclaimed cpusets and the shared tier's cpuset (parents first), beside the 100
// idle shared workloads' cpusets.
//
//	go test -run '^$' -bench SpikeToShrink -benchtime 20x ./tests/integration
func BenchmarkSpikeToShrink(b *testing.B) {
	for _, background := range []int{0, 200} {
		b.Run(fmt.Sprintf("%d-workloads", background), func(b *testing.B) { benchSpikeToShrink(b, background, false) })
	}
	if runtime.NumCPU() >= 2 {
		b.Run("200-workloads-cores", func(b *testing.B) { benchSpikeToShrink(b, 200, true) })
	}
}

func benchSpikeToShrink(b *testing.B, background int, cores bool) {
	cfg := "cpu:\n  growStepMilliCPU: 2000\n  peakWindow: 1s\nloops:\n  slowInterval: 200ms\n  metricsStaleAfter: 2s\n"
	if cores {
		cfg = "cpu:\n  peakWindow: 1s\n  mechanism: cores\n  minReclaimedMilliCPU: 10\nloops:\n  slowInterval: 200ms\n  metricsStaleAfter: 2s\n"
	}
	n := newNode(b, cfg)
	n.start()
	tiers := []string{"shared", "reclaimed"}
	for i := 0; i < background; i++ {
		idle := exec.Command("sleep", "3600")
		if err := idle.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = idle.Process.Kill(); _ = idle.Wait() })
		if _, err := n.client.Admit(agent.AdmitRequest{Name: fmt.Sprintf("idle-%d", i), Tier: tiers[i%2], PID: idle.Process.Pid}); err != nil {
			b.Fatal(err)
		}
	}
	// The fast path writes the reclaimed tier's quota at the cut (quota-on-cut puts it on,
	// the quota mechanism lowers it): the write to wait for.
	quotaFile := "cpu.cfs_quota_us"
	if n.layout.Version == cgroupfs.V2 {
		quotaFile = "cpu.max"
	}
	limitFile := filepath.Join(n.layout.Dir("cpu", n.root+"-reclaimed"), quotaFile)
	if cores {
		limitFile = filepath.Join(n.layout.Dir("cpuset", n.root+"/shared"), "cpuset.cpus")
	}
	// lat is each spike's time to the write; decide and write split it where the agent
	// recorded its cut (the time of its throttle action): before, the kernel charging the
	// spinner's CPU time and the watch's windows filling; after, the agent's own work.
	var lat, decide, write []time.Duration
	b.ResetTimer() // ns/op times the spikes, not starting the agent and admitting the workloads
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var lent int64
		var since time.Time
		n.eventually(20*time.Second, "lending grows back and settles", func() error {
			// Over one CPU, so the shrink to the minimum narrows the pool by a CPU, and no
			// longer growing: the spike meets what the node lends at rest, not a moment of
			// growth in which online work kept nearly a core (one spinning core over that is
			// a marginal spike, which the kernel's 4 ms charging takes 3 ticks to tell).
			s := n.status()
			if s.Lendable.MilliCPU != lent {
				lent, since = s.Lendable.MilliCPU, time.Now()
			}
			if lent <= 1000 && !(cores && lent == 1000) || time.Since(since) < time.Second {
				return fmt.Errorf("lendable %dm for %v", lent, time.Since(since))
			}
			return nil
		})
		watched := limitFile
		before := readTrim(b, watched)

		// An online spinner held at a gate until it sits in its cgroup.
		spin := exec.Command("sh", "-c", "read go; while :; do :; done")
		gate, err := spin.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := spin.Start(); err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("spike-%d", i)
		w, err := n.client.Admit(agent.AdmitRequest{Name: name, Tier: "shared", PID: spin.Process.Pid})
		if err != nil {
			b.Fatal(err)
		}
		if cores {
			// Its cgroup, narrowed to the online CPUs (the spinner waits at its gate meanwhile).
			watched = filepath.Join(n.layout.Dir("cpuset", w.Cgroup), "cpuset.cpus")
			n.eventually(5*time.Second, "the spike's cgroup on the online CPUs", func() error {
				data, err := os.ReadFile(watched)
				if err != nil || strings.TrimSpace(string(data)) != readTrim(b, filepath.Join(n.layout.Dir("cpuset", n.root+"/shared"), "cpuset.cpus")) {
					return fmt.Errorf("%q, %v", data, err)
				}
				return nil
			})
			before = readTrim(b, watched)
		}
		seen := watchChange(b, watched, before, 5*time.Second)
		b.StartTimer()
		start := time.Now()
		_, _ = io.WriteString(gate, "go\n")
		at, ok := <-seen
		if !ok {
			b.Fatalf("no shrink within 5s (%s still %s)", watched, before)
		}
		if at.Before(start) {
			b.Fatalf("%s changed before the spike (from %s): lending had not settled", watched, before)
		}
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		if decided, ok := spikeDecision(n.status(), start, at); ok {
			decide = append(decide, decided.Sub(start))
			write = append(write, at.Sub(decided))
		}
		_ = spin.Process.Kill()
		_ = spin.Wait()
		n.eventually(5*time.Second, "spinner released", func() error {
			if _, ok := n.workload(name); ok {
				return fmt.Errorf("still listed")
			}
			return nil
		})
	}
	b.ReportMetric(quantileMilli(lat, 0.5), "p50-ms")
	b.ReportMetric(quantileMilli(lat, 0.99), "p99-ms")
	b.ReportMetric(quantileMilli(lat, 1), "max-ms")
	if len(decide) > 0 {
		b.ReportMetric(quantileMilli(decide, 0.5), "decide-p50-ms")
		b.ReportMetric(quantileMilli(decide, 0.99), "decide-p99-ms")
		b.ReportMetric(quantileMilli(write, 0.99), "write-p99-ms")
	}
	b.ReportMetric(float64(len(decide))/float64(len(lat)), "decided-by-spike")
}

// spikeDecision is the time of the agent's fast-path cut (its throttle action for an
// online spike) between the spike's start and the write seen; false if the spike was cut
// by something else (the interference meter, the slow loop).
func spikeDecision(s reporter.Status, start, seen time.Time) (time.Time, bool) {
	for i := len(s.Actions) - 1; i >= 0; i-- {
		a := s.Actions[i]
		if a.Kind == "throttle" && a.Trigger == "online-spike" && !a.Time.Before(start) && !a.Time.After(seen) {
			return a.Time, true
		}
	}
	return time.Time{}, false
}

// quantileMilli is the q-quantile of d (sorted in place) in milliseconds; 1 is the largest.
func quantileMilli(d []time.Duration, q float64) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[min(int(q*float64(len(d))), len(d)-1)].Microseconds()) / 1000
}

// watchChange reports the time path's content first differs from before, seen through
// inotify (a write to a cgroup file is a modify event) by a thread at real-time priority that
// sleeps until then. Polling instead timed the observer too: on 2 busy CPUs its wake-ups came
// up to 5 ms after the agent's write had returned. The channel is closed without a value if
// nothing changes within timeout. Without CAP_SYS_NICE the thread keeps normal priority.
func watchChange(b *testing.B, path, before string, timeout time.Duration) <-chan time.Time {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		_ = unix.Close(fd)
		b.Fatal(err)
	}
	seen := make(chan time.Time, 1)
	go func() {
		defer close(seen)
		defer unix.Close(fd)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine, priority and all
		if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}, 0); err != nil {
			b.Logf("observer at normal priority: %v", err)
		}
		deadline := time.Now().Add(timeout)
		buf := make([]byte, 4096)
		for time.Now().Before(deadline) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 100)
			if err == unix.EINTR || err == nil && n == 0 {
				continue
			}
			if err != nil {
				b.Logf("observer: poll: %v", err) // the caller then reports no shrink
				return
			}
			at := time.Now()
			_, _ = unix.Read(fd, buf) // drain; what changed is read from the file itself
			if data, err := readFile(path); err == nil && strings.TrimSpace(data) != before {
				seen <- at
				return
			}
		}
	}()
	return seen
}

func readTrim(b testing.TB, path string) string {
	data, err := readFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(data)
}
