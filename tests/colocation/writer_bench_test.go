package main

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/plugins/policy"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// The agent's hot paths with 200 workloads on real cgroups (root; skipped otherwise):
//
//	go test -run '^$' -bench . ./tests/colocation
//
// Each benchmark owns a uniquely named cgroup root, removed at the end.

const benchWorkloads = 200

// benchNode is a cgroup tree like the agent's, with 200 workloads (half shared, half
// reclaimed), written through the project's one cgroup write path.
type benchNode struct {
	layout    *cgroupfs.Layout
	topo      *topology.Topology
	writer    *isolation.Writer
	root      string
	workloads []plugins.Workload
	idle      bool
}

func newBenchNode(b *testing.B) *benchNode {
	layout := isolationtest.Layout(b)
	root := isolationtest.RootName(b, layout)
	topo, err := topology.Discover("/sys", "/proc")
	if err != nil {
		b.Fatal(err)
	}
	w, err := isolation.NewWriter(layout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	n := &benchNode{layout: layout, topo: topo, writer: w, root: root, idle: w.SupportsIdle()}
	for i := 0; i < benchWorkloads; i++ {
		tier := qos.Shared
		if i%2 == 1 {
			tier = qos.Reclaimed
		}
		name := fmt.Sprintf("w-%03d", i)
		n.workloads = append(n.workloads, plugins.Workload{Name: name, Tier: tier,
			Cgroup: plugins.WorkloadPath(root, tier, name), DedicatedCPUs: cpuset.New()})
	}
	return n
}

// tree is the desired cgroup tree when the node lends lentMilli, built as the agent does.
func (n *benchNode) tree(lentMilli int64) []plugins.Cgroup {
	perNode := map[int]int64{}
	for _, nn := range n.topo.NUMANodes {
		perNode[nn.ID] = lentMilli / int64(len(n.topo.NUMANodes))
	}
	pools := cpu.ComputePools(n.topo, cpuset.New(), cpuset.New(), perNode)
	t := plugins.NewTree(n.root, n.workloads, nil)
	node := plugins.Node{CPUs: n.topo.AllCPUs(), Pools: pools, LentMilliCPU: lentMilli, LentMemory: 4 << 30, Idle: n.idle}
	pol := policy.Default()
	pol.Fill(t, node)
	for _, w := range n.workloads {
		*t.Workload(w) = pol.Decide(w, node).Settings
	}
	return t.Cgroups()
}

func (n *benchNode) apply(b *testing.B, lentMilli int64) {
	if err := n.writer.Apply(n.tree(lentMilli)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkApply200Unchanged is one full write pass over an unchanged tree: the steady state
// of the slow loop, where write-on-change makes it a walk over remembered values.
func BenchmarkApply200Unchanged(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1200) // creates the cgroups and writes every knob once
	for b.Loop() {
		n.apply(b, 1200)
	}
}

// BenchmarkApply200AfterForget is the drift-repair pass the slow loop makes once in a while:
// the writer forgets what it remembered and re-reads every cgroup's files (nothing drifted, so
// nothing is written).
func BenchmarkApply200AfterForget(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1200)
	before := n.writes()
	for b.Loop() {
		n.writer.Forget()
		n.apply(b, 1200)
	}
	if w := n.writes(); w != before {
		b.Fatalf("a re-read of an unchanged tree wrote %d times", w-before)
	}
}

// BenchmarkApply200Recheck is the slow loop's pass as it repairs drift since Recheck: one
// turn in 30, so a thirtieth of the cgroups is re-read each pass instead of every cgroup once
// in 30 passes (BenchmarkApply200AfterForget).
func BenchmarkApply200Recheck(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1200)
	before := n.writes()
	for i := 0; b.Loop(); i++ {
		n.writer.Recheck(i, 30)
		n.apply(b, 1200)
	}
	if w := n.writes(); w != before {
		b.Fatalf("a re-read of an unchanged tree wrote %d times", w-before)
	}
}

func (n *benchNode) writes() uint64 {
	var total uint64
	for _, v := range n.writer.Stats().Writes {
		total += v
	}
	return total
}

// BenchmarkApply200QuotaChange is a write pass in which lending changes every time: the
// reclaimed tier's CFS quota is rewritten (the tier caps its workloads as a whole, so that is
// one write), the rest of the tree is unchanged.
func BenchmarkApply200QuotaChange(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1200)
	lent := []int64{1400, 1200}
	for i := 0; b.Loop(); i++ {
		n.apply(b, lent[i%2])
	}
}

// workloadSampleShare is the share of workloads whose counters one slow-loop pass reads: the
// agent reads each workload every tenth pass, round robin.
const workloadSampleShare = 10

// BenchmarkSlowPassParts200 is the work of one slow-loop pass, rebuilt from the exported parts
// the agent's pass uses (its own function is internal to the agent): read node CPU, memory and
// pressure, read a tenth of the workloads' processes, CPU and memory, one advisor step, plan to
// settings, and the write pass (unchanged lending).
func BenchmarkSlowPassParts200(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1200)
	adv := advisor.New(advisor.Config{MinReclaimedMilliCPU: 100, SafetyMarginMilliCPU: 250, SafetyMarginRatio: 0.1,
		GrowStepMilliCPU: 250, PeakWindow: 30 * time.Second, SpikeThreshold: 0.8,
		ReservedSystemBytes: 1 << 30, MinReclaimedBytes: 256 << 20, SafetyMarginBytes: 512 << 20, GrowStepBytes: 1 << 30})
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		cpus, err := metrics.ReadCPUTimes("/proc")
		if err != nil {
			b.Fatal(err)
		}
		mem, err := metrics.ReadMemory("/proc")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = metrics.ReadPressure("/proc", "memory")
		for j := i % workloadSampleShare; j < len(n.workloads); j += workloadSampleShare {
			w := n.workloads[j]
			_, _ = n.layout.Procs(w.Cgroup, false)
			_, _ = n.layout.CPUUsage(w.Cgroup)
			_, _ = n.layout.MemoryUsage(w.Cgroup)
		}
		s := advisor.Sample{Time: start.Add(time.Duration(i) * time.Second), NUMA: map[int]advisor.NUMASample{},
			MemoryTotalBytes: mem.TotalBytes, MemoryOnlineBytes: mem.TotalBytes - mem.AvailableBytes}
		for _, nn := range n.topo.NUMANodes {
			s.NUMA[nn.ID] = advisor.NUMASample{PoolMilliCPU: int64(nn.CPUs.Size()) * 1000, OnlineMilliCPU: int64(len(cpus)) * 100}
		}
		adv.Step(s)
		n.apply(b, 1200)
	}
}

// BenchmarkPoolResize200 is what resizing the reclaimed pool costs the node, against changing
// only the reclaimed tier's quota: 100 reclaimed workloads with a process each (three of them
// spinning), the lending flipped every 250 ms, while a thread at normal priority (standing in
// for online work) sleeps 1 ms and runs 0.3 ms in a loop. It reports the writer's time per
// flip (apply-ms) and the probe's wake-up lateness (probe-p99-ms); compare the sub-benchmarks
// of one run:
//
//	go test -run '^$' -bench PoolResize200 -benchtime 16x -count 3 ./tests/colocation
func BenchmarkPoolResize200(b *testing.B) {
	n := newBenchNode(b)
	n.apply(b, 1100)
	startReclaimedProcesses(b, n, 3)
	flips := []struct {
		name   string
		lentAt [2]int64
	}{
		{"unchanged", [2]int64{1100, 1100}},
		{"quota", [2]int64{1900, 1100}}, // both within two CPUs: only the quota moves
		{"pool", [2]int64{1100, 900}},   // two CPUs, then one: every reclaimed cpuset moves
	}
	for _, f := range flips {
		b.Run(f.name, func(b *testing.B) {
			probe := startLatencyProbe()
			var applying time.Duration
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				n.apply(b, f.lentAt[i%2])
				applying += time.Since(start)
				time.Sleep(250 * time.Millisecond)
			}
			late := probe.stop()
			b.ReportMetric(ms(applying)/float64(b.N), "apply-ms")
			b.ReportMetric(ms(late[len(late)*99/100]), "probe-p99-ms")
		})
	}
}

// startReclaimedProcesses puts a process in each reclaimed workload's cgroup, spinning in the
// first spinning of them and asleep in the rest; they are killed when the benchmark ends.
func startReclaimedProcesses(b *testing.B, n *benchNode, spinning int) {
	for _, w := range n.workloads {
		if w.Tier != qos.Reclaimed {
			continue
		}
		cmd := exec.Command("sleep", "1000")
		if spinning > 0 {
			cmd, spinning = exec.Command("sh", "-c", "while :; do :; done"), spinning-1
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := n.writer.Attach(w.Cgroup, cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
	}
}

// latencyProbe is a thread that sleeps 1 ms and runs 0.3 ms in a loop, recording how late
// each round ends.
type latencyProbe struct {
	halt atomic.Bool
	done chan []time.Duration
}

func startLatencyProbe() *latencyProbe {
	p := &latencyProbe{done: make(chan []time.Duration, 1)}
	go func() {
		runtime.LockOSThread()
		var late []time.Duration
		for !p.halt.Load() {
			start := time.Now()
			time.Sleep(time.Millisecond)
			woke := time.Now()
			for time.Since(woke) < 300*time.Microsecond {
			}
			late = append(late, time.Since(start)-1300*time.Microsecond)
		}
		slices.Sort(late)
		p.done <- late
	}()
	return p
}

// stop ends the probe and returns its lateness, sorted.
func (p *latencyProbe) stop() []time.Duration {
	p.halt.Store(true)
	return <-p.done
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
