package qos

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSLOAnnotations(t *testing.T) {
	for _, c := range []struct {
		ann     map[string]string
		tier    string
		want    SLO
		problem error
		says    string
	}{
		{ann: map[string]string{AnnotationSLOProbe: "http://127.0.0.1:8080/healthz", AnnotationSLOLatency: "20ms"}, tier: "shared",
			want: SLO{Probe: "http://127.0.0.1:8080/healthz", Latency: 20 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "http://db:5432/", AnnotationSLOLatency: "5ms"}, tier: "dedicated",
			want: SLO{Probe: "http://db:5432/", Latency: 5 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "redis://127.0.0.1:6379/PING", AnnotationSLOLatency: "2ms"}, tier: "shared",
			want: SLO{Probe: "redis://127.0.0.1:6379/PING", Latency: 2 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "https://x/", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "http://"},
		{ann: map[string]string{AnnotationSLOProbe: "redis://127.0.0.1:6379/", AnnotationSLOLatency: "2ms"}, tier: "shared", problem: ErrMalformed, says: "names no command"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "fast"}, tier: "shared", problem: ErrMalformed, says: "duration"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "-1s"}, tier: "shared", problem: ErrMalformed, says: "duration"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "1m"}, tier: "shared", problem: ErrMalformed, says: "10s"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/"}, tier: "shared", problem: ErrIgnored, says: AnnotationSLOLatency},
		{ann: map[string]string{AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrIgnored, says: AnnotationSLOProbe},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "20ms"}, tier: "reclaimed", problem: ErrIgnored, says: "online work"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/metrics#h_seconds", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: AnnotationSLOMetric},
		// A metric: the page, the histogram, its quantile.
		{ann: map[string]string{AnnotationSLOMetric: "http://127.0.0.1:8080/metrics#http_request_duration_seconds", AnnotationSLOLatency: "20ms"}, tier: "shared",
			want: SLO{Probe: "http://127.0.0.1:8080/metrics", Histogram: "http_request_duration_seconds", Quantile: 0.99, Latency: 20 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOMetric: `http://:9090/metrics#rpc_ms{method="Get"}`, AnnotationSLOQuantile: "0.999", AnnotationSLOLatency: "5ms"}, tier: "dedicated",
			want: SLO{Probe: "http://:9090/metrics", Histogram: `rpc_ms{method="Get"}`, Quantile: 0.999, Latency: 5 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOMetric: "http://x/metrics", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "names no histogram"},
		{ann: map[string]string{AnnotationSLOMetric: "http://x/metrics#h_seconds_bucket", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "without _bucket"},
		{ann: map[string]string{AnnotationSLOMetric: "redis://x:6379/PING#h", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "http://"},
		{ann: map[string]string{AnnotationSLOMetric: "http://x/m#h", AnnotationSLOQuantile: "99", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "between 0 and 1"},
		{ann: map[string]string{AnnotationSLOMetric: "http://x/m#h", AnnotationSLOLatency: "20ms"}, tier: "reclaimed", problem: ErrIgnored, says: "online work"},
		{ann: map[string]string{AnnotationSLOMetric: "http://x/m#h"}, tier: "shared", problem: ErrIgnored, says: AnnotationSLOLatency},
		{ann: map[string]string{AnnotationSLOQuantile: "0.9", AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "20ms"}, tier: "shared",
			want: SLO{Probe: "http://x/", Latency: 20 * time.Millisecond}, problem: ErrIgnored, says: "only with one"},
		// Both signals: the probe is kept, the metric reported.
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOMetric: "http://x/m#h", AnnotationSLOLatency: "20ms"}, tier: "shared",
			want: SLO{Probe: "http://x/", Latency: 20 * time.Millisecond}, problem: ErrIgnored, says: "not both"},
	} {
		ann := map[string]string{AnnotationQoSLevel: c.tier}
		for k, v := range c.ann {
			ann[k] = v
		}
		d := Classify(Metadata{Name: "w", Annotations: ann}, Policy{})
		if d.SLO != c.want {
			t.Errorf("%v: SLO %+v, want %+v", c.ann, d.SLO, c.want)
		}
		switch {
		case c.problem == nil && len(d.Problems) > 0:
			t.Errorf("%v: problems %v", c.ann, d.Problems)
		case c.problem != nil && (len(d.Problems) != 1 || !errors.Is(d.Problems[0], c.problem) || !strings.Contains(d.Problems[0].Error(), c.says)):
			t.Errorf("%v: problems %v, want one %v saying %q", c.ann, d.Problems, c.problem, c.says)
		}
	}
}

func TestSLOSignalNamesWhatIsMeasured(t *testing.T) {
	if got := (SLO{Probe: "redis://:6379/PING"}).Signal(); got != "probe redis://:6379/PING" {
		t.Errorf("a probe: %q", got)
	}
	m := SLO{Probe: "http://:8080/metrics", Histogram: `h_seconds{handler="/api"}`, Quantile: 0.999}
	if got := m.Signal(); got != `metric: the p99.9 of h_seconds{handler="/api"} on http://:8080/metrics` {
		t.Errorf("a metric: %q", got)
	}
}
