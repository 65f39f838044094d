package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidalqos/tidal/internal/resp"
	"github.com/tidalqos/tidal/qos"
)

// answer hands a probe answers as if its goroutine had got them.
func answer(p *probes, name string, took ...time.Duration) {
	pr := p.running[name]
	for _, d := range took {
		pr.record(answered(d, pr.slo.Latency))
	}
}

func quietProbes(interval time.Duration) *probes {
	return newProbes(interval, slog.New(slog.DiscardHandler))
}

// A probe's answers with nothing lent teach its floor at their load, and how many of them were
// over the target; the floor over the target is news once, and again when it comes back
// under; answers read while something is lent teach nothing.
func TestProbeFloor(t *testing.T) {
	p := quietProbes(time.Hour) // the probes' own goroutines never fire: the test answers
	defer p.stop()
	slo := qos.SLO{Probe: "http://127.0.0.1:1/", Latency: 10 * time.Millisecond}
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	const ms = time.Millisecond

	answer(p, "web", 30*ms, 2*ms, 31*ms)
	if n, over := p.tally("web", 500, false); n != 3 || over != 2 {
		t.Fatalf("tally = %d answers, %d over; want 3, 2", n, over)
	}
	answer(p, "web", 30*ms)
	p.tally("web", 500, false)
	if _, _, ok := p.floor("web", 500); ok {
		t.Fatal("answers read while something was lent made a floor")
	}

	answer(p, "web", 30*ms, 29*ms, 31*ms)
	p.tally("web", 500, true)
	answer(p, "web", 28*ms, 8*ms, 30*ms, 32*ms)
	p.tally("web", 500, true)
	f, changed, ok := p.floor("web", 500)
	if want := (probeFloor{Latency: 30 * ms, OverTarget: 6.0 / 7, Answers: 7}); !ok || f != want || !changed {
		t.Fatalf("floor = %+v changed %v ok %v; want %+v of its own level, news", f, changed, ok, want)
	}
	if _, changed, _ := p.floor("web", 500); changed {
		t.Error("the same floor was news twice")
	}
	if f, changed, _ := p.floor("web", 5000); !f.Borrowed || changed {
		t.Errorf("at another load: borrowed %v changed %v; want borrowed, no news", f.Borrowed, changed)
	}

	// Faster again: once most of the latest answers are under the target, so is the floor;
	// the slow ones still count in its tail.
	for range 10 {
		answer(p, "web", 3*ms)
		p.tally("web", 500, true)
	}
	f, changed, _ = p.floor("web", 500)
	if want := (probeFloor{Latency: 3 * ms, OverTarget: 6.0 / 17, Answers: 17}); f != want || !changed {
		t.Errorf("back under the target: floor %+v changed %v; want %+v, news", f, changed, want)
	}

	// Only the latest floorAnswers count.
	for range floorAnswers {
		answer(p, "web", 4*ms)
	}
	p.tally("web", 500, true)
	if f, _, _ := p.floor("web", 500); f.Answers != floorAnswers || f.OverTarget != 0 || f.Latency != 4*ms {
		t.Errorf("after %d more answers: %+v; want only those, none over", floorAnswers, f)
	}

	// A service that served nothing since lets its recent latencies go, oldest first.
	answer(p, "web", 20*ms, 20*ms, 20*ms, 1*ms, 1*ms)
	if took, _ := p.latency("web"); took != 20*ms {
		t.Errorf("median of 20, 20, 20, 1, 1 ms: %v", took)
	}
	p.running["web"].record(sloSample{})
	p.running["web"].record(sloSample{})
	if took, _ := p.latency("web"); took != 1*ms {
		t.Errorf("after two reads that counted no request: %v; want the median of 20, 1, 1 ms", took)
	}
	p.tally("web", 500, false)

	// A new target keeps the floor (the latency is the workload's) and counts its tail anew;
	// a new URL forgets it.
	slo.Latency = 2 * ms
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	if f, changed, ok := p.floor("web", 500); !ok || f.Latency != 4*ms || f.OverTarget != 1 || !changed {
		t.Errorf("after a new target: floor %+v ok %v changed %v; want 4ms kept, all over, news", f, ok, changed)
	}
	slo.Probe = "http://127.0.0.1:2/"
	p.sync(context.Background(), map[string]qos.SLO{"web": slo})
	if _, _, ok := p.floor("web", 500); ok {
		t.Error("a probe of another URL kept the old one's floor")
	}
}

// A Redis probe keeps its connection between answers, counts an error reply or a dropped
// connection as its timeout, dials again after a drop, and ends at once when stopped
// mid-answer.
func TestRedisProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server answers each connection's commands in turn from replies; "" drops the
	// connection, "hang" never answers.
	replies := make(chan string, 8)
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := resp.ReadReply(br); err != nil { // a command reads as an array
						return
					}
					switch r := <-replies; r {
					case "":
						return
					case "hang":
						io.Copy(io.Discard, br)
						return
					default:
						c.Write([]byte(r))
					}
				}
			}()
		}
	}()

	p := quietProbes(time.Hour)
	defer p.stop()
	slo := qos.SLO{Probe: "redis://" + ln.Addr().String() + "/PING", Latency: time.Millisecond}
	timeout := p.timeout(slo) // the interval's hour: an answer that long is a failure
	ask := p.prober(slo)
	defer ask.close()
	if _, ok := ask.(*redisProber); !ok {
		t.Fatalf("a redis:// probe got a %T", ask)
	}
	ctx := context.Background()
	for i, c := range []struct {
		reply     string
		failed    bool
		newDialed bool
	}{
		{"+PONG\r\n", false, true},
		{"+PONG\r\n", false, false},
		{"-ERR no\r\n", true, false},
		{"+PONG\r\n", false, false}, // an error reply leaves the connection usable
		{"", true, false},
		{"+PONG\r\n", false, true}, // dialled again after the drop
	} {
		replies <- c.reply
		s, err := ask.once(ctx)
		if failed := s.latency == timeout && s.over == 1 && err != nil; failed != c.failed || s.answers != 1 {
			t.Errorf("answer %d (%q): %+v, %v; want one answer, failed %v", i, c.reply, s, err, c.failed)
		}
		select {
		case <-accepted:
			if !c.newDialed {
				t.Errorf("answer %d: a new connection, where the last was kept", i)
			}
		default:
			if c.newDialed {
				t.Errorf("answer %d: no new connection", i)
			}
		}
	}

	// Stopped while the server does not answer: the probe ends now, not at its timeout.
	replies <- "hang"
	stopCtx, stop := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, stop)
	start := time.Now()
	ask.once(stopCtx)
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("a stopped probe waited %v", waited)
	}
}

// A metric prober answers for the requests a service's histogram counted between two reads:
// none on the first read, their quantile and how many were slower than the target after it;
// nothing across a restart of the service's counts; a page or histogram it cannot read is a
// failure that says why.
func TestMetricProber(t *testing.T) {
	var handler http.Handler
	var mu sync.Mutex
	var h prometheus.Histogram
	fresh := func() { // the service's histogram, as a restart leaves it
		reg := prometheus.NewRegistry()
		h = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "req_duration_seconds", Help: "h",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05}})
		reg.MustRegister(h, prometheus.NewSummary(prometheus.SummaryOpts{Name: "req_size_bytes", Help: "s"}))
		handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	fresh()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hh := handler
		mu.Unlock()
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		hh.ServeHTTP(w, r)
	}))
	defer srv.Close()

	p := quietProbes(time.Hour)
	defer p.stop()
	slo := qos.SLO{Probe: srv.URL + "/metrics", Histogram: "req_duration_seconds", Quantile: 0.99, Latency: 10 * time.Millisecond}
	ask := p.prober(slo)
	defer ask.close()
	ctx := context.Background()
	if s, err := ask.once(ctx); err != nil || s.answers != 0 {
		t.Fatalf("first read: %+v, %v; want nothing to judge yet", s, err)
	}
	for range 88 {
		h.Observe(0.002)
	}
	for range 12 {
		h.Observe(0.03)
	}
	s, err := ask.once(ctx)
	// p99: the 99th of 100, the 11th of the 12 within (25, 50] ms.
	if want := 25*time.Millisecond + 25*time.Millisecond*11/12; err != nil || s.answers != 100 || s.over != 12 || (s.latency-want).Abs() > time.Microsecond {
		t.Errorf("after 100 requests: %+v, %v; want 100 answers, 12 over 10ms, p99 %v", s, err, want)
	}
	if s, err := ask.once(ctx); err != nil || s.answers != 0 {
		t.Errorf("no request since: %+v, %v; want nothing to judge", s, err)
	}
	h.Observe(0.2) // past the last bucket: slower than 50 ms, by how much unknown
	if s, _ := ask.once(ctx); s.answers != 1 || s.over != 1 || s.latency != p.timeout(slo) {
		t.Errorf("a request past the last bucket: %+v; want it counted at the timeout %v", s, p.timeout(slo))
	}
	mu.Lock()
	fresh()
	mu.Unlock()
	h.Observe(0.001)
	if s, err := ask.once(ctx); err != nil || s.answers != 0 {
		t.Errorf("after a restart: %+v, %v; want nothing to judge (the counts fell)", s, err)
	}

	for _, c := range []struct {
		slo  qos.SLO
		says string
	}{
		{qos.SLO{Probe: srv.URL + "/nope", Histogram: "req_duration_seconds"}, "404"},
		{qos.SLO{Probe: srv.URL + "/metrics", Histogram: "req_size_bytes"}, "not a histogram"},
		{qos.SLO{Probe: srv.URL + "/metrics", Histogram: `req_duration_seconds{handler="/api"}`}, "no req_duration_seconds_bucket series"},
	} {
		c.slo.Quantile, c.slo.Latency = 0.99, 10*time.Millisecond
		ask := p.prober(c.slo)
		s, err := ask.once(ctx)
		if err == nil || !strings.Contains(err.Error(), c.says) || s.latency != p.timeout(c.slo) || s.over != 1 {
			t.Errorf("%s#%s: %+v, %v; want a failure at the timeout saying %q", c.slo.Probe, c.slo.Histogram, s, err, c.says)
		}
	}
}
