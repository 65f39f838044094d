package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHistogramQuantilesMatchSorted(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 1000, 100000} {
		var h Histogram
		vals := make([]time.Duration, n)
		for i := range vals {
			// log-uniform from 1µs to 60s
			v := time.Duration(math.Exp(math.Log(1e3) + r.Float64()*(math.Log(60e9)-math.Log(1e3))))
			vals[i] = v
			h.Record(v)
		}
		slices.Sort(vals)
		if h.Count() != uint64(n) {
			t.Fatalf("count %d, want %d", h.Count(), n)
		}
		for _, q := range []float64{0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
			rank := int(math.Ceil(q * float64(n)))
			if rank < 1 {
				rank = 1
			}
			want := vals[rank-1]
			got := h.Quantile(q)
			if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.01 {
				t.Errorf("n=%d q=%v: got %v want %v (%.3f%% off)", n, q, got, want, rel*100)
			}
		}
		if h.Max() != vals[n-1] || h.Min() != vals[0] {
			t.Errorf("n=%d: min/max %v/%v, want %v/%v", n, h.Min(), h.Max(), vals[0], vals[n-1])
		}
	}
}

func TestHistogramSmallExactMergeResetJSON(t *testing.T) {
	var a, b Histogram
	if a.Quantile(0.99) != 0 || a.Count() != 0 {
		t.Fatal("empty histogram not zero")
	}
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i)) // exact region
		b.Record(time.Duration(i) * time.Millisecond)
	}
	if got := a.Quantile(0.5); got != 50 {
		t.Errorf("p50 of 1..100ns = %v", got)
	}
	a.Record(-5)
	a.Record(time.Hour) // clamped bucket, exact max
	if a.Max() != time.Hour || a.Min() != 0 {
		t.Errorf("min/max = %v/%v", a.Min(), a.Max())
	}
	a.Merge(&b)
	if a.Count() != 202 {
		t.Errorf("merged count %d", a.Count())
	}
	if n := a.CountAtLeast(50 * time.Millisecond); n < 51 || n > 52 {
		t.Errorf("CountAtLeast(50ms) = %d, want 51 (+ the 1h)", n)
	}
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	var c Histogram
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if c != a {
		t.Error("JSON round trip changed the histogram")
	}
	a.Reset()
	if a.Count() != 0 || a.Max() != 0 {
		t.Error("Reset left data")
	}
}

func TestHistogramRecordAllocs(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(1234 * time.Microsecond) }); n != 0 {
		t.Errorf("Record allocates %v per call", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	d := time.Duration(1)
	for b.Loop() {
		h.Record(d)
		d = d*7 + 13
		if d > time.Minute {
			d = 1
		}
	}
}

func TestParsePhases(t *testing.T) {
	got, err := ParsePhases("low:10s@200,ramp:5s@200-800, peak:10s@800,spike:3s@1500,low:10s@200,2s@0,x:1m@5-5")
	if err != nil {
		t.Fatal(err)
	}
	want := []Phase{
		{"low", 10 * time.Second, 200, 0},
		{"ramp", 5 * time.Second, 200, 800},
		{"peak", 10 * time.Second, 800, 0},
		{"spike", 3 * time.Second, 1500, 0},
		{"low", 10 * time.Second, 200, 0},
		{"phase6", 2 * time.Second, 0, 0},
		{"x", time.Minute, 5, 0},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	bad := map[string]string{
		"":                        "empty phase spec",
		"low:10s@200,":            `phase 2 "": empty part`,
		"low:10s":                 `phase 1 "low:10s": missing '@rate'`,
		"low:ten@200":             `bad duration "ten"`,
		"a:1s@1,b:-1s@5":          `phase 2 "b:-1s@5": duration -1s must be positive`,
		"a:1s@fast":               `bad rate "fast"`,
		"a:1s@-3":                 `bad rate ""`, // "-3" splits as a ramp from ""
		"ramp:5s@200-x":           `bad ramp end rate "x"`,
		"ramp:5s@200-0":           "ramp end rate must be > 0",
		":1s@5":                   "empty name",
		"a:1s@NaN":                "finite",
		"a:1s@5,b:2s@10,c:3s@1e9": `phase 3 "c:3s@1e9"`,
	}
	for spec, frag := range bad {
		_, err := ParsePhases(spec)
		if err == nil {
			t.Errorf("%q: no error", spec)
			continue
		}
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("%q: error %q does not contain %q", spec, err, frag)
		}
	}
}

func TestScheduleCounts(t *testing.T) {
	for _, p := range []Phase{
		{"c", 2 * time.Second, 300, 0},
		{"up", 5 * time.Second, 200, 800},
		{"down", 3 * time.Second, 900, 100},
		{"from0", 4 * time.Second, 0, 50},
		{"pause", time.Second, 0, 0},
	} {
		var n int64
		last := time.Duration(-1)
		for ; ; n++ {
			off, ok := p.sendOffset(n)
			if !ok {
				break
			}
			if off <= last && n > 0 {
				t.Fatalf("%s: offsets not increasing at %d", p.Name, n)
			}
			last = off
		}
		if want := p.expected(); math.Abs(float64(n)-want) > 1 {
			t.Errorf("%s: %d requests, want %.0f", p.Name, n, want)
		}
	}
}

// startServer runs RunServer and returns its address and a stop function
// that returns the server's lines.
func startServer(t *testing.T, cfg ServerConfig) (string, func() []ServerLine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	var buf syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- RunServer(ctx, cfg, func(a string) { addrc <- a }, &buf) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("server: %v", err)
	}
	return addr, func() []ServerLine {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("server: %v", err)
		}
		var lines []ServerLine
		if err := DecodeLines(&buf, func(l ServerLine) error { lines = append(lines, l); return nil }); err != nil {
			t.Error(err)
		}
		return lines
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Read(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestEndToEndLoopback(t *testing.T) {
	addr, stop := startServer(t, ServerConfig{WorkPerRequest: time.Millisecond, Report: 500 * time.Millisecond})
	// /healthz and a bad parameter
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + addr + "/work?cpu=banana"); err != nil || resp.StatusCode != 400 {
		t.Fatalf("bad cpu: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	const rps, dur = 300, 2 * time.Second
	var out bytes.Buffer
	s, err := RunLoadGen(context.Background(), LoadGenConfig{
		URL:    "http://" + addr + "/work",
		Phases: []Phase{{Name: "steady", Duration: dur, RPS: rps}},
		Report: 500 * time.Millisecond,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	slines := stop()
	t.Logf("loadgen: count=%d errors=%d p50=%v p99=%v p99.9=%v max=%v", s.Count, s.Errors, s.P50, s.P99, s.P999, s.Max)
	want := float64(rps) * dur.Seconds()
	if math.Abs(float64(s.Count)-want) > want*0.10 {
		t.Errorf("count %d, want %v ±10%%", s.Count, want)
	}
	if s.Errors != 0 {
		t.Errorf("errors = %d", s.Errors)
	}
	if s.P99 < time.Millisecond {
		t.Errorf("p99 %v < the 1ms of work per request", s.P99)
	}
	if s.Hist == nil || s.Hist.Count() != s.Count || len(s.Phases) != 1 || s.Phases[0].Count != s.Count {
		t.Errorf("summary inconsistent: %+v", s)
	}

	var lines []LoadGenLine
	if err := DecodeLines(&out, func(l LoadGenLine) error { lines = append(lines, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(lines) < 4 {
		t.Fatalf("only %d loadgen lines", len(lines))
	}
	final := lines[len(lines)-1]
	if !final.Final || final.Count != s.Count || final.Hist == nil || final.Hist.Count() != s.Count || len(final.P99SeriesMs) != len(lines)-1 {
		t.Errorf("bad final line %+v", final)
	}
	for _, l := range lines[:len(lines)-1] {
		if l.Kind != KindLoadGen || l.Phase != "steady" || l.Final {
			t.Errorf("bad interval line %+v", l)
		}
	}
	sf := slines[len(slines)-1]
	if !sf.Final || sf.Total < s.Count || sf.Errors != 1 {
		t.Errorf("server final line %+v (loadgen count %d)", sf, s.Count)
	}
}

// TestNoCoordinatedOmission: a server that stalls once for 200ms during a
// 1s run at 200 rps. Every request whose intended send time fell in the stall
// must carry the stall: about 40 requests are delayed, half of them by
// >= 100ms. A closed-loop generator would show only one slow request per
// connection (4 here).
func TestNoCoordinatedOmission(t *testing.T) {
	var (
		mu      sync.Mutex
		first   atomic.Int64
		stalled atomic.Bool
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		mu.Lock() // the whole service stalls, like a long GC pause
		if now-first.Load() > int64(300*time.Millisecond) && stalled.CompareAndSwap(false, true) {
			time.Sleep(200 * time.Millisecond)
		}
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()

	s, err := RunLoadGen(context.Background(), LoadGenConfig{
		URL:         "http://" + ln.Addr().String() + "/",
		Phases:      []Phase{{Name: "run", Duration: time.Second, RPS: 200}},
		Connections: 4,
		Report:      250 * time.Millisecond,
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	slow := s.Hist.CountAtLeast(100 * time.Millisecond)
	t.Logf("count=%d errors=%d p50=%v p90=%v p99=%v max=%v, >=100ms: %d", s.Count, s.Errors, s.P50,
		s.Hist.Quantile(0.9), s.P99, s.Max, slow)
	if !stalled.Load() {
		t.Fatal("server never stalled")
	}
	if s.Errors != 0 || s.Count < 190 {
		t.Errorf("count %d errors %d", s.Count, s.Errors)
	}
	if s.Max < 180*time.Millisecond || s.P99 < 150*time.Millisecond {
		t.Errorf("max %v / p99 %v do not reflect a 200ms stall", s.Max, s.P99)
	}
	if slow < 12 {
		t.Errorf("only %d requests >= 100ms; the stall should delay ~20 by that much", slow)
	}
}

// TestClientNoAllocs checks the load generator's per-request path against a
// canned keep-alive server that does not allocate either.
func TestClientNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n")
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 { // end of request headers
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}
	}()
	tgt, err := parseTarget("http://"+ln.Addr().String()+"/work?cpu=0", false)
	if err != nil {
		t.Fatal(err)
	}
	w := &lgWorker{tgt: tgt, timeout: 5 * time.Second, br: bufio.NewReaderSize(nil, 16<<10)}
	ctx := context.Background()
	for i := 0; i < 10; i++ { // dial and warm up
		if ok, err := w.do(ctx); !ok || err != nil {
			t.Fatalf("request: %v %v", ok, err)
		}
	}
	var h Histogram
	start := time.Now()
	allocs := testing.AllocsPerRun(500, func() {
		ok, err := w.do(ctx)
		if !ok || err != nil {
			t.Fatalf("request: %v %v", ok, err)
		}
		h.Record(time.Since(start))
	})
	w.drop()
	if allocs > 0.05 {
		t.Errorf("%.2f allocations per request", allocs)
	}
}

func TestRoundTripParsing(t *testing.T) {
	cases := []struct {
		resp       string
		code       int
		keep, fail bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokNEXT", 200, true, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nTrailer: 1\r\n\r\nNEXT", 200, true, false},
		{"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\nConnection: close\r\n\r\nbusyNEXT", 503, false, false},
		{"HTTP/1.0 200 OK\r\n\r\nbody until eof", 200, false, false},
		{"HTTP/1.1 204 No Content\r\n\r\nNEXT", 204, true, false},
		{"garbage\r\n\r\n", 0, false, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 0, false, true},
	}
	for _, c := range cases {
		client, server := net.Pipe()
		go func() {
			io.Copy(io.Discard, io.LimitReader(server, 10))
			server.Write([]byte(c.resp))
			server.Close()
		}()
		br := bufio.NewReader(client)
		code, keep, err := roundTrip(client, br, []byte("0123456789"))
		if (err != nil) != c.fail || code != c.code || keep != c.keep {
			t.Errorf("%q: code=%d keep=%v err=%v", c.resp, code, keep, err)
		}
		if !c.fail && keep {
			rest, _ := io.ReadAll(br)
			if string(rest) != "NEXT" {
				t.Errorf("%q: body not consumed exactly, left %q", c.resp, rest)
			}
		}
		client.Close()
	}
}

func TestLoadGenRejectsBadConfig(t *testing.T) {
	for _, cfg := range []LoadGenConfig{
		{URL: "http://127.0.0.1:1/", Phases: nil},
		{URL: "https://127.0.0.1:1/", Phases: []Phase{{Duration: time.Second, RPS: 1}}},
		{URL: "http://127.0.0.1:1/", Phases: []Phase{{Duration: 0, RPS: 1}}},
	} {
		if _, err := RunLoadGen(context.Background(), cfg, io.Discard); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestLoadGenCountsErrorsAndStops: nothing listens, so every request fails;
// the run still follows its schedule and cancelling ends it early.
func TestLoadGenCountsErrorsAndStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	s, err := RunLoadGen(ctx, LoadGenConfig{URL: "http://" + addr + "/",
		Phases: []Phase{{Name: "x", Duration: 10 * time.Second, RPS: 100}}, Timeout: time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("took %v to stop", el)
	}
	if s.Count != 0 || s.Errors < 20 {
		t.Errorf("count %d errors %d, want 0 and ~40", s.Count, s.Errors)
	}
}

func TestBurnerAndAntagonist(t *testing.T) {
	t.Run("burner", func(t *testing.T) {
		var out syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- RunBurner(ctx, BurnerConfig{Threads: 2, Report: 100 * time.Millisecond}, &out) }()
		time.Sleep(350 * time.Millisecond)
		t0 := time.Now()
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if el := time.Since(t0); el > time.Second {
			t.Errorf("stopped after %v", el)
		}
		var lines []BurnerLine
		if err := DecodeLines(strings.NewReader(out.String()), func(l BurnerLine) error { lines = append(lines, l); return nil }); err != nil {
			t.Fatal(err)
		}
		// At least one interval line (a loaded machine may delay ticks) and the final one.
		if len(lines) < 2 || lines[0].UnitsPerS <= 0 || lines[0].Units == 0 {
			t.Fatalf("lines %+v", lines)
		}
		f := lines[len(lines)-1]
		if !f.Final || f.Total == 0 || f.UnitsPerS <= 0 || f.Threads != 2 {
			t.Errorf("final %+v", f)
		}
	})
	t.Run("antagonist", func(t *testing.T) {
		var out syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		size := int64(64 << 20)
		if raceEnabled {
			size = 8 << 20 // instrumented stores are slow
		}
		go func() {
			errc <- RunAntagonist(ctx, AntagonistConfig{Threads: 2, SizeBytes: size, Report: 100 * time.Millisecond}, &out)
		}()
		time.Sleep(350 * time.Millisecond)
		t0 := time.Now()
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if el := time.Since(t0); el > time.Second {
			t.Errorf("stopped after %v", el)
		}
		var lines []AntagonistLine
		if err := DecodeLines(strings.NewReader(out.String()), func(l AntagonistLine) error { lines = append(lines, l); return nil }); err != nil {
			t.Fatal(err)
		}
		f := lines[len(lines)-1]
		if len(lines) < 2 || lines[0].BytesPerS <= 0 || !f.Final || f.Total == 0 || f.BytesPerS <= 0 || f.SizeBytes != size {
			t.Fatalf("lines %+v", lines)
		}
		t.Logf("antagonist: %.0f MiB/s", f.BytesPerS/(1<<20))
	})
}

func TestMemoryHogReachesTarget(t *testing.T) {
	const target = 32 << 20
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() {
		errc <- RunMemoryHog(ctx, MemoryHogConfig{TargetBytes: target, RateBytesPerSec: 256 << 20,
			Report: 50 * time.Millisecond, Retouch: 50 * time.Millisecond}, &out)
	}()
	deadline := time.Now().Add(5 * time.Second)
	var reached *MemoryHogLine
	for reached == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		_ = DecodeLines(strings.NewReader(out.String()), func(l MemoryHogLine) error {
			if l.Reached && reached == nil {
				reached = &l
			}
			return nil
		})
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if reached == nil {
		t.Fatalf("never reached the target:\n%s", out.String())
	}
	if el := time.Since(t0); el < 100*time.Millisecond {
		t.Errorf("reached 32 MiB at 256 MiB/s in %v: not paced", el)
	}
	if reached.AllocatedBytes < target || (reached.ResidentBytes >= 0 && reached.ResidentBytes < target) {
		t.Errorf("reached line %+v", *reached)
	}
	var final MemoryHogLine
	_ = DecodeLines(strings.NewReader(out.String()), func(l MemoryHogLine) error { final = l; return nil })
	if !final.Final || !final.Reached {
		t.Errorf("final %+v", final)
	}
}

func TestRedisTargetEncodesThePathAsACommand(t *testing.T) {
	tgt, err := parseTarget("redis://127.0.0.1/SINTER/a%2Fb/c", false)
	if err != nil {
		t.Fatal(err)
	}
	if tgt.hostport != "127.0.0.1:6379" {
		t.Errorf("host %q, want the default port", tgt.hostport)
	}
	if want := "*3\r\n$6\r\nSINTER\r\n$3\r\na/b\r\n$1\r\nc\r\n"; string(tgt.request) != want {
		t.Errorf("request %q, want %q", tgt.request, want)
	}
	for _, bad := range []string{"redis://127.0.0.1:6379/", "redis:///PING", "redis://127.0.0.1/%zz"} {
		if _, err := parseTarget(bad, false); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if _, err := parseTarget("redis://127.0.0.1/PING", true); err == nil {
		t.Error("gzip on a redis:// URL: no error")
	}
}
