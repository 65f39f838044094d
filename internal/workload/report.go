// Package workload holds the workloads that `tidal demo` and the colocation
// benchmark run as separate processes, each in its own cgroup: an online HTTP
// service (RunServer), an open-loop load generator that measures it
// (RunLoadGen), and offline antagonists (RunBurner, RunAntagonist,
// RunMemoryHog).
//
// Every Run function blocks until its context is done (RunLoadGen also
// returns when its schedule is over) and writes one JSON object per reporting
// interval (default 1s) as a line to out, then a final line with "final":
// true holding whole-run totals. Each kind has its own line type
// (ServerLine, LoadGenLine, BurnerLine, AntagonistLine, MemoryHogLine) with a
// "kind" field; DecodeLines reads a stream of them back.
package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// Kind names, as written in the "kind" field of every line.
const (
	KindServer     = "server"
	KindLoadGen    = "loadgen"
	KindBurner     = "burner"
	KindAntagonist = "antagonist"
	KindMemoryHog  = "memhog"
)

// DefaultReport is the reporting interval used when a config leaves it 0.
const DefaultReport = time.Second

// ServerLine is one report of RunServer. Requests and RPS cover the interval
// (the whole run in the final line); Total and Errors (rejected cpu
// parameters) are cumulative. SvcP50Ms/SvcP99Ms
// are the handler's own wall time (excluding connection queueing).
type ServerLine struct {
	Kind     string  `json:"kind"`
	T        float64 `json:"t"`
	Requests uint64  `json:"requests"`
	RPS      float64 `json:"rps"`
	Total    uint64  `json:"total"`
	Errors   uint64  `json:"errors"`
	SvcP50Ms float64 `json:"svc_p50_ms"`
	SvcP99Ms float64 `json:"svc_p99_ms"`
	Final    bool    `json:"final,omitempty"`
}

// LoadGenLine is one report of RunLoadGen. In interval lines, latencies
// cover responses completed in the interval, Phase is the phase scheduled at
// the report time, TargetRPS the scheduled rate then, Sent the requests whose
// intended send time fell in the interval and Backlog the requests due but
// not yet handed to a connection. The final line covers the whole run and
// adds the per-phase breakdown, the per-interval p99 series and the full
// histogram (mergeable across runs).
type LoadGenLine struct {
	Kind      string  `json:"kind"`
	T         float64 `json:"t"`
	Phase     string  `json:"phase"`
	TargetRPS float64 `json:"target_rps"`
	RPS       float64 `json:"rps"`
	Count     uint64  `json:"count"`
	Sent      uint64  `json:"sent"`
	Backlog   int     `json:"backlog"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxMs     float64 `json:"max_ms"`
	Errors    uint64  `json:"errors"`
	Final     bool    `json:"final,omitempty"`

	MeanMs      float64      `json:"mean_ms,omitempty"`
	P99SeriesMs []float64    `json:"p99_series_ms,omitempty"`
	Phases      []PhaseStats `json:"phases,omitempty"`
	Hist        *Histogram   `json:"hist,omitempty"`
}

// PhaseStats is the whole-run result of one phase of the schedule: requests
// are attributed by their intended send time.
type PhaseStats struct {
	Name      string  `json:"name"`
	TargetRPS float64 `json:"target_rps"` // mean scheduled rate
	Count     uint64  `json:"count"`
	Errors    uint64  `json:"errors"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// BurnerLine is one report of RunBurner: units (4 KiB SHA-256 blocks) done
// in the interval (whole run in the final line), their rate, and the total.
type BurnerLine struct {
	Kind      string  `json:"kind"`
	T         float64 `json:"t"`
	Threads   int     `json:"threads"`
	Units     uint64  `json:"units"`
	UnitsPerS float64 `json:"units_per_s"`
	Total     uint64  `json:"total"`
	Final     bool    `json:"final,omitempty"`
}

// AntagonistLine is one report of RunAntagonist: bytes of cache lines
// read-modify-written in the interval (whole run in the final line), their
// rate, and the total.
type AntagonistLine struct {
	Kind      string  `json:"kind"`
	T         float64 `json:"t"`
	Threads   int     `json:"threads"`
	SizeBytes int64   `json:"size_bytes"`
	Bytes     uint64  `json:"bytes"`
	BytesPerS float64 `json:"bytes_per_s"`
	Total     uint64  `json:"total"`
	Final     bool    `json:"final,omitempty"`
}

// MemoryHogLine is one report of RunMemoryHog. AllocatedBytes is what the
// hog has mapped and written so far; ResidentBytes is the whole process's RSS
// from /proc/self/statm (lower than AllocatedBytes once the kernel swaps or
// reclaims it; -1 if unknown). Reached turns true once AllocatedBytes hit the
// target.
type MemoryHogLine struct {
	Kind           string  `json:"kind"`
	T              float64 `json:"t"`
	TargetBytes    int64   `json:"target_bytes"`
	AllocatedBytes int64   `json:"allocated_bytes"`
	ResidentBytes  int64   `json:"resident_bytes"`
	Reached        bool    `json:"reached"`
	Final          bool    `json:"final,omitempty"`
}

// DecodeLines reads JSON lines of one kind from r (e.g. a workload's stdout)
// and calls fn for each until EOF or fn's first error. Blank lines are
// skipped; a line that does not decode is an error naming its number.
func DecodeLines[T any](r io.Reader, fn func(T) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return sc.Err()
}

// lineWriter serializes JSON lines to out and keeps the first write error.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func newLineWriter(out io.Writer) *lineWriter {
	if out == nil {
		out = io.Discard
	}
	return &lineWriter{enc: json.NewEncoder(out)}
}

func (w *lineWriter) write(v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(v); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *lineWriter) error() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Errorf("writing report: %w", w.err)
	}
	return nil
}

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultReport
	}
	return d
}

// ms converts a duration to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// secs rounds seconds to the millisecond, for "t".
func secs(d time.Duration) float64 { return math.Round(float64(d)/1e6) / 1e3 }

func rate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(n)/d.Seconds()*100) / 100
}

// sleeper is a precise sleep for the load generator's send schedule.
type sleeper interface {
	sleep(d time.Duration)
	close()
}

type goSleeper struct{ t *time.Timer }

func newGoSleeper() sleeper { return &goSleeper{t: time.NewTimer(time.Hour)} }

func (s *goSleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	s.t.Reset(d)
	<-s.t.C
}

func (s *goSleeper) close() { s.t.Stop() }

// tickLoop calls fn every interval until ctx is done, with the time since
// start and the length of the interval just ended.
func tickLoop(done <-chan struct{}, every time.Duration, start time.Time, fn func(now, dt time.Duration)) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	last := time.Duration(0)
	for {
		select {
		case <-done:
			return
		case <-tk.C:
			now := time.Since(start)
			fn(now, now-last)
			last = now
		}
	}
}
