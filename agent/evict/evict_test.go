package evict

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeCgroups is a cgroup whose processes leave on the signals they honour.
type fakeCgroups struct {
	mu      sync.Mutex
	pids    []int
	sent    []syscall.Signal
	ignores map[syscall.Signal]bool // signals the processes survive
}

func (f *fakeCgroups) Signal(_ string, sig syscall.Signal) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, sig)
	n := len(f.pids)
	if !f.ignores[sig] {
		f.pids = nil
	}
	return n, nil
}

func (f *fakeCgroups) Procs(string) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.pids...), nil
}

func (f *fakeCgroups) signals() []syscall.Signal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]syscall.Signal(nil), f.sent...)
}

func TestSignalTermFirstKillAfterGrace(t *testing.T) {
	polite := &fakeCgroups{pids: []int{1}}
	if err := (Signal{Cgroups: polite, Grace: time.Minute, Poll: time.Millisecond}).Evict(context.Background(), Victim{Cgroup: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := polite.signals(); len(got) != 2 || got[0] != syscall.SIGTERM {
		// SIGKILL to an empty cgroup is harmless; SIGTERM must come first.
		t.Errorf("signals %v, want SIGTERM first", got)
	}

	stubborn := &fakeCgroups{pids: []int{1}, ignores: map[syscall.Signal]bool{syscall.SIGTERM: true}}
	start := time.Now()
	if err := (Signal{Cgroups: stubborn, Grace: 30 * time.Millisecond, Poll: time.Millisecond}).Evict(context.Background(), Victim{Cgroup: "x"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("SIGKILL after %v, before the 30ms grace", took)
	}
	if got := stubborn.signals(); len(got) != 2 || got[1] != syscall.SIGKILL {
		t.Errorf("signals %v, want SIGTERM then SIGKILL", got)
	}
}

func TestSignalStopsWithTheAgentAndReportsStuck(t *testing.T) {
	stubborn := &fakeCgroups{pids: []int{1}, ignores: map[syscall.Signal]bool{syscall.SIGTERM: true}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (Signal{Cgroups: stubborn, Grace: time.Hour}).Evict(ctx, Victim{Cgroup: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want the context's", err)
	}
	if got := stubborn.signals(); len(got) != 1 {
		t.Errorf("signals %v: the agent stopping must not cut the grace period short", got)
	}

	unkillable := &fakeCgroups{pids: []int{1}, ignores: map[syscall.Signal]bool{syscall.SIGTERM: true, syscall.SIGKILL: true}}
	if err := (Signal{Cgroups: unkillable, Grace: time.Millisecond, Poll: time.Millisecond}).Evict(context.Background(), Victim{Cgroup: "x"}); !errors.Is(err, ErrStuck) {
		t.Errorf("err = %v, want ErrStuck", err)
	}
}
