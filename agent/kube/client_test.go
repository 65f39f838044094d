package kube

import (
	"bytes"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// broadcasterLoops counts the goroutines of event broadcasters: the one a Client starts in
// NewClient, whether it runs or not. Counted by their creator, which a goroutine's trace
// names whether it has started yet or not.
func broadcasterLoops() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("created by k8s.io/apimachinery/pkg/watch.NewLongQueueBroadcaster"))
}

// A client that never runs (the agent's start failed after making it) leaves no goroutine
// behind once closed, and closing twice is safe.
func TestClosedClientStopsItsEventBroadcaster(t *testing.T) {
	before := broadcasterLoops()
	c, err := NewClient(&rest.Config{Host: "http://127.0.0.1:1"}, "node-1", "tidal-system/tidal-tier-policy", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := broadcasterLoops(); got != before+1 {
		t.Fatalf("%d broadcaster goroutines after NewClient, want %d", got, before+1)
	}
	c.Close()
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for broadcasterLoops() != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d broadcaster goroutines 5 s after Close, want %d", broadcasterLoops(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
