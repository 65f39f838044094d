package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tidalqos/tidal/internal/resp"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/interference"
)

// indicatorProbe names the SLO probe's indicator.
const indicatorProbe = reporter.IndicatorProbe

// maxUntallied bounds the answers kept between two tallies (the interference loop tallies
// every pass, one answer or so later).
const maxUntallied = 256

// probeSamples is how many recent probes the indicator's median is taken over: one slow
// answer does not cut lending, a run of them does.
const probeSamples = 5

// floorAnswers is how many of a probe's latest answers with nothing lent are kept per load
// level: its floor is their median, and the share of them over the target says whether the
// target sits inside the service's own tail.
const floorAnswers = 50

// probes asks the SLO probe of each online workload that has one (an HTTP GET or a Redis
// command), each in a goroutine of its own, every interval; the interference loop reads their
// recent latencies. A probe that fails or times out counts as taking its timeout.
//
// It also learns each probe's own latency with nothing lent, per load level, as the wait's
// baselines are learnt: an operator's target under that floor cannot be met by lending less,
// and status and the log say so.
type probes struct {
	interval time.Duration
	client   *http.Client
	running  map[string]*probe // by workload name; the interference loop's only
	wg       sync.WaitGroup
	// baselines are the probes' answers (seconds) with nothing lent, per load level; the
	// interference loop's only.
	baselines *interference.Baselines
}

type probe struct {
	slo    qos.SLO
	cancel context.CancelFunc
	// overFloor: the probe's baseline at its load was over its target when last judged; the
	// interference loop's only (it logs the change).
	overFloor bool

	mu     sync.Mutex
	recent []time.Duration
	// answered are the answers since the last tally: for the baseline, and for cpu.mechanism
	// auto, where every answer counts once.
	answered []time.Duration
}

func newProbes(interval time.Duration) *probes {
	return &probes{interval: interval, running: map[string]*probe{}, baselines: interference.NewBaselines(0, 0).WithReadings(floorAnswers),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true},
			// A redirect is an answer, and not a 2xx one: the probe is not followed elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// sync runs the probes of want (workload name -> its SLO) and stops the others. A probe's
// floor outlives a change of its target (the latency is the workload's), not of its URL.
func (p *probes) sync(ctx context.Context, want map[string]qos.SLO) {
	keep := map[string]bool{}
	for name, slo := range want {
		pr, ok := p.running[name]
		keep[name] = !ok || pr.slo.Probe == slo.Probe
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
		pr := &probe{slo: slo, cancel: cancel}
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		took := ask.once(ctx)
		if ctx.Err() != nil {
			return
		}
		pr.mu.Lock()
		pr.recent = append(pr.recent, took)
		if len(pr.recent) > probeSamples {
			pr.recent = pr.recent[1:]
		}
		pr.answered = append(pr.answered, took)
		if len(pr.answered) > maxUntallied {
			pr.answered = pr.answered[1:] // a workload the loop has not read for a while
		}
		pr.mu.Unlock()
	}
}

// A prober asks a workload's probe once and says how long the answer took: its timeout when
// it fails or is refused. Each is its probe goroutine's own.
type prober interface {
	once(ctx context.Context) time.Duration
	close()
}

// prober is the prober for an SLO's URL, which qos has checked: redis:// or http://.
func (p *probes) prober(slo qos.SLO) prober {
	timeout := p.timeout(slo)
	if t, err := resp.ParseURL(slo.Probe); err == nil {
		return &redisProber{target: t.HostPort, command: resp.Command(t.Args), timeout: timeout}
	}
	return &httpProber{url: slo.Probe, client: p.client, timeout: timeout}
}

// httpProber GETs a URL; an answer that is not 2xx is a failure.
type httpProber struct {
	url     string
	client  *http.Client // shared by the probes; it keeps their connections
	timeout time.Duration
}

func (h *httpProber) once(ctx context.Context) time.Duration {
	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, h.url, nil)
	if err != nil {
		return h.timeout
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return h.timeout
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return h.timeout
	}
	return time.Since(start)
}

func (h *httpProber) close() {}

// redisProber sends a Redis command on a connection it keeps, as a client of the database
// does; an error reply is a failure. A failed exchange drops the connection, and the next
// probe dials again (its time counted, as an HTTP probe's new connection is).
type redisProber struct {
	target  string
	command []byte
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
}

func (r *redisProber) once(ctx context.Context) time.Duration {
	start := time.Now()
	deadline := start.Add(r.timeout)
	if r.conn == nil {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, "tcp", r.target)
		if err != nil {
			return r.timeout
		}
		r.conn, r.br = c, bufio.NewReader(c)
	}
	isErr, err := r.exchange(ctx, deadline)
	if err != nil {
		r.close()
		return r.timeout
	}
	if isErr {
		return r.timeout
	}
	return time.Since(start)
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
// were slower than its target. Read with nothing lent (unlent), each teaches the probe's
// floor at load runMilli.
func (p *probes) tally(name string, runMilli int64, unlent bool) (answers, over int) {
	pr, ok := p.running[name]
	if !ok {
		return 0, 0
	}
	pr.mu.Lock()
	answered := pr.answered
	pr.answered = nil
	pr.mu.Unlock()
	if len(answered) == 0 {
		return 0, 0
	}
	for _, took := range answered {
		if took > pr.slo.Latency {
			over++
		}
	}
	if unlent {
		for _, took := range answered {
			p.baselines.AddUnlent(name, runMilli, took.Seconds())
		}
	}
	return len(answered), over
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
