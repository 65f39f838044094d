package workload

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServerConfig configures RunServer.
type ServerConfig struct {
	// Addr to listen on; default "127.0.0.1:0" (an ephemeral loopback port).
	Addr string
	// WorkPerRequest is the CPU work of a GET /work without a cpu parameter.
	WorkPerRequest time.Duration
	// Report is the reporting interval (default 1s).
	Report time.Duration
	// WorkingSetBytes is the size of the read-only data the work hashes
	// through (default 4 MiB).
	WorkingSetBytes int64
	// CPUClock, when set, makes each request spin until its thread has used
	// the requested CPU time (thread CPU clock) instead of doing a fixed,
	// calibrated amount of work. Then cache interference no longer shows in
	// latency, only CPU contention.
	CPUClock bool
}

// MetricRequestDuration is the server's histogram of its handler's time for GET /work, at
// GET /metrics.
const MetricRequestDuration = "tidal_workload_request_duration_seconds"

// latencyBuckets are its bounds (seconds): fine where the benchmark's targets lie (1-50 ms).
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1}

// maxWork caps the cpu parameter of one request.
const maxWork = 10 * time.Second

// RunServer runs the online HTTP service until ctx is done. GET
// /work?cpu=<duration> does that much CPU work (see the package notes in
// work.go: a fixed number of SHA-256 units over a working set, calibrated
// once per process against the thread CPU clock so that it costs that much
// CPU when the machine is idle) and answers 200 "ok\n"; without cpu it uses
// cfg.WorkPerRequest. GET /healthz answers 200; GET /metrics serves the handler's time as a
// Prometheus histogram (MetricRequestDuration). ready, if not nil, is called
// with the listening address before serving. Reports are ServerLine.
func RunServer(ctx context.Context, cfg ServerConfig, ready func(addr string), out io.Writer) error {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.WorkingSetBytes <= 0 {
		cfg.WorkingSetBytes = 4 << 20
	}
	if cfg.WorkPerRequest < 0 || cfg.WorkPerRequest > maxWork {
		return errors.New("server: WorkPerRequest out of range [0, 10s]")
	}
	every := orDefault(cfg.Report)
	unitCost() // calibrate before listening, not on the first request
	ws := newWorkSet(cfg.WorkingSetBytes)

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	var (
		total, errs atomic.Uint64
		mu          sync.Mutex
		svc         Histogram // handler wall time, this interval
		svcAll      Histogram
	)
	burn := ws.burnUnits
	if cfg.CPUClock {
		burn = ws.burnCPUClock
	}
	// The handler's time, exported as a service exports its latency for Prometheus: what an
	// SLO metric (tidal run --slo-metric) reads.
	reg := prometheus.NewRegistry()
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricRequestDuration,
		Help: "Time GET /work took in its handler.", Buckets: latencyBuckets})
	reg.MustRegister(latency)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		d := cfg.WorkPerRequest
		if v, ok := queryParam(r.URL.RawQuery, "cpu"); ok {
			p, err := time.ParseDuration(v)
			if err != nil || p < 0 || p > maxWork {
				errs.Add(1)
				http.Error(w, "bad cpu parameter (want a duration in [0, 10s])", http.StatusBadRequest)
				return
			}
			d = p
		}
		burn(d)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
		el := time.Since(t0)
		latency.Observe(el.Seconds())
		total.Add(1)
		mu.Lock()
		svc.Record(el)
		mu.Unlock()
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	if ready != nil {
		ready(ln.Addr().String())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	lw := newLineWriter(out)
	start := time.Now()
	var last uint64
	qs := []float64{0.5, 0.99}
	var qv [2]time.Duration
	report := func(now, dt time.Duration) {
		mu.Lock()
		svc.Quantiles(qs, qv[:])
		svcAll.Merge(&svc)
		svc.Reset()
		mu.Unlock()
		n := total.Load()
		lw.write(ServerLine{Kind: KindServer, T: secs(now), Requests: n - last, RPS: rate(n-last, dt),
			Total: n, Errors: errs.Load(), SvcP50Ms: ms(qv[0]), SvcP99Ms: ms(qv[1])})
		last = n
	}
	done := make(chan struct{})
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		tickLoop(done, every, start, report)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	}
	close(done)
	<-tickDone
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	_ = srv.Close()
	if runErr == nil {
		if e := <-serveErr; e != nil && !errors.Is(e, http.ErrServerClosed) {
			runErr = e
		}
	} else if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}

	el := time.Since(start)
	mu.Lock()
	svcAll.Merge(&svc)
	svcAll.Quantiles(qs, qv[:])
	mu.Unlock()
	n := total.Load()
	lw.write(ServerLine{Kind: KindServer, T: secs(el), Requests: n, RPS: rate(n, el), Total: n,
		Errors: errs.Load(), SvcP50Ms: ms(qv[0]), SvcP99Ms: ms(qv[1]), Final: true})
	if runErr != nil {
		return runErr
	}
	return lw.error()
}

// queryParam finds key in a raw query string without allocating a map.
func queryParam(raw, key string) (string, bool) {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k == key {
			return v, true
		}
	}
	return "", false
}
