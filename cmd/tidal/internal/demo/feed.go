package demo

import (
	"io"
	"sync"

	"github.com/tidalqos/tidal/internal/workload"
)

// lineFeed keeps the latest interval line and the final line of one workload's report stream.
type lineFeed[T any] struct {
	isFinal func(T) bool
	done    chan struct{} // closed when the final line arrived

	mu     sync.Mutex
	latest T
	have   bool
	final  T
	ended  bool // the final line arrived
	err    error
}

func newLineFeed[T any](isFinal func(T) bool) *lineFeed[T] {
	return &lineFeed[T]{isFinal: isFinal, done: make(chan struct{})}
}

// read decodes lines from r until it ends (the child's goroutine calls it).
func (f *lineFeed[T]) read(r io.Reader) {
	err := workload.DecodeLines(r, func(l T) error { f.add(l); return nil })
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *lineFeed[T]) add(l T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.isFinal(l) {
		f.latest, f.have = l, true
		return
	}
	if !f.ended {
		f.final, f.ended = l, true
		close(f.done)
	}
}

func (f *lineFeed[T]) Latest() (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, f.have
}

func (f *lineFeed[T]) Final() (T, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.final, f.ended, f.err
}
