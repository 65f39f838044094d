package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tidalqos/tidal/internal/promhist"
	"github.com/tidalqos/tidal/internal/resp"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/interference"
)

// Indicator names of the two kinds of SLO signal: a probe's answers, a metric's quantile.
const (
	indicatorProbe  = reporter.IndicatorProbe
	indicatorMetric = reporter.IndicatorMetric
)

// maxUntallied bounds the samples kept between two tallies (the interference loop tallies
// every pass, one sample or so later).
const maxUntallied = 256

// probeSamples is how many recent samples the indicator's median is taken over: one slow
// answer (or one read of a metric's tail) does not cut lending, a run of them does.
const probeSamples = 5

// floorAnswers is how many of a probe's latest samples with nothing lent are kept per load
// level: its floor is their median, and the share of them over the target says whether the
// target sits inside the service's own tail.
const floorAnswers = 50

// maxMetricsPage bounds what the agent reads of a workload's metrics page.
const maxMetricsPage = 16 << 20

// probes asks the SLO signal of each online workload that has one, each in a goroutine of
// its own, every interval: a probe (an HTTP GET or a Redis command) for one answer, or a
// latency histogram the workload exports for every request it served since the last read.
// The interference loop reads their recent latencies. A probe that fails or times out counts
// as taking its timeout.
//
// It also learns each signal's own latency with nothing lent, per load level, as the wait's
// baselines are learnt: an operator's target under that floor cannot be met by lending less,
// and status and the log say so.
type probes struct {
	interval time.Duration
	log      *slog.Logger
	client   *http.Client
	running  map[string]*probe // by workload name; the interference loop's only
	wg       sync.WaitGroup
	// baselines are the probes' answers (seconds) with nothing lent, per load level; the
	// interference loop's only.
	baselines *interference.Baselines
}

type probe struct {
	name   string
	slo    qos.SLO
	cancel context.CancelFunc
	// overFloor: the probe's baseline at its load was over its target when last judged; the
	// interference loop's only (it logs the change).
	overFloor bool

	mu     sync.Mutex
	recent []time.Duration
	// pending are the samples since the last tally: for the baseline, and for cpu.mechanism
	// auto, where every answer counts once.
	pending []sloSample
}

// An sloSample is what one ask of an SLO signal found: a probe's one answer, or the requests a
// metric's histogram counted since the last read (none: nothing to judge).
type sloSample struct {
	// latency is the answer's time, or the quantile of the histogram's requests.
	latency time.Duration
	// answers is how many answers it stands for, over how many of them were slower than
	// the target.
	answers, over int
}

// answered is one answer that took took, against target.
func answered(took, target time.Duration) sloSample {
	s := sloSample{latency: took, answers: 1}
	if took > target {
		s.over = 1
	}
	return s
}

func newProbes(interval time.Duration, log *slog.Logger) *probes {
	return &probes{interval: interval, log: log, running: map[string]*probe{}, baselines: interference.NewBaselines(0, 0).WithReadings(floorAnswers),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true},
			// A redirect is an answer, and not a 2xx one: the probe is not followed elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// sync runs the probes of want (workload name -> its SLO) and stops the others. A probe's
// floor outlives a change of its target (the latency is the workload's), not of what it asks.
func (p *probes) sync(ctx context.Context, want map[string]qos.SLO) {
	keep := map[string]bool{}
	for name, slo := range want {
		pr, ok := p.running[name]
		keep[name] = !ok || pr.slo.Probe == slo.Probe && pr.slo.Histogram == slo.Histogram && pr.slo.Quantile == slo.Quantile
	}
	p.baselines.Keep(keep)
	for name, pr := range p.running {
		if slo, ok := want[name]; !ok || slo != pr.slo {
			pr.cancel()
			delete(p.running, name)
		}
	}
	for name, slo := range want {
		if _, ok := p.running[name]; ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		pr := &probe{name: name, slo: slo, cancel: cancel}
		p.running[name] = pr
		p.wg.Go(func() { p.run(pctx, pr) })
	}
}

// timeout bounds one probe: ten times its target, at least the interval.
func (p *probes) timeout(slo qos.SLO) time.Duration { return max(10*slo.Latency, p.interval) }

func (p *probes) run(ctx context.Context, pr *probe) {
	ask := p.prober(pr.slo)
	defer ask.close()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := ask.once(ctx)
		if ctx.Err() != nil {
			return
		}
		// Said once when the signal starts failing and once when it answers again: a failure
		// counts as the timeout, so a probe that cannot answer holds lending down.
		switch {
		case err != nil && !failing:
			p.log.Warn("SLO signal failing: each failure counts as its timeout", "workload", pr.name, "signal", pr.slo.Signal(), "timeout", p.timeout(pr.slo), "err", err)
		case err == nil && failing:
			p.log.Info("SLO signal answering again", "workload", pr.name, "signal", pr.slo.Signal())
		}
		failing = err != nil
		pr.record(s)
	}
}

// record keeps a sample. One that stands for no answer (a service that served no request)
// lets the oldest recent one go, so that an idle service's latency is not judged on forever.
func (pr *probe) record(s sloSample) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if s.answers == 0 {
		if len(pr.recent) > 0 {
			pr.recent = pr.recent[1:]
		}
		return
	}
	pr.recent = append(pr.recent, s.latency)
	if len(pr.recent) > probeSamples {
		pr.recent = pr.recent[1:]
	}
	pr.pending = append(pr.pending, s)
	if len(pr.pending) > maxUntallied {
		pr.pending = pr.pending[1:] // a workload the loop has not read for a while
	}
}

// A prober asks a workload's SLO signal once and says what it found; a failure (an error, a
// refusal) is an answer that took the timeout, with what went wrong. Each is its probe
// goroutine's own.
type prober interface {
	once(ctx context.Context) (sloSample, error)
	close()
}

// prober is the prober for an SLO, which qos has checked: a histogram on a page, or a
// redis:// or http:// probe.
func (p *probes) prober(slo qos.SLO) prober {
	timeout := p.timeout(slo)
	if slo.Histogram != "" {
		sel, err := promhist.ParseSelector(slo.Histogram)
		return &metricProber{page: slo.Probe, sel: sel, selErr: err, quantile: slo.Quantile, target: slo.Latency, timeout: timeout, client: p.client}
	}
	if t, err := resp.ParseURL(slo.Probe); err == nil {
		return &redisProber{target: t.HostPort, command: resp.Command(t.Args), slo: slo.Latency, timeout: timeout}
	}
	return &httpProber{url: slo.Probe, client: p.client, slo: slo.Latency, timeout: timeout}
}

// httpProber GETs a URL; an answer that is not 2xx is a failure.
type httpProber struct {
	url     string
	client  *http.Client // shared by the probes; it keeps their connections
	slo     time.Duration
	timeout time.Duration
}

func (h *httpProber) once(ctx context.Context) (sloSample, error) {
	start := time.Now()
	err := get(ctx, h.client, h.url, h.timeout, "", func(r io.Reader) error {
		_, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20))
		return err
	})
	if err != nil {
		return answered(h.timeout, h.slo), err
	}
	return answered(time.Since(start), h.slo), nil
}

func (h *httpProber) close() {}

// get GETs url within timeout, asking for accept where it is not empty, and hands a 2xx
// answer's body to read; any other answer is an error.
func get(ctx context.Context, client *http.Client, url string, timeout time.Duration, accept string, read func(io.Reader) error) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return read(resp.Body)
}

// metricProber reads a latency histogram the workload exports (a Prometheus page) and answers
// for every request it counted since the last read: their quantile, and how many were slower
// than the target. Every request counts, where a probe sees one in an interval: the tail a
// service's users see, not the median of a few asks.
type metricProber struct {
	page     string
	sel      promhist.Selector
	selErr   error // qos checked the selector; kept should it still not parse
	quantile float64
	target   time.Duration
	timeout  time.Duration
	client   *http.Client
	// last is the histogram as last read (nil before the first read).
	last promhist.Buckets
}

// textFormat asks for the text exposition, which every Prometheus client serves.
const textFormat = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

func (m *metricProber) once(ctx context.Context) (sloSample, error) {
	if m.selErr != nil {
		return answered(m.timeout, m.target), m.selErr
	}
	var now promhist.Buckets
	err := get(ctx, m.client, m.page, m.timeout, textFormat, func(r io.Reader) error {
		var err error
		now, err = promhist.Read(io.LimitReader(r, maxMetricsPage), m.sel)
		return err
	})
	if err != nil {
		return answered(m.timeout, m.target), err
	}
	last := m.last
	m.last = now
	d, ok := now.Since(last)
	if last == nil || !ok || d.Total() < 1 {
		// The first read, a restart (its counts fell) or new buckets: nothing to compare
		// with yet. Or no request since the last read: nothing to judge.
		return sloSample{}, nil
	}
	q, beyond := d.Quantile(m.quantile)
	took := time.Duration(q * float64(time.Second))
	if beyond {
		// Past the histogram's last finite bound: slower than that, by how much unknown. It
		// counts as the timeout where that is slower still.
		took = max(took, m.timeout)
	}
	return sloSample{latency: took, answers: int(math.Round(d.Total())), over: int(math.Round(d.Over(m.target.Seconds())))}, nil
}

func (m *metricProber) close() {}

// redisProber sends a Redis command on a connection it keeps, as a client of the database
// does; an error reply is a failure. A failed exchange drops the connection, and the next
// probe dials again (its time counted, as an HTTP probe's new connection is).
type redisProber struct {
	target  string
	command []byte
	slo     time.Duration
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
}

func (r *redisProber) once(ctx context.Context) (sloSample, error) {
	start := time.Now()
	deadline := start.Add(r.timeout)
	if r.conn == nil {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, "tcp", r.target)
		if err != nil {
			return answered(r.timeout, r.slo), err
		}
		r.conn, r.br = c, bufio.NewReader(c)
	}
	isErr, err := r.exchange(ctx, deadline)
	if err != nil {
		r.close()
		return answered(r.timeout, r.slo), err
	}
	if isErr {
		return answered(r.timeout, r.slo), errors.New("the server answered the command with an error")
	}
	return answered(time.Since(start), r.slo), nil
}

func (r *redisProber) exchange(ctx context.Context, deadline time.Time) (isErr bool, err error) {
	if err := r.conn.SetDeadline(deadline); err != nil {
		return false, err
	}
	// The deadline bounds the exchange; the context ends it sooner only when the agent stops
	// the probe. Set after the deadline, so that a stop is never overwritten by it.
	conn := r.conn // the callback may run after close has cleared r.conn
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := r.conn.Write(r.command); err != nil {
		return false, err
	}
	return resp.ReadReply(r.br)
}

func (r *redisProber) close() {
	if r.conn != nil {
		r.conn.Close()
		r.conn, r.br = nil, nil
	}
}

// latency is the median of a workload's recent probes; false before the first.
func (p *probes) latency(name string) (time.Duration, bool) {
	pr, ok := p.running[name]
	if !ok {
		return 0, false
	}
	pr.mu.Lock()
	recent := slices.Clone(pr.recent)
	pr.mu.Unlock()
	if len(recent) == 0 {
		return 0, false
	}
	return median(recent), true
}

// median sorts ds (not empty) and returns its middle (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// tally takes the answers a workload's probe got since the last tally, and how many of them
// were slower than its target. Read with nothing lent (unlent), each sample teaches the
// probe's floor at load runMilli.
func (p *probes) tally(name string, runMilli int64, unlent bool) (answers, over int) {
	pr, ok := p.running[name]
	if !ok {
		return 0, 0
	}
	pr.mu.Lock()
	pending := pr.pending
	pr.pending = nil
	pr.mu.Unlock()
	for _, s := range pending {
		answers, over = answers+s.answers, over+s.over
		if unlent {
			p.baselines.AddUnlent(name, runMilli, s.latency.Seconds())
		}
	}
	return answers, over
}

// probeFloor is what a probe answers with nothing lent at a load: its median answer, and the
// share of its answers over the target (of how many).
type probeFloor struct {
	Latency    time.Duration
	OverTarget float64
	Answers    int
	// Borrowed: none known at the workload's load yet; these are the nearest level's.
	Borrowed bool
}

// floor is a workload's probe with nothing lent at load runMilli, and whether that is new
// news over its target: true the first time the median at the workload's own load is found
// over the target, and again each time it crosses back, so the caller logs each change once.
func (p *probes) floor(name string, runMilli int64) (f probeFloor, changed, ok bool) {
	pr, running := p.running[name]
	b, borrowed, ok := p.baselines.Of(name, runMilli)
	if !running || !ok {
		return probeFloor{}, false, false
	}
	f = probeFloor{Latency: time.Duration(b * float64(time.Second)), Borrowed: borrowed}
	f.OverTarget, f.Answers, _ = p.baselines.Share(name, runMilli, pr.slo.Latency.Seconds())
	if !borrowed {
		over := f.Latency > pr.slo.Latency
		changed, pr.overFloor = over != pr.overFloor, over
	}
	return f, changed, true
}

// stop ends every probe and waits for them.
func (p *probes) stop() {
	for name, pr := range p.running {
		pr.cancel()
		delete(p.running, name)
	}
	p.wg.Wait()
	p.client.CloseIdleConnections()
}
