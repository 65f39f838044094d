package arbiter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// BenchmarkArbiter10k: simulated nodes report on an interval to one arbiter over loopback.
//
//	go test -run '^$' -bench Arbiter10k ./arbiter/...
//	go test -run '^$' -bench Arbiter10k ./arbiter/ -args -arbiter.duration=20s -arbiter.nodes=2000
//
// The arbiter runs in a child process (this test binary, re-executed), so that its CPU time
// (getrusage of that process), heap and RSS are its own and not the load generator's. The run
// first lets every node report once (one interval, not measured), then measures for
// -arbiter.duration. At most -arbiter.workers reports are in flight at once.
var (
	benchNodes    = flag.Int("arbiter.nodes", 10000, "BenchmarkArbiter10k: simulated nodes")
	benchInterval = flag.Duration("arbiter.interval", 10*time.Second, "BenchmarkArbiter10k: report interval of each node")
	benchDuration = flag.Duration("arbiter.duration", 60*time.Second, "BenchmarkArbiter10k: measured time (after one interval of warm-up)")
	benchWorkers  = flag.Int("arbiter.workers", 64, "BenchmarkArbiter10k: reports in flight at most (connections)")
	benchProfile  = flag.String("arbiter.cpuprofile", "", "BenchmarkArbiter10k: write the arbiter's CPU profile to this file")
)

// benchChildEnv, when set to a directory, makes the test binary run an arbiter on the files
// there instead of the tests (see TestMain); benchProfileEnv names its CPU profile.
const (
	benchChildEnv   = "TIDAL_ARBITER_BENCH_CHILD"
	benchProfileEnv = "TIDAL_ARBITER_BENCH_CPUPROFILE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchChildEnv); dir != "" {
		if err := runBenchChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchPolicy has rules that select some, many or all nodes, open and closed windows.
const benchPolicy = `sharedQueue: best-effort
queues:
  - {name: queue-1, weight: 3, guaranteed: {milliCPU: 1000000, memory: 4Ti, gpus: 500}}
  - {name: queue-2, weight: 2}
  - {name: queue-3}
rules:
  - {name: night-gpu, queue: queue-1, nodeSelector: {pool: gpu}, lend: {milliCPU: 8000, memory: 32Gi, gpus: 4}, window: "22:00-08:00", timeZone: Europe/Berlin, maxOnlineUtilization: 0.6}
  - {name: always-gpu, queue: queue-1, nodeSelector: {pool: gpu}, lend: {milliCPU: 4000, memory: 16Gi, gpus: 2}, window: "00:00-24:00", timeZone: UTC}
  - {name: zone-a, queue: queue-2, nodeSelector: {zone: a}, lend: {milliCPU: 4000, memory: 8Gi}, window: "00:00-24:00", timeZone: UTC, maxOnlineUtilization: 0.8}
  - {name: zone-b-day, queue: queue-3, nodeSelector: {zone: b}, lend: {milliCPU: 2000}, window: "08:00-20:00", timeZone: America/New_York}
  - {name: everyone-q2, queue: queue-2, lend: {milliCPU: 1000, memory: 2Gi}, window: "00:00-24:00", timeZone: UTC}
`

// benchUsage is what the child says about itself.
type benchUsage struct {
	CPUSeconds float64 // user + system, getrusage(RUSAGE_SELF)
	HeapInuse  uint64
	HeapAlloc  uint64
	RSS        int64 // VmRSS
	HWM        int64 // VmHWM: peak RSS
	Goroutines int
	NumGC      uint32
	Nodes      int
}

// runBenchChild serves an arbiter on 127.0.0.1, prints "ADDR <api> <usage>" and runs until
// its standard input closes.
func runBenchChild(dir string) error {
	tokens, err := LoadTokenFile(filepath.Join(dir, "tokens.yaml"))
	if err != nil {
		return err
	}
	store, err := NewFileStore(filepath.Join(dir, "state"))
	if err != nil {
		return err
	}
	srv, err := NewServer(Options{
		Policy: NewFilePolicy(filepath.Join(dir, "policy.yaml")),
		Auth:   tokens,
		Store:  store,
	})
	if err != nil {
		return err
	}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	usageLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	usage := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		u := benchUsage{
			CPUSeconds: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(),
			HeapInuse:  ms.HeapInuse, HeapAlloc: ms.HeapAlloc, NumGC: ms.NumGC,
			Goroutines: runtime.NumGoroutine(), Nodes: srv.View().Len(),
		}
		u.RSS, u.HWM = procStatusKiB("VmRSS")<<10, procStatusKiB("VmHWM")<<10
		json.NewEncoder(w).Encode(u)
	})}
	go usage.Serve(usageLn)
	defer usage.Close()

	if path := os.Getenv(benchProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the parent closes our stdin to stop us
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Printf("ADDR %s %s\n", api.Addr(), usageLn.Addr())
	return srv.Serve(ctx, api)
}

func procStatusKiB(key string) int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kib)
			return kib
		}
	}
	return 0
}

// simNode is one simulated node's report, changed a little before each send.
type simNode struct {
	mu     sync.Mutex
	rng    *rand.Rand
	report arbiterapi.Report
	token  string
}

func newSimNode(i int) *simNode {
	name := fmt.Sprintf("sim-%05d", i)
	labels := map[string]string{"zone": string(rune('a' + i%3)), "rack": fmt.Sprintf("r%03d", i/40), "kubernetes.io/hostname": name}
	gpus := 0
	if i%4 == 0 {
		labels["pool"] = "gpu"
		gpus = 8
	} else {
		labels["pool"] = "cpu"
	}
	if i%10 == 0 {
		labels[DefaultOwnerLabel] = "queue-2"
	}
	var uuids []string
	for g := range gpus {
		uuids = append(uuids, fmt.Sprintf("GPU-%08x-%04x-%04x", i, g, i^g))
	}
	r := arbiterapi.Report{
		Node:     name,
		Labels:   labels,
		Capacity: arbiterapi.Resources{MilliCPU: 64000, MemoryBytes: 256 * gi, GPUs: gpus},
		Lendable: arbiterapi.Lendable{GPUs: gpus, GPUUUIDs: uuids},
	}
	for n := range 2 {
		half := uuids[n*gpus/2 : (n+1)*gpus/2]
		r.NUMA = append(r.NUMA, arbiterapi.NUMANode{ID: n, Capacity: arbiterapi.Resources{MilliCPU: 32000, MemoryBytes: 128 * gi, GPUs: gpus / 2},
			Lendable: arbiterapi.Lendable{GPUs: len(half), GPUUUIDs: half}})
	}
	return &simNode{rng: rand.New(rand.NewPCG(uint64(i), 7)), report: r, token: tokenOf(name)}
}

// body returns the node's next report as JSON: online use wanders, lendable follows.
func (n *simNode) body() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := &n.report
	util := 0.2 + 0.6*n.rng.Float64()
	used := int64(util * 64000)
	r.Time = time.Now()
	r.Online = arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: used, MemoryBytes: 64 * gi}, Predicted: arbiterapi.Usage{MilliCPU: min(used+8000, 64000), MemoryBytes: 96 * gi}, Utilization: util}
	r.Lendable.MilliCPU = 64000 - r.Online.Predicted.MilliCPU
	r.Lendable.MemoryBytes = 256*gi - r.Online.Predicted.MemoryBytes
	for i := range r.NUMA {
		r.NUMA[i].Online = arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: used / 2, MemoryBytes: 32 * gi}, Predicted: arbiterapi.Usage{MilliCPU: r.Online.Predicted.MilliCPU / 2, MemoryBytes: 48 * gi}, Utilization: util}
		r.NUMA[i].Lendable.MilliCPU = r.Lendable.MilliCPU / 2
		r.NUMA[i].Lendable.MemoryBytes = r.Lendable.MemoryBytes / 2
	}
	data, _ := json.Marshal(r)
	return data
}

func BenchmarkArbiter10k(b *testing.B) {
	nodes, interval, duration, workers := *benchNodes, *benchInterval, *benchDuration, *benchWorkers
	dir := b.TempDir()
	var tokens bytes.Buffer
	sims := make([]*simNode, nodes)
	for i := range sims {
		sims[i] = newSimNode(i)
		fmt.Fprintf(&tokens, "%s: %s\n", sims[i].report.Node, sims[i].token)
	}
	must(b, os.WriteFile(filepath.Join(dir, "tokens.yaml"), tokens.Bytes(), 0o600))
	must(b, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(benchPolicy), 0o600))

	// The arbiter, in a child process.
	self, err := os.Executable()
	must(b, err)
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), benchChildEnv+"="+dir)
	if *benchProfile != "" {
		abs, err := filepath.Abs(*benchProfile)
		must(b, err)
		child.Env = append(child.Env, benchProfileEnv+"="+abs)
	}
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	must(b, err)
	stdout, err := child.StdoutPipe()
	must(b, err)
	must(b, child.Start())
	stopped := false
	stopChild := func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("arbiter: %v", err)
			}
		case <-time.After(30 * time.Second):
			child.Process.Kill()
			<-done
			b.Error("arbiter did not stop within 30 s: killed")
		}
	}
	defer stopChild()
	var apiAddr, usageAddr string
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscanf(line, "ADDR %s %s", &apiAddr, &usageAddr); err != nil || serr != nil {
		b.Fatalf("arbiter did not start: %q %v", line, err)
	}

	transport := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	usage := func() benchUsage {
		resp, err := hc.Get("http://" + usageAddr)
		must(b, err)
		defer resp.Body.Close()
		var u benchUsage
		must(b, json.NewDecoder(resp.Body).Decode(&u))
		return u
	}

	// Pace: node i reports at i*interval/nodes, then every interval. Workers take the reports
	// in order; when all are busy the pacer waits (and the lag shows).
	type job struct {
		node    int
		due     time.Time
		measure bool
	}
	start := time.Now()
	measureFrom := start.Add(interval)
	end := measureFrom.Add(duration)
	jobs := make(chan job, workers)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()

	var mu sync.Mutex
	var latencies []time.Duration
	var lags []time.Duration
	var failures []string
	var wg sync.WaitGroup
	var closeOnce sync.Once
	closeJobs := func() { closeOnce.Do(func() { close(jobs) }) }
	defer func() { closeJobs(); wg.Wait() }() // stops the workers even if the run fails early
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				sim := sims[j.node]
				req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/reports", bytes.NewReader(sim.body()))
				req.Header.Set("Authorization", "Bearer "+sim.token)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := hc.Do(req)
				var status int
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				took := time.Since(t0)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case status != http.StatusOK:
					failures = append(failures, fmt.Sprintf("%s: status %d", sim.report.Node, status))
				case j.measure:
					latencies = append(latencies, took)
					lags = append(lags, t0.Sub(j.due))
				}
				mu.Unlock()
			}
		})
	}
	scrapeDone := make(chan struct{})
	go func() { // Prometheus scrapes every 15 s, as a real deployment would
		defer close(scrapeDone)
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if resp, err := hc.Get("http://" + apiAddr + "/metrics"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()

	// The arbiter's own report-duration histogram, read at both ends of the measured time,
	// tells its share of the latency from the machine's (client, scheduler).
	buckets := func() map[float64]float64 {
		resp, err := hc.Get("http://" + apiAddr + "/metrics")
		must(b, err)
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		out := map[float64]float64{}
		for _, line := range strings.Split(string(data), "\n") {
			var le, n float64
			rest, ok := strings.CutPrefix(line, `tidal_arbiter_report_duration_seconds_bucket{le="`)
			if !ok {
				continue
			}
			if strings.HasPrefix(rest, "+Inf") {
				le = math.Inf(1)
				fmt.Sscanf(rest[strings.Index(rest, "}")+1:], "%g", &n)
			} else {
				fmt.Sscanf(strings.Replace(rest, `"}`, " ", 1), "%g %g", &le, &n)
			}
			out[le] = n
		}
		return out
	}
	var before benchUsage
	var beforeAt time.Time
	var bucketsBefore map[float64]float64
	step := interval / time.Duration(nodes)
	tick := time.NewTicker(5 * time.Millisecond)
	next := 0 // the next report to send, counting from the start
pace:
	for {
		select {
		case <-ctx.Done():
			break pace
		case now := <-tick.C:
			if beforeAt.IsZero() && !now.Before(measureFrom) {
				before, beforeAt, bucketsBefore = usage(), time.Now(), buckets()
			}
			for {
				due := start.Add(time.Duration(next) * step)
				if due.After(now) {
					break
				}
				select {
				case jobs <- job{node: next % nodes, due: due, measure: !due.Before(measureFrom)}:
				case <-ctx.Done():
					break pace
				}
				next++
			}
		}
	}
	tick.Stop()
	closeJobs()
	wg.Wait()
	after, afterAt := usage(), time.Now()
	bucketsAfter := buckets()
	<-scrapeDone
	stopChild()

	if len(failures) > 0 {
		b.Errorf("%d failed reports, first: %s", len(failures), failures[0])
	}
	if len(latencies) == 0 {
		b.Fatal("no report measured")
	}
	slices.Sort(latencies)
	slices.Sort(lags)
	pct := func(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	wall := afterAt.Sub(beforeAt).Seconds()
	cores := (after.CPUSeconds - before.CPUSeconds) / wall
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	serverP50, serverP99 := histogramQuantile(0.5, bucketsBefore, bucketsAfter), histogramQuantile(0.99, bucketsBefore, bucketsAfter)
	b.ReportMetric(ms(pct(latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(pct(latencies, 0.99)), "p99-ms")
	b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
	b.ReportMetric(serverP99*1000, "server-p99-ms")
	b.ReportMetric(float64(len(latencies))/duration.Seconds(), "reports/s")
	b.ReportMetric(cores, "arbiter-cores")
	b.ReportMetric(float64(after.HWM)/(1<<20), "arbiter-peak-rss-MiB")
	b.ReportMetric(float64(after.HeapInuse)/(1<<20), "arbiter-heap-MiB")
	b.Logf("%d nodes every %v for %v (+%v warm-up), %d workers: %d reports measured, %d failed; latency seen by the agents p50 %v p99 %v p99.9 %v max %v; in the arbiter (histogram) p50 %.2fms p99 %.2fms; send lag p99 %v; arbiter CPU %.3f cores (%.1f s over %.1f s), RSS %.0f MiB (peak %.0f MiB), heap in use %.0f MiB, %d GCs, %d goroutines, %d nodes in view",
		nodes, interval, duration, interval, workers, len(latencies), len(failures),
		pct(latencies, 0.50), pct(latencies, 0.99), pct(latencies, 0.999), latencies[len(latencies)-1], serverP50*1000, serverP99*1000, pct(lags, 0.99),
		cores, after.CPUSeconds-before.CPUSeconds, wall, float64(after.RSS)/(1<<20), float64(after.HWM)/(1<<20),
		float64(after.HeapInuse)/(1<<20), after.NumGC-before.NumGC, after.Goroutines, after.Nodes)
	if after.Nodes != nodes {
		b.Errorf("%d nodes in the view, want %d", after.Nodes, nodes)
	}
}

// histogramQuantile estimates the q-quantile of what a Prometheus histogram observed between two
// readings (upper bound -> cumulative count), interpolating within the bucket as Prometheus'
// histogram_quantile does.
func histogramQuantile(q float64, before, after map[float64]float64) float64 {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return math.NaN()
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, le := range bounds {
		count := after[le] - before[le]
		if count >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			if count == prevCount {
				return le
			}
			return prevBound + (le-prevBound)*(rank-prevCount)/(count-prevCount)
		}
		prevBound, prevCount = le, count
	}
	return prevBound
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
