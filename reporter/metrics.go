package reporter

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidalqos/tidal/plugins"
)

// Metrics are the agent's Prometheus metrics, on a registry of their own (no global state).
type Metrics struct {
	registry     *prometheus.Registry
	poolCPUs     *prometheus.GaugeVec
	lentCPU      *prometheus.GaugeVec
	lendableCPU  prometheus.Gauge
	lendableMem  prometheus.Gauge
	lendableGPUs prometheus.Gauge
	gpuLendable  *prometheus.GaugeVec
	workloads    *prometheus.GaugeVec
	actions      *prometheus.CounterVec
	evictions    *prometheus.CounterVec
	loopDuration *prometheus.HistogramVec
	metricsFresh prometheus.Gauge
	hookCalls    *prometheus.CounterVec
	hookDuration *prometheus.HistogramVec
	// The interference feedback, per NUMA node.
	usageCeiling    *prometheus.GaugeVec
	interferenceCap *prometheus.GaugeVec
	indicatorLoad   *prometheus.GaugeVec
	mechanism       *prometheus.GaugeVec

	// CPU burst and starvation eviction (issue 12).
	cpuBurst   *prometheus.GaugeVec
	cpuStarved prometheus.Gauge
	// fastCrossings counts the fast path's wake-ups (its cuts are tidal_actions_total's
	// throttle/online-spike).
	fastCrossings prometheus.Counter

	memory *memoryMetrics
	io     *ioMetrics
}

// WriteCounts are the cgroup write path's counters by knob: writes, failed writes, and
// repairs (writes that put back a value tidal had written and someone else changed).
type WriteCounts struct {
	Writes, Errors, Repairs map[string]uint64
}

// WriteCounter reads the write path's counters at scrape time.
type WriteCounter func() WriteCounts

// NewMetrics registers the metrics. writes is read at scrape time.
func NewMetrics(writes WriteCounter) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		poolCPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_pool_cpus", Help: "CPUs in each pool, per NUMA node and tier.",
		}, []string{"numa_node", "tier"}),
		lentCPU: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_reclaimed_lent_millicpu", Help: "CPU lent to reclaimed work per NUMA node, in millicores.",
		}, []string{"numa_node"}),
		lendableCPU: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_lendable_millicpu", Help: "CPU the node publishes as lendable to reclaimed work (Node resources, the arbiter; at most its pool less online peak usage over cpu.peakWindow with margins), in millicores (0 when the agent cannot vouch for it).",
		}),
		lendableMem: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_lendable_memory_bytes", Help: "Memory the node lends to reclaimed work (0 when the agent cannot vouch for it).",
		}),
		lendableGPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_lendable_gpus", Help: "Whole GPUs the node lends to reclaimed work (tidalqos.io/reclaimed-gpu).",
		}),
		gpuLendable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_gpu_lendable", Help: "1 when a GPU is lendable, else 0.",
		}, []string{"uuid", "index", "numa_node"}),
		workloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_workloads", Help: "Managed workloads by tier.",
		}, []string{"tier"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_actions_total", Help: "Actions taken, by kind (grow, shrink, throttle, evict, ...) and reason.",
		}, []string{"kind", "reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_evictions_total", Help: "Reclaimed workloads evicted, by reason.",
		}, []string{"reason"}),
		loopDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidal_loop_duration_seconds", Help: "Duration of one pass of a control loop.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"loop"}),
		metricsFresh: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidal_metrics_fresh", Help: "1 when the agent's node metrics are fresh, else 0 (lending at its minimum).",
		}),
		hookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_hook_calls_total", Help: "Runtime hook calls (cri, nri) by method and result: adjusted, unchanged or fail-open (forwarded unchanged; the reconcile loop repairs it).",
		}, []string{"hook", "method", "result"}),
		hookDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidal_hook_decision_seconds", Help: "Time a runtime hook spent deciding, before forwarding.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}, []string{"hook", "method"}),
		usageCeiling: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_usage_ceiling_millicpu", Help: "Most a NUMA node's reclaimed limits may allow by online usage: its pool less the predicted online demand (peak over cpu.limitWindow with margins), in millicores.",
		}, []string{"numa_node"}),
		interferenceCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_interference_cap_millicpu", Help: "Most a NUMA node may lend by the interference feedback, in millicores.",
		}, []string{"numa_node"}),
		indicatorLoad: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_interference_indicator_ratio", Help: "The worst online workload's interference indicator on a NUMA node as a fraction of its target (above 1: lending is cut).",
		}, []string{"numa_node", "indicator"}),
		mechanism: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidal_cpu_mechanism", Help: "1 for the mechanism that holds a NUMA node's reclaimed work to what is lent now (cpu.mechanism, or the candidate cpu.mechanism auto runs), 0 for the others.",
		}, []string{"numa_node", "mechanism"}),
	}
	m.cpuBurst = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tidal_cpu_burst_workloads", Help: "Online workloads given a CPU burst above their CPU limit (cpu.cfs_burst_us, cpu.max.burst), by tier.",
	}, []string{"tier"})
	m.cpuStarved = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tidal_cpu_starved_workloads", Help: "Reclaimed workloads whose CPU satisfaction is below eviction.starvationFloor now (evicted once it lasts eviction.starvationWindow; counted in tidal_evictions_total{reason=\"cpu-starved\"}).",
	})
	m.fastCrossings = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tidal_fast_path_crossings_total", Help: "Times online work's CPU use crossed the fast path's limits and woke the agent; those that cut lending are tidal_actions_total{kind=\"throttle\",reason=\"online-spike\"}.",
	})
	m.registry.MustRegister(m.cpuBurst, m.cpuStarved, m.fastCrossings)
	m.memory = newMemoryMetrics(m.registry)
	m.io = newIOMetrics(m.registry)
	m.registry.MustRegister(m.usageCeiling, m.interferenceCap, m.indicatorLoad, m.mechanism, m.poolCPUs, m.lentCPU, m.lendableCPU, m.lendableMem, m.lendableGPUs, m.gpuLendable, m.workloads, m.actions,
		m.evictions, m.loopDuration, m.metricsFresh, m.hookCalls, m.hookDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		writeCollector{writes})
	return m
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// SetPool records one NUMA node's pool sizes and lent CPU.
func (m *Metrics) SetPool(node int, sizes map[string]int, lentMilli int64) {
	n := strconv.Itoa(node)
	for tier, size := range sizes {
		m.poolCPUs.WithLabelValues(n, tier).Set(float64(size))
	}
	m.lentCPU.WithLabelValues(n).Set(float64(lentMilli))
}

// SetLendable records what the node lends.
func (m *Metrics) SetLendable(l Lendable) {
	m.lendableCPU.Set(float64(l.MilliCPU))
	m.lendableMem.Set(float64(l.MemoryBytes))
	m.lendableGPUs.Set(float64(l.GPUs))
}

// SetGPUs records each GPU's lending state.
func (m *Metrics) SetGPUs(gpus []GPU) {
	for _, g := range gpus {
		v := 0.0
		if g.Lendable {
			v = 1
		}
		m.gpuLendable.WithLabelValues(g.UUID, strconv.Itoa(g.Index), strconv.Itoa(g.NUMANode)).Set(v)
	}
}

// SetWorkloads records the number of workloads per tier.
func (m *Metrics) SetWorkloads(byTier map[string]int) {
	for tier, n := range byTier {
		m.workloads.WithLabelValues(tier).Set(float64(n))
	}
}

// Action counts an action. reason is a short, bounded label ("online-spike", "metrics-stale").
func (m *Metrics) Action(kind, reason string) {
	m.actions.WithLabelValues(kind, reason).Inc()
	if kind == "evict" {
		m.evictions.WithLabelValues(reason).Inc()
	}
}

// ObserveLoop records how long a loop pass took.
func (m *Metrics) ObserveLoop(loop string, d time.Duration) {
	m.loopDuration.WithLabelValues(loop).Observe(d.Seconds())
}

// LoopObserver is ObserveLoop for one loop, without the label lookup on every call (the fast
// path runs a hundred times a second).
func (m *Metrics) LoopObserver(loop string) func(time.Duration) {
	o := m.loopDuration.WithLabelValues(loop)
	return func(d time.Duration) { o.Observe(d.Seconds()) }
}

// HookCall counts one runtime hook call and how long its decision took.
func (m *Metrics) HookCall(hook, method, result string, d time.Duration) {
	m.hookCalls.WithLabelValues(hook, method, result).Inc()
	m.hookDuration.WithLabelValues(hook, method).Observe(d.Seconds())
}

// SetCPUBurst records how many workloads of each tier have a CPU burst.
func (m *Metrics) SetCPUBurst(byTier map[string]int) {
	for tier, v := range byTier {
		m.cpuBurst.WithLabelValues(tier).Set(float64(v))
	}
}

// SetCPUStarved records how many reclaimed workloads are starved of CPU now.
func (m *Metrics) SetCPUStarved(n int) { m.cpuStarved.Set(float64(n)) }

// FastCrossing counts one wake-up of the fast path.
func (m *Metrics) FastCrossing() { m.fastCrossings.Inc() }

// SetMetricsFresh records whether node metrics are fresh.
func (m *Metrics) SetMetricsFresh(fresh bool) {
	v := 0.0
	if fresh {
		v = 1
	}
	m.metricsFresh.Set(v)
}

// writeCollector exposes the isolation writer's counters at scrape time.
type writeCollector struct{ read WriteCounter }

var (
	writesDesc  = prometheus.NewDesc("tidal_cgroup_writes_total", "cgroup file writes, by knob.", []string{"knob"}, nil)
	errorsDesc  = prometheus.NewDesc("tidal_cgroup_write_errors_total", "Failed cgroup file writes, by knob.", []string{"knob"}, nil)
	repairsDesc = prometheus.NewDesc("tidal_cgroup_repairs_total",
		"Drift repaired by the reconcile pass: a value tidal had written, changed by someone else (the kubelet, a runtime), written back; by knob.", []string{"knob"}, nil)
)

func (c writeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- writesDesc
	ch <- errorsDesc
	ch <- repairsDesc
}

func (c writeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.read()
	for _, m := range []struct {
		desc   *prometheus.Desc
		values map[string]uint64
	}{{writesDesc, counts.Writes}, {errorsDesc, counts.Errors}, {repairsDesc, counts.Repairs}} {
		for k, v := range m.values {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(v), k)
		}
	}
}

// SetControl records how a NUMA node's lending is sized: its usage ceiling, its interference
// cap and, per indicator, the worst online workload's figure as a fraction of its target.
func (m *Metrics) SetControl(node int, c Control) {
	n := strconv.Itoa(node)
	m.usageCeiling.WithLabelValues(n).Set(float64(c.UsageCeilingMilliCPU))
	m.interferenceCap.WithLabelValues(n).Set(float64(c.InterferenceCapMilliCPU))
	worst := map[string]float64{}
	for _, i := range c.Indicators {
		if i.Target > 0 {
			worst[i.Name] = max(worst[i.Name], i.Value/i.Target)
		}
	}
	for _, name := range []string{"run-queue wait", "throttled", "probe latency"} {
		m.indicatorLoad.WithLabelValues(n, name).Set(worst[name])
	}
	for _, mech := range plugins.CPUMechanisms() {
		v := 0.0
		if string(mech) == c.Mechanism {
			v = 1
		}
		m.mechanism.WithLabelValues(n, string(mech)).Set(v)
	}
}
