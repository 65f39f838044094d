// Package asynclog is a slog handler that writes records from a goroutine of its own, so a
// caller never waits on the log's reader. The agent logs while it holds locks its fast path
// needs (its own state, the cgroup writer), and a reader that stalls (a full pipe, a stuck
// log shipper) must hold neither. Records wait in a bounded queue, in order; while it is full,
// new records are dropped and counted, and the count is logged once the writer catches up.
package asynclog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Log owns the goroutine that writes the queued records; Close stops it.
type Log struct {
	next    slog.Handler
	queue   chan entry
	dropped atomic.Int64
	// closed is set under mu's write lock, so no record is queued once Close drains.
	mu     sync.RWMutex
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// entry is one record and the handler (with its attributes and groups) that writes it.
type entry struct {
	h slog.Handler
	r slog.Record
}

// New starts writing records handed to Logger through next, keeping up to queue of them
// while next's writer is busy.
func New(next slog.Handler, queue int) *Log {
	l := &Log{next: next, queue: make(chan entry, max(queue, 1)), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Logger logs through the queue.
func (l *Log) Logger() *slog.Logger { return slog.New(handler{log: l, next: l.next}) }

// Dropped is how many records were dropped since the count was last logged.
func (l *Log) Dropped() int64 { return l.dropped.Load() }

// Close writes what is queued, waiting at most timeout for a writer that is stuck, and stops
// the goroutine. Records logged after Close are written at once, by the caller.
func (l *Log) Close(timeout time.Duration) {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	select {
	case <-l.done:
	case <-time.After(timeout):
	}
}

func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case e := <-l.queue:
			l.write(e)
		case <-l.stop:
			for {
				select {
				case e := <-l.queue:
					l.write(e)
				default:
					return
				}
			}
		}
	}
}

func (l *Log) write(e entry) {
	_ = e.h.Handle(context.Background(), e.r)
	if n := l.dropped.Swap(0); n > 0 {
		r := slog.NewRecord(time.Now(), slog.LevelWarn, "log records dropped: the log's reader was too slow", 0)
		r.AddAttrs(slog.Int64("dropped", n))
		_ = l.next.Handle(context.Background(), r)
	}
}

// handler queues records for the Log's goroutine, keeping next (the handler with this
// logger's attributes and groups) to write them.
type handler struct {
	log  *Log
	next slog.Handler
}

func (h handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	h.log.mu.RLock()
	defer h.log.mu.RUnlock()
	if h.log.closed {
		return h.next.Handle(ctx, r)
	}
	select {
	case h.log.queue <- entry{h: h.next, r: r.Clone()}:
	default:
		h.log.dropped.Add(1)
	}
	return nil
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return handler{log: h.log, next: h.next.WithAttrs(attrs)}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{log: h.log, next: h.next.WithGroup(name)}
}
