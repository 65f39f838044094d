package arbiter

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderElection elects the one replica that decides, with client-go's leader election on a
// coordination.k8s.io Lease. It is the server's Leadership.
//
// A replica leads from when OnLead has returned (Server.Lead: the leases restored) until it
// stops renewing the Lease. Leading is fenced on the renewals themselves, not only on
// client-go's callback: it turns false as soon as the last successful renewal is RenewDeadline
// old, which is before any other replica may take over (LeaseDuration after that renewal), so
// two replicas never decide at the same time (clocks running at the same rate assumed, as
// client-go does). A replica that lost the Lease campaigns again.
type LeaderElection struct {
	Lock          resourcelock.Interface
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// OnLead is called each time this replica starts leading, before Leading turns true.
	OnLead func() error
	// OnRole, when set, is told each time Leading turns true and each time a term ends.
	OnRole func(leading bool)
	Log    *slog.Logger

	le atomic.Pointer[leaderelection.LeaderElector]

	mu      sync.Mutex
	leading bool
}

// Leading implements Leadership.
func (e *LeaderElection) Leading() bool {
	e.mu.Lock()
	leading := e.leading
	e.mu.Unlock()
	le := e.le.Load()
	// Check(d) fails once the last renewal is more than LeaseDuration+d old.
	return leading && le != nil && le.IsLeader() && le.Check(e.RenewDeadline-e.LeaseDuration) == nil
}

// Leader implements Leadership.
func (e *LeaderElection) Leader() string {
	if le := e.le.Load(); le != nil {
		return le.GetLeader()
	}
	return ""
}

// Identity is this replica's name in the Lease.
func (e *LeaderElection) Identity() string { return e.Lock.Identity() }

// Run campaigns, leads and campaigns again until ctx ends; then, if it leads, it releases the
// Lease so that another replica takes over at once. Cancel ctx only after the last write
// the leader owes (the final save).
func (e *LeaderElection) Run(ctx context.Context) error {
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// client-go logs through the context's logger.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(log.With("component", "leader-election").Handler()))
	for ctx.Err() == nil {
		// OnStartedLeading runs on a goroutine of client-go's: it only hands the term over, so
		// that OnLead runs here, one term at a time.
		started := make(chan context.Context, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            e.Lock,
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.Lock.Describe(),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) { started <- term },
				OnStoppedLeading: e.stop,
			},
		})
		if err != nil {
			return err
		}
		e.le.Store(le)
		done := make(chan struct{})
		go func() {
			defer close(done)
			le.Run(ctx)
		}()
		select {
		case term := <-started:
			if e.start(term, log) && e.OnRole != nil {
				e.OnRole(true)
			}
			<-done
			e.stop()
			if e.OnRole != nil {
				e.OnRole(false)
			}
		case <-done:
			e.stop()
		}
		if ctx.Err() == nil {
			log.Warn("lost the leader Lease: campaigning again", "lease", e.Lock.Describe())
		}
	}
	return nil
}

// start begins a term; it reports whether this replica leads (the term may have ended while
// OnLead ran).
func (e *LeaderElection) start(term context.Context, log *slog.Logger) bool {
	if e.OnLead != nil {
		if err := e.OnLead(); err != nil {
			log.Error("starting to lead", "err", err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// client-go ends the term (cancels it) before it calls OnStoppedLeading: a term that ended
	// while OnLead ran is not led.
	if term.Err() != nil {
		return false
	}
	e.leading = true
	log.Info("leading: this replica decides", "lease", e.Lock.Describe(), "identity", e.Lock.Identity())
	return true
}

func (e *LeaderElection) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leading = false
}
