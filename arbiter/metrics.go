package arbiter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// Report results, the values of the result label of tidal_arbiter_reports_total.
const (
	resultAccepted        = "accepted"
	resultInvalid         = "invalid"          // 400
	resultUnauthenticated = "unauthenticated"  // 401
	resultForbidden       = "forbidden"        // 403: the credentials are another node's
	resultTooLarge        = "too_large"        // 413
	resultBadMediaType    = "bad_media_type"   // 415
	resultNotLeader       = "not_leader"       // 503: a follower under leader election
	resultAuthUnavailable = "auth_unavailable" // 503: the credentials could not be checked
)

// metrics are the arbiter's Prometheus metrics, on a registry of their own.
type metrics struct {
	registry   *prometheus.Registry
	reports    *prometheus.CounterVec
	reportTime prometheus.Histogram
	reloads    *prometheus.CounterVec
	saves      *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_arbiter_reports_total",
			Help: "Node reports received, by result (accepted, invalid, unauthenticated, forbidden, too_large, bad_media_type, not_leader, auth_unavailable).",
		}, []string{"result"}),
		reportTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidal_arbiter_report_duration_seconds",
			Help:    "Time to handle one report, from the request's arrival to the lease written back.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16), // 25us .. 0.8s
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_arbiter_policy_reloads_total",
			Help: "Policy loads after the first, by result (success, failure: the old policy stays).",
		}, []string{"result"}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_arbiter_state_saves_total",
			Help: "Saves of the state file, by result (success, failure).",
		}, []string{"result"}),
	}
	for _, r := range []string{resultAccepted, resultInvalid, resultUnauthenticated, resultForbidden, resultTooLarge, resultBadMediaType, resultNotLeader, resultAuthUnavailable} {
		m.reports.WithLabelValues(r)
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
		m.saves.WithLabelValues(r)
	}
	m.registry.MustRegister(m.reports, m.reportTime, m.reloads, m.saves,
		&viewCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tidal_arbiter_leader",
			Help: "1 on the replica that decides (always, standalone), 0 on followers.",
		}, func() float64 {
			if s.leading() {
				return 1
			}
			return 0
		}))
	m.registry.MustRegister(s.opts.Collectors...)
	return m
}

// viewCollector reads the cluster view at scrape time, so expired leases drop out at once.
type viewCollector struct{ s *Server }

var (
	nodesDesc = prometheus.NewDesc("tidal_arbiter_nodes",
		"Nodes in the cluster view, by lease state (active; expired: silent for longer than the lease TTL).",
		[]string{"lease"}, nil)
	lentDesc = prometheus.NewDesc("tidal_arbiter_queue_lent",
		"Capacity lent to each queue now, by resource (millicpu, memory_bytes, gpus).",
		[]string{"queue", "resource"}, nil)
	guaranteedDesc = prometheus.NewDesc("tidal_arbiter_queue_guaranteed",
		"Capacity guaranteed to each queue by the policy, by resource (millicpu, memory_bytes, gpus).",
		[]string{"queue", "resource"}, nil)
	rulesDesc = prometheus.NewDesc("tidal_arbiter_policy_rules",
		"Lending rules in the policy in force, by window state (open, closed).",
		[]string{"window"}, nil)
	policyTimeDesc = prometheus.NewDesc("tidal_arbiter_policy_accepted_timestamp_seconds",
		"When the policy in force was accepted (Unix time).", nil, nil)
)

func (c *viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodesDesc, lentDesc, guaranteedDesc, rulesDesc, policyTimeDesc} {
		ch <- d
	}
}

func (c *viewCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.now()
	ps := c.s.policy.Load()
	sum := c.s.view.Summarize(now)
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(sum.Nodes-sum.ExpiredNodes), "active")
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(sum.ExpiredNodes), "expired")

	resources := func(desc *prometheus.Desc, queue string, r arbiterapi.Resources) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(r.MilliCPU), queue, "millicpu")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(r.MemoryBytes), queue, "memory_bytes")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(r.GPUs), queue, "gpus")
	}
	seen := map[string]bool{}
	for _, q := range append([]string{ps.SharedQueue}, queueNameList(ps.Policy)...) {
		seen[q] = true
		resources(lentDesc, q, sum.Lent[q])
	}
	for q, r := range sum.Lent { // queues no longer in the policy that still hold grants
		if !seen[q] {
			resources(lentDesc, q, r)
		}
	}
	for _, q := range ps.Queues {
		resources(guaranteedDesc, q.Name, q.Guaranteed)
	}
	open := 0
	for _, r := range ps.Rules {
		if r.Window.Contains(now) {
			open++
		}
	}
	ch <- prometheus.MustNewConstMetric(rulesDesc, prometheus.GaugeValue, float64(open), "open")
	ch <- prometheus.MustNewConstMetric(rulesDesc, prometheus.GaugeValue, float64(len(ps.Rules)-open), "closed")
	ch <- prometheus.MustNewConstMetric(policyTimeDesc, prometheus.GaugeValue, float64(ps.accepted.UnixNano())/float64(time.Second))
}

func queueNameList(p *Policy) []string {
	out := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		out[i] = q.Name
	}
	return out
}
