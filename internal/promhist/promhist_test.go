package promhist

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		seconds  float64
		err      string
	}{
		{in: "http_request_duration_seconds", want: "http_request_duration_seconds", seconds: 1},
		{in: `rpc_latency_ms{method="Get",code="OK"}`, want: `rpc_latency_ms{code="OK",method="Get"}`, seconds: 1e-3},
		{in: `db_query_microseconds{q="a\"b"}`, want: `db_query_microseconds{q="a\"b"}`, seconds: 1e-6},
		{in: "http_request_duration_seconds_bucket", err: "without _bucket"},
		{in: "1abc", err: "not a metric name"},
		{in: "", err: "not a metric name"},
		{in: `x{le="0.1"}`, err: "le label"},
		{in: `x{handler=/api}`, err: "label=\"value\" pairs"},
		{in: `x{handler="/api"`, err: "label=\"value\" pairs"},
	} {
		sel, err := ParseSelector(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSelector(%q) = %v, %v: want an error about %q", tc.in, sel, err, tc.err)
			}
			continue
		}
		if err != nil || sel.String() != tc.want || sel.Seconds != tc.seconds {
			t.Errorf("ParseSelector(%q) = %q (unit %g s), %v: want %q (unit %g s)", tc.in, sel, sel.Seconds, err, tc.want, tc.seconds)
		}
	}
}

// exposition is what client_golang serves for a histogram with two handlers' series (in
// milliseconds), beside a summary and other metrics.
func exposition(t *testing.T, observe func(h *prometheus.HistogramVec)) *bytes.Buffer {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "req_duration_milliseconds", Help: "h",
		Buckets: []float64{1, 2, 5, 10, 50}}, []string{"handler"})
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "req_size_bytes", Help: "s"})
	reg.MustRegister(h, s, collectors.NewGoCollector())
	s.Observe(10)
	observe(h)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

func TestReadSumsTheSelectedSeries(t *testing.T) {
	page := exposition(t, func(h *prometheus.HistogramVec) {
		for _, ms := range []float64{0.5, 1.5, 1.5, 3, 7, 20, 80} {
			h.WithLabelValues("/api").Observe(ms)
		}
		h.WithLabelValues("/healthz").Observe(0.1)
	}).String()

	all, err := Read(strings.NewReader(page), Selector{Name: "req_duration_milliseconds", Seconds: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	want := Buckets{{0.001, 2}, {0.002, 4}, {0.005, 5}, {0.01, 6}, {0.05, 7}, {math.Inf(1), 8}}
	if !equal(all, want) {
		t.Errorf("both handlers: %v, want %v", all, want)
	}
	api, err := Read(strings.NewReader(page), Selector{Name: "req_duration_milliseconds", Labels: map[string]string{"handler": "/api"}, Seconds: 1e-3})
	if err != nil || api.Total() != 7 {
		t.Errorf("/api alone: %v, %v: want 7 observations", api, err)
	}

	for _, tc := range []struct {
		sel Selector
		err string
	}{
		{Selector{Name: "req_size_bytes"}, "is a summary, not a histogram"},
		{Selector{Name: "no_such_seconds"}, "no no_such_seconds_bucket series"},
		{Selector{Name: "req_duration_milliseconds", Labels: map[string]string{"handler": "/nope"}}, "no req_duration_milliseconds_bucket series"},
	} {
		if _, err := Read(strings.NewReader(page), tc.sel); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Read(%s) = %v: want an error about %q", tc.sel, err, tc.err)
		}
	}
	for page, says := range map[string]string{
		"x_bucket{le=\"0.1\"} 1\n":                          "+Inf",
		"x_bucket{le=\"0.1\"} 5\nx_bucket{le=\"+Inf\"} 3\n": "not a cumulative count",
		"x_bucket{le=\"NaN\"} 1\nx_bucket{le=\"+Inf\"} 3\n": "numeric le",
	} {
		if _, err := Read(strings.NewReader(page), Selector{Name: "x", Seconds: 1}); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error about %q", page, err, says)
		}
	}
}

func TestSinceQuantileOver(t *testing.T) {
	before := Buckets{{0.001, 10}, {0.005, 20}, {0.01, 20}, {math.Inf(1), 20}}
	after := Buckets{{0.001, 10}, {0.005, 100}, {0.01, 109}, {math.Inf(1), 110}}
	d, ok := after.Since(before)
	if !ok || d.Total() != 90 {
		t.Fatalf("since: %v, %v", d, ok)
	}
	// 80 in (1, 5] ms, 9 in (5, 10], 1 beyond.
	if q, beyond := d.Quantile(0.5); beyond || math.Abs(q-0.00325) > 1e-9 {
		t.Errorf("p50 %v (beyond %v): want 3.25 ms, the 45th of 80 within (1, 5] ms", q, beyond)
	}
	if q, beyond := d.Quantile(0.95); beyond || math.Abs(q-(0.005+0.005*5.5/9)) > 1e-9 {
		t.Errorf("p95 %v (beyond %v): want 8.06 ms, 5.5 of the 9 within (5, 10] ms", q, beyond)
	}
	if q, beyond := d.Quantile(0.999); !beyond || q != 0.01 {
		t.Errorf("p99.9 %v (beyond %v): want the last finite bound, 10 ms, and beyond", q, beyond)
	}
	for _, tc := range []struct{ seconds, want float64 }{
		{0.005, 10}, {0.0075, 5.5}, {0.003, 50}, {0, 90}, {0.01, 1}, {0.02, 1},
	} {
		if got := d.Over(tc.seconds); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("over %v s: %v, want %v", tc.seconds, got, tc.want)
		}
	}
	if _, ok := before.Since(after); ok {
		t.Error("a count that fell (a restart) is not a difference")
	}
	if _, ok := after.Since(before[1:]); ok {
		t.Error("buckets that do not line up are not a difference")
	}
	if q, _ := (Buckets{{math.Inf(1), 0}}).Quantile(0.99); !math.IsNaN(q) {
		t.Errorf("no observation: %v, want NaN", q)
	}
}

func equal(a, b Buckets) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UpperBound != b[i].UpperBound || a[i].Count != b[i].Count {
			return false
		}
	}
	return true
}

// A workload's page is whatever it serves: Read and what follows it never panic, and buckets
// it returns rise by bound, end at +Inf, and give a quantile within their bounds.
func FuzzRead(f *testing.F) {
	f.Add("# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 2\n", "h", 0.99)
	f.Add("h_bucket{a=\"x\",le=\"1\"} 3\nh_bucket{a=\"y\",le=\"1\"} 1\nh_bucket{a=\"x\",le=\"+Inf\"} 4\n", `h{a="x"}`, 0.5)
	f.Add("# TYPE h summary\nh{quantile=\"0.5\"} 1\n", "h", 0.9)
	f.Add("h_bucket{le=\"NaN\"} 1\nh_bucket{le=\"-1\"} -5\nh_bucket{le=\"+Inf\"} 1e308\n", "h_ms", 0.999)
	f.Fuzz(func(t *testing.T, page, selector string, q float64) {
		sel, err := ParseSelector(selector)
		if err != nil {
			return
		}
		b, err := Read(strings.NewReader(page), sel)
		if err != nil {
			return
		}
		if len(b) == 0 || !math.IsInf(b[len(b)-1].UpperBound, 1) {
			t.Fatalf("buckets %v do not end at +Inf", b)
		}
		for i := 1; i < len(b); i++ {
			if !(b[i-1].UpperBound < b[i].UpperBound) {
				t.Fatalf("bounds do not rise: %v", b)
			}
		}
		d, ok := b.Since(b)
		if !ok || d.Total() != 0 {
			t.Fatalf("a histogram less itself: %v, %v", d, ok)
		}
		if !(q > 0 && q < 1) {
			return
		}
		v, beyond := b.Quantile(q)
		if b.Total() > 0 && !beyond && len(b) >= 2 && (v > b[len(b)-2].UpperBound || v < min(0, b[0].UpperBound)) {
			t.Fatalf("the %v quantile %v lies outside the finite bounds of %v", q, v, b)
		}
		if over := b.Over(v); over < 0 || over > b.Total() {
			t.Fatalf("%v over %v of %v observations", over, v, b.Total())
		}
	})
}
