package asynclog

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter holds every write until its gate is closed (a log whose reader has stalled),
// then keeps what was written.
type gatedWriter struct {
	gate chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *gatedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func newGated() *gatedWriter { return &gatedWriter{gate: make(chan struct{})} }

// logAll logs n records and says whether that returned within 10 s.
func logAll(log *slog.Logger, n int) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			log.Info("line", "i", i)
		}
	}()
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// A stalled reader holds no caller: what does not fit the queue is dropped, counted, and the
// count logged once the reader is back; what was kept is written in order.
func TestStalledReaderHoldsNoCaller(t *testing.T) {
	w := newGated()
	l := New(slog.NewTextHandler(w, nil), 16)
	const n = 200
	if !logAll(l.Logger(), n) {
		close(w.gate)
		t.Fatal("logging waited on a stalled reader")
	}
	if l.Dropped() == 0 {
		t.Error("nothing counted as dropped with 200 records against a queue of 16")
	}
	close(w.gate)
	l.Close(10 * time.Second)

	out := w.String()
	var kept []int
	for _, m := range regexp.MustCompile(`msg=line i=(\d+)`).FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[1])
		kept = append(kept, i)
	}
	for k := 1; k < len(kept); k++ {
		if kept[k] <= kept[k-1] {
			t.Fatalf("records out of order: %v", kept)
		}
	}
	m := regexp.MustCompile(`level=WARN msg="log records dropped: the log's reader was too slow" dropped=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no count of dropped records in:\n%s", out)
	}
	dropped, _ := strconv.Atoi(m[1])
	if len(kept)+dropped != n {
		t.Errorf("%d records written and %d counted dropped, want %d in all", len(kept), dropped, n)
	}
	if len(kept) < 16 {
		t.Errorf("%d records written, want at least the queue's 16", len(kept))
	}
}

// Records keep their logger's attributes and groups, and what is queued at Close is written
// before it returns; after it, records are written at once.
func TestCloseWritesWhatIsQueued(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.NewTextHandler(&buf, nil), 64)
	log := l.Logger().With("node", "n1").WithGroup("cut")
	for i := range 10 {
		log.Info("action", "i", i)
	}
	l.Close(10 * time.Second)
	log.Info("after close", "i", 10)
	out := buf.String()
	for i := range 11 {
		if !strings.Contains(out, fmt.Sprintf("node=n1 cut.i=%d", i)) {
			t.Errorf("record %d missing or without its attributes:\n%s", i, out)
		}
	}
	if strings.Contains(out, "dropped") {
		t.Errorf("records dropped with room in the queue:\n%s", out)
	}
}

// Close returns after its timeout while the writer is stuck: a process stops even if its log
// never drains.
func TestCloseGivesUpOnAStuckWriter(t *testing.T) {
	w := newGated()
	defer close(w.gate)
	l := New(slog.NewTextHandler(w, nil), 4)
	l.Logger().Info("stuck")
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.Close(50 * time.Millisecond)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited on a stuck writer past its timeout")
	}
}

// Levels below the handler's are not queued at all.
func TestLevelsFollowTheHandler(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), 4)
	l.Logger().Info("quiet")
	l.Logger().Warn("loud")
	l.Close(10 * time.Second)
	if out := buf.String(); strings.Contains(out, "quiet") || !strings.Contains(out, "loud") {
		t.Errorf("output %q, want the warning only", out)
	}
}
