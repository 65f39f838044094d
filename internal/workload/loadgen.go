package workload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LoadGenConfig configures RunLoadGen.
type LoadGenConfig struct {
	// URL to GET (e.g. "http://127.0.0.1:8080/work?cpu=1.5ms"), or a Redis command to send,
	// its arguments as the path's segments (e.g. "redis://127.0.0.1:6379/SINTER/a/b").
	URL string
	// Gzip asks for compressed responses (Accept-Encoding: gzip), as browsers do: a real web
	// server then compresses each response, which is its CPU work per request.
	Gzip bool
	// Phases is the schedule (see ParsePhases); at least one.
	Phases []Phase
	// Connections is the number of persistent connections, each served by
	// one worker goroutine; 0 picks DefaultConnections of the peak rate.
	Connections int
	// Report is the reporting interval (default 1s).
	Report time.Duration
	// Timeout bounds one request from its actual send (default 10s); a
	// request that times out is an error and its connection is redialed.
	Timeout time.Duration
	// Drain bounds how long, after the schedule ends, queued and in-flight
	// requests may still complete (default Timeout); those left then count
	// as errors.
	Drain time.Duration
}

// Summary is the whole-run result of RunLoadGen. Latencies are measured from
// each request's intended send time and cover successful (2xx) responses.
type Summary struct {
	Duration time.Duration // from the first scheduled send to the end of the run
	Sent     uint64        // requests whose intended send time was reached
	Count    uint64        // successful responses
	Errors   uint64        // failed requests (transport, timeout, non-2xx, left after drain)
	P50      time.Duration
	P99      time.Duration
	P999     time.Duration
	Max      time.Duration
	Mean     time.Duration
	// P99Series and RPSSeries hold one value per reporting interval.
	P99Series []time.Duration
	RPSSeries []float64
	Phases    []PhaseStats
	Hist      *Histogram
}

// DefaultConnections is the connection pool used for a peak rate: one
// connection per 10 requests/s (so a connection is only reused after 100ms
// at that rate), at least 8 and at most 1024.
func DefaultConnections(peakRPS float64) int {
	n := int(math.Ceil(peakRPS / 10))
	return min(max(n, 8), 1024)
}

const queueCap = 1 << 16

type job struct {
	off   time.Duration // intended send time, since start
	phase int
}

type phaseRec struct {
	hist   Histogram
	errors uint64
}

type recorder struct {
	mu    sync.Mutex
	iv    Histogram
	ivErr uint64
	all   Histogram
	err   uint64
	ph    []phaseRec
}

func (r *recorder) record(phase int, lat time.Duration, ok bool) {
	r.mu.Lock()
	if ok {
		r.iv.Record(lat)
		r.all.Record(lat)
		r.ph[phase].hist.Record(lat)
	} else {
		r.ivErr++
		r.err++
		r.ph[phase].errors++
	}
	r.mu.Unlock()
}

type lgWorker struct {
	tgt     *target
	timeout time.Duration
	dialer  net.Dialer

	mu      sync.Mutex // guards stopped and writes of c
	stopped bool
	c       net.Conn
	br      *bufio.Reader

	abortedJob job
	aborted    bool
}

var errStopped = errors.New("stopped")

func (w *lgWorker) dial(ctx context.Context) error {
	c, err := w.dialer.DialContext(ctx, "tcp", w.tgt.hostport)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		c.Close()
		return errStopped
	}
	w.c = c
	w.br.Reset(c)
	return nil
}

func (w *lgWorker) drop() {
	w.mu.Lock()
	if w.c != nil {
		w.c.Close()
		w.c = nil
	}
	w.mu.Unlock()
}

func (w *lgWorker) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.c != nil {
		_ = w.c.SetDeadline(time.Unix(1, 0))
	}
	w.mu.Unlock()
}

// do sends one request on the worker's connection, dialing if needed, and
// reports whether it succeeded (a 2xx, or a Redis reply that is no error). It does not allocate once the
// connection is up.
func (w *lgWorker) do(ctx context.Context) (bool, error) {
	if w.c == nil {
		if err := w.dial(ctx); err != nil {
			return false, err
		}
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false, errStopped
	}
	err := w.c.SetDeadline(time.Now().Add(w.timeout))
	w.mu.Unlock()
	if err != nil {
		w.drop()
		return false, err
	}
	ok, keep, err := w.tgt.exchange(w.c, w.br, w.tgt.request)
	if err != nil || !keep {
		w.drop()
	}
	if err != nil {
		return false, err
	}
	if !ok {
		return false, errStatus
	}
	return true, nil
}

func (w *lgWorker) run(ctx context.Context, queue <-chan job, start time.Time, rec *recorder) {
	for {
		var j job
		select {
		case <-ctx.Done():
			return
		case jj, ok := <-queue:
			if !ok {
				return
			}
			j = jj
		}
		ok, err := w.do(ctx)
		if err != nil && ctx.Err() != nil {
			w.aborted, w.abortedJob = true, j
			return
		}
		rec.record(j.phase, time.Since(start)-j.off, ok)
	}
}

// RunLoadGen drives cfg.URL open-loop: request i of the schedule has an
// intended send time fixed by the phases alone, a scheduler hands it to the
// pool at that time (sleeping on a timerfd, tens of microseconds precise, not
// a Go timer's ~1ms), and its latency runs from that intended time to the end
// of its response, so time spent queued because every connection was busy,
// or because the generator fell behind, counts (no coordinated omission).
// Requests are never dropped while the schedule runs. Each connection is
// persistent and served by one worker; the request bytes are built once and
// responses are parsed in place, so the hot path does not allocate.
//
// It writes a LoadGenLine per interval and a final one, and returns when the
// schedule is over and drained, or early when ctx is done (then requests
// still queued or in flight are not counted).
func RunLoadGen(ctx context.Context, cfg LoadGenConfig, out io.Writer) (Summary, error) {
	if len(cfg.Phases) == 0 {
		return Summary{}, errors.New("loadgen: no phases")
	}
	peak := 0.0
	for i, p := range cfg.Phases {
		if p.Duration <= 0 || p.RPS < 0 || p.EndRPS < 0 || math.IsNaN(p.RPS) || math.IsNaN(p.EndRPS) ||
			math.IsInf(p.RPS, 0) || math.IsInf(p.EndRPS, 0) {
			return Summary{}, fmt.Errorf("loadgen: phase %d (%q): bad duration or rate", i+1, p.Name)
		}
		peak = max(peak, p.RPS, p.EndRPS)
	}
	tgt, err := parseTarget(cfg.URL, cfg.Gzip)
	if err != nil {
		return Summary{}, err
	}
	nconn := cfg.Connections
	if nconn <= 0 {
		nconn = DefaultConnections(peak)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	drain := cfg.Drain
	if drain <= 0 {
		drain = timeout
	}
	every := orDefault(cfg.Report)

	wctx, stopCtx := context.WithCancel(ctx)
	defer stopCtx()
	workers := make([]*lgWorker, nconn)
	var dials sync.WaitGroup
	for i := range workers {
		w := &lgWorker{tgt: tgt, timeout: timeout, br: bufio.NewReaderSize(nil, 16<<10)}
		w.dialer.Timeout = timeout
		workers[i] = w
		dials.Add(1)
		go func() { // warm the pool; a failed dial is retried on first use
			defer dials.Done()
			_ = w.dial(wctx)
		}()
	}
	dials.Wait()
	stopWorkers := func() {
		stopCtx()
		for _, w := range workers {
			w.stop()
		}
	}

	rec := &recorder{ph: make([]phaseRec, len(cfg.Phases))}
	queue := make(chan job, queueCap)
	var sent atomic.Uint64
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(wctx, queue, start, rec)
		}()
	}

	// Reporting.
	lw := newLineWriter(out)
	var (
		p99s   []time.Duration
		rpss   []float64
		lastTx uint64
	)
	qs := []float64{0.5, 0.99, 0.999}
	var qv [3]time.Duration
	var lastT time.Duration
	// report writes the line for the interval ending now. The phase named is
	// the one scheduled at the interval's midpoint, TargetRPS the scheduled
	// rate there.
	report := func(now time.Duration) {
		dt := now - lastT
		rec.mu.Lock()
		rec.iv.Quantiles(qs, qv[:])
		n, mx, errs := rec.iv.Count(), rec.iv.Max(), rec.ivErr
		rec.iv.Reset()
		rec.ivErr = 0
		rec.mu.Unlock()
		tx := sent.Load()
		name, target := phaseAt(cfg.Phases, lastT+dt/2)
		l := LoadGenLine{Kind: KindLoadGen, T: secs(now), Phase: name, TargetRPS: math.Round(target*100) / 100,
			RPS: rate(n, dt), Count: n, Sent: tx - lastTx, Backlog: len(queue),
			P50Ms: ms(qv[0]), P99Ms: ms(qv[1]), P999Ms: ms(qv[2]), MaxMs: ms(mx), Errors: errs}
		lastTx, lastT = tx, now
		p99s = append(p99s, qv[1])
		rpss = append(rpss, l.RPS)
		lw.write(l)
	}
	tickDone := make(chan struct{})
	stopTick := make(chan struct{})
	go func() {
		defer close(tickDone)
		tickLoop(stopTick, every, start, func(now, _ time.Duration) { report(now) })
	}()

	// Schedule.
	completed := schedule(ctx, cfg.Phases, start, queue, &sent)
	close(queue)

	wdone := make(chan struct{})
	go func() { wg.Wait(); close(wdone) }()
	drained := true
	if completed {
		select {
		case <-wdone:
		case <-time.After(drain):
			drained = false
		case <-ctx.Done():
		}
	}
	stopWorkers()
	<-wdone
	close(stopTick)
	<-tickDone
	el := time.Since(start)
	rec.mu.Lock()
	pending := rec.iv.Count() + rec.ivErr
	rec.mu.Unlock()
	if pending > 0 || el-lastT >= every/2 {
		report(el) // the last, partial interval
	}

	if completed && !drained && ctx.Err() == nil {
		// Whatever is left after the drain is lost: count it as errors.
		for j := range queue {
			rec.record(j.phase, 0, false)
		}
		for _, w := range workers {
			if w.aborted {
				rec.record(w.abortedJob.phase, 0, false)
			}
		}
	}
	for _, w := range workers {
		w.drop()
	}

	// Final line and summary.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	all := rec.all
	all.Quantiles(qs, qv[:])
	s := Summary{Duration: el, Sent: sent.Load(), Count: all.Count(), Errors: rec.err,
		P50: qv[0], P99: qv[1], P999: qv[2], Max: all.Max(), Mean: all.Mean(),
		P99Series: p99s, RPSSeries: rpss, Hist: &all}
	for i, p := range cfg.Phases {
		ph := &rec.ph[i]
		var pv [3]time.Duration
		ph.hist.Quantiles(qs, pv[:])
		s.Phases = append(s.Phases, PhaseStats{Name: p.Name, TargetRPS: math.Round(p.expected()/p.Duration.Seconds()*100) / 100,
			Count: ph.hist.Count(), Errors: ph.errors, P50Ms: ms(pv[0]), P99Ms: ms(pv[1]), P999Ms: ms(pv[2]), MaxMs: ms(ph.hist.Max())})
	}
	series := make([]float64, len(p99s))
	for i, d := range p99s {
		series[i] = ms(d)
	}
	lastPhase := cfg.Phases[len(cfg.Phases)-1].Name
	var expected float64
	var sched time.Duration
	for _, p := range cfg.Phases {
		expected += p.expected()
		sched += p.Duration
	}
	lw.write(LoadGenLine{Kind: KindLoadGen, T: secs(el), Phase: lastPhase, TargetRPS: math.Round(expected/sched.Seconds()*100) / 100,
		RPS: rate(s.Count, el), Count: s.Count,
		Sent: s.Sent, P50Ms: ms(s.P50), P99Ms: ms(s.P99), P999Ms: ms(s.P999), MaxMs: ms(s.Max), Errors: s.Errors,
		Final: true, MeanMs: ms(s.Mean), P99SeriesMs: series, Phases: s.Phases, Hist: s.Hist})
	return s, lw.error()
}

// schedule hands every request of the phases to queue at its intended time
// and reports whether it got through the whole schedule (false: ctx done).
// It returns at the end of the last phase, not at its last request.
func schedule(ctx context.Context, phases []Phase, start time.Time, queue chan<- job, sent *atomic.Uint64) bool {
	sl := newSleeper()
	defer sl.close()
	done := ctx.Done()
	waitUntil := func(due time.Duration) bool {
		for {
			select {
			case <-done:
				return false
			default:
			}
			now := time.Since(start)
			if now >= due {
				return true
			}
			sl.sleep(min(due-now, 20*time.Millisecond))
		}
	}
	var phaseStart time.Duration
	for pi, p := range phases {
		for i := int64(0); ; i++ {
			off, ok := p.sendOffset(i)
			if !ok {
				break
			}
			due := phaseStart + off
			if !waitUntil(due) {
				return false
			}
			select {
			case queue <- job{off: due, phase: pi}:
				sent.Add(1)
			case <-done:
				return false
			}
		}
		phaseStart += p.Duration
	}
	return waitUntil(phaseStart)
}

// phaseAt names the phase scheduled at offset t and its rate then.
func phaseAt(phases []Phase, t time.Duration) (string, float64) {
	var ps time.Duration
	for _, p := range phases {
		if t < ps+p.Duration {
			return p.Name, p.rateAt(t - ps)
		}
		ps += p.Duration
	}
	return phases[len(phases)-1].Name, 0
}
