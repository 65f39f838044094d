package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// LeaseAnnotation is the Node annotation that holds the node's lease (its JSON, as the agent
// got it) as of the lease's last change.
const LeaseAnnotation = "tidalqos.io/lease"

// NodeStore keeps the arbiter's state on the Node objects, so that in Kubernetes the arbiter
// needs no store of its own. It is the Store and the NodeLabeler of the kubernetes mode:
//
//   - Save writes a node's lease into its tidalqos.io/lease annotation only when the lease's
//     generation changed (what is lent changed), never for a mere renewal: a steady cluster
//     writes nothing, and each window opening or closing writes each node it selects once.
//     Writes go out in the background (Run), a few at a time; the newest lease of a node
//     replaces one still waiting.
//   - Load reads every node's annotation back, for a new leader (Server.Lead). The restored
//     leases keep their generations and GPUs on the next report; as renewals are not
//     written, a restored lease usually shows as expired until its node reports again, and
//     each node counts as heard from at the restore (it is dropped after nodeTimeout if it
//     stays silent).
//   - NodeLabels are the Node's labels, which lending rules select by.
//
// Only the leader writes: a write is skipped once Leading reports false.
type NodeStore struct {
	// Nodes is the informer's cache of the Node objects (*metav1.PartialObjectMetadata, keyed
	// by name, as TrimNode leaves them).
	Nodes cache.Store
	// Patch applies a JSON merge patch to a Node.
	Patch func(ctx context.Context, node string, patch []byte) error
	// Leading reports whether this replica may write (the leader's).
	Leading func() bool
	// Workers is how many writes are in flight at once (default 8).
	Workers int
	Log     *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	written map[string]uint64 // the generation each node's annotation holds, as far as known
	pending map[string]pendingLease
	wake    chan struct{}

	writes *prometheus.CounterVec
}

type pendingLease struct {
	generation uint64
	json       []byte
}

// flushTimeout bounds the last writes at shutdown.
const flushTimeout = 10 * time.Second

func (s *NodeStore) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake != nil {
		return
	}
	s.wake = make(chan struct{}, 1)
	s.written = map[string]uint64{}
	s.pending = map[string]pendingLease{}
	s.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_arbiter_lease_annotation_writes_total",
		Help: "Writes of the tidalqos.io/lease Node annotation, by result (success, failure: retried with the next save).",
	}, []string{"result"})
	s.writes.WithLabelValues("success")
	s.writes.WithLabelValues("failure")
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
}

// Collectors returns the store's metrics.
func (s *NodeStore) Collectors() []prometheus.Collector {
	s.init()
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidal_arbiter_lease_annotations_pending",
		Help: "Changed leases waiting to be written to their Node's annotation.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.pending))
	})
	return []prometheus.Collector{s.writes, pending}
}

func (s *NodeStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// NodeLabels implements NodeLabeler.
func (s *NodeStore) NodeLabels(node string) (map[string]string, bool) {
	obj, ok, err := s.Nodes.GetByKey(node)
	if err != nil || !ok {
		return nil, false
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, false
	}
	return m.GetLabels(), true
}

// Load implements Store: the leases in the Nodes' annotations. Annotations that do not decode
// or name another node are skipped (and logged).
func (s *NodeStore) Load() (*State, error) {
	s.init()
	now := s.now()
	st := &State{Version: StateVersion, SavedAt: now, Leases: []SavedLease{}}
	written := map[string]uint64{}
	for _, obj := range s.Nodes.List() {
		m, ok := obj.(metav1.Object)
		if !ok {
			continue
		}
		raw, ok := m.GetAnnotations()[LeaseAnnotation]
		if !ok {
			continue
		}
		var l arbiterapi.Lease
		if err := json.Unmarshal([]byte(raw), &l); err != nil || l.Node != m.GetName() {
			s.Log.Warn("ignoring a lease annotation that does not decode or names another node", "node", m.GetName(), "annotation", LeaseAnnotation, "err", err)
			continue
		}
		st.Leases = append(st.Leases, SavedLease{Received: now, Lease: l, encoded: []byte(raw)})
		written[l.Node] = l.Generation
	}
	s.mu.Lock()
	s.written = written
	clear(s.pending)
	s.mu.Unlock()
	return st, nil
}

// Save implements Store: it queues the leases whose generation differs from the node's
// annotation and returns at once; Run writes them. The policy is not saved (the ConfigMap is).
func (s *NodeStore) Save(st *State) error {
	s.init()
	s.mu.Lock()
	for _, l := range st.Leases {
		node, gen := l.Lease.Node, l.Lease.Generation
		if w, ok := s.written[node]; ok && w == gen {
			continue
		}
		if p, ok := s.pending[node]; ok && p.generation == gen {
			continue
		}
		data := l.encoded
		if data == nil {
			var err error
			if data, err = json.Marshal(l.Lease); err != nil {
				continue // plain data: cannot happen
			}
		}
		s.pending[node] = pendingLease{generation: gen, json: data}
	}
	waiting := len(s.pending) > 0
	s.mu.Unlock()
	if waiting {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Run writes queued leases until ctx ends, then writes what is still queued (for up to 10 s):
// cancel it after the server's last Save. Failed writes are tried again after retryDelay.
func (s *NodeStore) Run(ctx context.Context) {
	s.init()
	retry := time.NewTimer(retryDelay)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			s.flush(fctx)
			cancel()
			return
		case <-s.wake:
		case <-retry.C:
		}
		s.flush(ctx)
		s.mu.Lock()
		failed := len(s.pending) > 0
		s.mu.Unlock()
		if failed {
			retry.Reset(retryDelay)
		}
	}
}

// retryDelay is how long failed writes wait before they are tried again.
const retryDelay = 5 * time.Second

// flush writes what is queued now with Workers writers. A failed write is queued again unless
// a newer lease replaced it.
func (s *NodeStore) flush(ctx context.Context) {
	s.mu.Lock()
	batch := s.pending
	s.pending = map[string]pendingLease{}
	s.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if !s.Leading() {
		return // the new leader writes
	}
	type item struct {
		node string
		l    pendingLease
	}
	items := make(chan item)
	workers := s.Workers
	if workers <= 0 {
		workers = 8
	}
	var (
		wg       sync.WaitGroup
		failMu   sync.Mutex
		failures int
		firstErr error
	)
	for range min(workers, len(batch)) {
		wg.Go(func() {
			for it := range items {
				err := s.write(ctx, it.node, it.l)
				s.mu.Lock()
				switch {
				case err == nil, apierrors.IsNotFound(err): // a deleted Node has nothing to keep
					s.written[it.node] = it.l.generation
				case !errors.Is(err, errNotLeading):
					if _, newer := s.pending[it.node]; !newer {
						s.pending[it.node] = it.l
					}
				}
				s.mu.Unlock()
				if err != nil && !apierrors.IsNotFound(err) && !errors.Is(err, errNotLeading) {
					s.writes.WithLabelValues("failure").Inc()
					failMu.Lock()
					if failures++; firstErr == nil {
						firstErr = err
					}
					failMu.Unlock()
				} else if err == nil {
					s.writes.WithLabelValues("success").Inc()
				}
			}
		})
	}
	for node, l := range batch {
		items <- item{node, l}
	}
	close(items)
	wg.Wait()
	if failures > 0 {
		s.Log.Warn("writing leases to Node annotations failed; retrying with the next save", "failed", failures, "of", len(batch), "err", firstErr)
	}
}

var errNotLeading = errors.New("not leading")

func (s *NodeStore) write(ctx context.Context, node string, l pendingLease) error {
	if !s.Leading() {
		return errNotLeading
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{LeaseAnnotation: string(l.json)}}})
	if err != nil {
		return err
	}
	return s.Patch(ctx, node, patch)
}

// TrimNode is the Node informer's transform: it keeps the name, resourceVersion, labels and
// the lease annotation only, so that 10,000 cached Nodes take a few MB.
func TrimNode(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone: left as is
	}
	out := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(), Labels: m.GetLabels(),
		},
	}
	if v, ok := m.GetAnnotations()[LeaseAnnotation]; ok {
		out.Annotations = map[string]string{LeaseAnnotation: v}
	}
	return out, nil
}
