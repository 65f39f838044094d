package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Options configure a Server. Policy and Auth are required; zero durations take the defaults.
type Options struct {
	// Policy is where the policy comes from (FilePolicy standalone).
	Policy PolicySource
	// Auth says which node a request comes from (TokenFile standalone).
	Auth Authenticator
	// Store persists leases and the last accepted policy; nil persists nothing.
	Store Store
	// LeaseTTL is how long a lease lasts without a new report (default 30s: three 10 s
	// report intervals).
	LeaseTTL time.Duration
	// NodeTimeout: a node silent for this long is dropped from the view (default 5m; at
	// least LeaseTTL). Its lease has expired long before.
	NodeTimeout time.Duration
	// MaxClockSkew is the most a report's time may differ from the arbiter's clock (default
	// 1m; negative: not checked).
	MaxClockSkew time.Duration
	// MaxReportBytes caps a report's body (default 1 MiB).
	MaxReportBytes int64
	// PollInterval is how often the policy source (and an Authenticator with a Changed
	// method, such as TokenFile) is checked for changes (default 5s).
	PollInterval time.Duration
	// PersistInterval is how often changes are saved to the Store (default 5s); a clean
	// shutdown saves too.
	PersistInterval time.Duration
	// SweepInterval is how often expired leases and silent nodes are swept (default 1s).
	SweepInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the server's logs (default: discarded).
	Logger *slog.Logger

	// NodeLabels, when set, gives the labels lending rules select a node by, in place of the
	// labels its report claims (Kubernetes: the Node object's, which an agent cannot set).
	NodeLabels NodeLabeler
	// Leadership, when set, makes the server one of several replicas of which only the leader
	// decides: followers answer 503 (reports, views, and /readyz unless FollowerReady) and
	// save nothing, and the leader restores the leases from the Store when it starts leading
	// (Lead).
	Leadership Leadership
	// FollowerReady, when set, makes /readyz answer 200 on a follower while it says true:
	// where something other than readiness routes reports to the leader (Kubernetes: a label
	// on the leader's Pod), every replica then counts as available and a rollout completes.
	FollowerReady func() bool
	// Collectors are more metrics served on /metrics (those of the Kubernetes parts).
	Collectors []prometheus.Collector
}

// NodeLabeler returns a node's labels; ok is false for a node it does not know.
type NodeLabeler interface {
	NodeLabels(node string) (labels map[string]string, ok bool)
}

// Leadership says whether this replica is the one that decides.
type Leadership interface {
	// Leading reports whether this replica leads now.
	Leading() bool
	// Leader names the leader as last seen ("" when unknown), for messages.
	Leader() string
}

// Defaults.
const (
	DefaultLeaseTTL       = 30 * time.Second
	DefaultNodeTimeout    = 5 * time.Minute
	DefaultMaxClockSkew   = time.Minute
	DefaultMaxReportBytes = 1 << 20
)

// Server is the arbiter: the HTTP JSON API over the cluster view, the policy and the store.
type Server struct {
	opts    Options
	view    *View
	policy  atomic.Pointer[policyState]
	metrics *metrics
	handler http.Handler
	log     *slog.Logger

	saveMu       sync.Mutex // serializes saves
	savedChanges uint64     // view changes in the last save (saveMu)
	policyDirty  atomic.Bool
}

// policyState is the policy in force and when it was accepted.
type policyState struct {
	*Policy
	accepted time.Time
}

// reloader is implemented by parts that can be read again when they change (TokenFile).
type reloader interface {
	Changed() bool
	Reload() error
}

// NewServer builds a server: it loads the saved state (leases still within their expiry are
// served again), then the policy. When the policy source fails but a policy was saved, the
// saved one is used and the error is logged; with neither, NewServer fails.
func NewServer(opts Options) (*Server, error) {
	if opts.Policy == nil || opts.Auth == nil {
		return nil, errors.New("arbiter: Options.Policy and Options.Auth are required")
	}
	setDefault(&opts.LeaseTTL, DefaultLeaseTTL)
	setDefault(&opts.NodeTimeout, DefaultNodeTimeout)
	setDefault(&opts.MaxClockSkew, DefaultMaxClockSkew)
	setDefault(&opts.MaxReportBytes, DefaultMaxReportBytes)
	setDefault(&opts.PollInterval, 5*time.Second)
	setDefault(&opts.PersistInterval, 5*time.Second)
	setDefault(&opts.SweepInterval, time.Second)
	if opts.NodeTimeout < opts.LeaseTTL {
		return nil, fmt.Errorf("arbiter: node timeout %v is shorter than the lease TTL %v", opts.NodeTimeout, opts.LeaseTTL)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, view: NewView(), log: opts.Logger}
	now := s.now()

	var saved *State
	// A replica under leader election loads the leases when it starts leading (Lead): what
	// the Store holds now would be stale by then.
	if opts.Store != nil && opts.Leadership == nil {
		var err error
		if saved, err = opts.Store.Load(); err != nil {
			return nil, err
		}
	}
	if saved != nil {
		s.view.Restore(saved.Leases, now, opts.NodeTimeout)
		_, s.savedChanges = s.view.Snapshot()
		s.log.Info("restored saved state", "nodes", s.view.Len(), "saved", saved.SavedAt)
	}

	p, err := opts.Policy.Load()
	switch {
	case err == nil:
		s.policy.Store(&policyState{Policy: p, accepted: now})
		if saved == nil || saved.Policy == nil || saved.Policy.YAML != string(p.Raw) {
			s.policyDirty.Store(true)
		}
	case saved != nil && saved.Policy != nil:
		sp, perr := ParsePolicy(saved.Policy.Source, []byte(saved.Policy.YAML))
		if perr != nil {
			return nil, fmt.Errorf("%w\n(and the saved policy does not parse either: %v)", err, perr)
		}
		s.policy.Store(&policyState{Policy: sp, accepted: saved.Policy.Accepted})
		s.log.Error("the policy does not load: serving the last accepted policy", "accepted", saved.Policy.Accepted, "err", err)
	default:
		return nil, err
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	return s, nil
}

func setDefault[T int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// now is the arbiter's clock, in UTC so that answers do not depend on the host's zone.
func (s *Server) now() time.Time { return s.opts.Now().UTC() }

// View returns the cluster view.
func (s *Server) View() *View { return s.view }

// Policy returns the policy in force.
func (s *Server) Policy() *Policy { return s.policy.Load().Policy }

// leading reports whether this server decides: always, without leader election.
func (s *Server) leading() bool { return s.opts.Leadership == nil || s.opts.Leadership.Leading() }

// Lead is called when this replica becomes the leader. It replaces the view with the leases
// in the Store (those the previous leader saved), so that renewals keep their generations and
// GPUs. On error the view starts empty and fills with the next reports.
func (s *Server) Lead() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	var leases []SavedLease
	var err error
	if s.opts.Store != nil {
		var st *State
		if st, err = s.opts.Store.Load(); err == nil && st != nil {
			leases = st.Leases
		}
	}
	s.view.Restore(leases, s.now(), s.opts.NodeTimeout)
	s.savedChanges = s.view.Changes()
	if err != nil {
		return fmt.Errorf("restoring leases: %w", err)
	}
	s.log.Info("leading: restored the saved leases", "nodes", s.view.Len())
	return nil
}

// Reload loads the policy from its source again. On error the policy in force stays and the
// error (every problem, with file:line) is returned.
func (s *Server) Reload() error {
	p, err := s.opts.Policy.Load()
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.log.Error("policy rejected: keeping the policy in force", "err", err)
		return err
	}
	old := s.policy.Swap(&policyState{Policy: p, accepted: s.now()})
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.policyDirty.Store(true)
	s.log.Info("policy loaded", "source", p.Source, "queues", len(p.Queues), "rules", len(p.Rules),
		"changed", old == nil || old.Digest != p.Digest)
	return nil
}

// Run runs the background work until ctx ends: sweeping expired leases and silent nodes,
// polling the policy (and tokens) for changes, saving the state. When ctx ends it saves once
// more and returns.
func (s *Server) Run(ctx context.Context) error {
	sweep := time.NewTicker(s.opts.SweepInterval)
	defer sweep.Stop()
	poll := time.NewTicker(s.opts.PollInterval)
	defer poll.Stop()
	persist := time.NewTicker(s.opts.PersistInterval)
	defer persist.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.Save()
		case <-sweep.C:
			if dropped := s.view.Sweep(s.now(), s.opts.NodeTimeout); len(dropped) > 0 {
				s.log.Warn("nodes stopped reporting: dropped", "nodes", len(dropped), "first", dropped[0], "timeout", s.opts.NodeTimeout)
			}
		case <-poll.C:
			if s.opts.Policy.Changed() {
				_ = s.Reload() // logged; the old policy stays
			}
			if r, ok := s.opts.Auth.(reloader); ok && r.Changed() {
				if err := r.Reload(); err != nil {
					s.log.Error("tokens rejected: keeping the tokens in use", "err", err)
				} else {
					s.log.Info("tokens reloaded")
				}
			}
		case <-persist.C:
			if err := s.Save(); err != nil {
				s.log.Error("saving state", "err", err)
			}
		}
	}
}

// Save writes the state to the Store when it changed since the last save.
func (s *Server) Save() error {
	if s.opts.Store == nil || !s.leading() {
		return nil
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	leases, changes := s.view.Snapshot()
	policyDirty := s.policyDirty.Swap(false)
	if changes == s.savedChanges && !policyDirty {
		return nil
	}
	ps := s.policy.Load()
	st := &State{
		Version: StateVersion,
		SavedAt: s.now(),
		Policy:  &SavedPolicy{Source: ps.Source, YAML: string(ps.Raw), Accepted: ps.accepted},
		Leases:  leases,
	}
	if err := s.opts.Store.Save(st); err != nil {
		s.metrics.saves.WithLabelValues("failure").Inc()
		if policyDirty {
			s.policyDirty.Store(true)
		}
		return err
	}
	s.metrics.saves.WithLabelValues("success").Inc()
	s.savedChanges = changes
	return nil
}

// Serve serves the API on ln and runs the background work (Run) until ctx ends; then it stops
// accepting requests, lets those in flight finish (up to 10 s), saves the state and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// The background work outlives the HTTP server by a little: the final save must come after
	// the last request.
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	loopDone := make(chan error, 1)
	go func() { loopDone <- s.Run(loopCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- hs.Serve(ln) }()

	var err error
	select {
	case <-ctx.Done():
		shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = hs.Shutdown(shutCtx)
		cancel()
		<-serveDone
	case err = <-serveDone:
	}
	stopLoop()
	if saveErr := <-loopDone; err == nil {
		err = saveErr
	}
	return err
}

// Handler returns the HTTP API (for tests or to mount elsewhere; Serve uses it).
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reports", s.handleReport)
	mux.HandleFunc("GET /v1/nodes", s.authed(s.handleNodes))
	mux.HandleFunc("GET /v1/nodes/{name}", s.authed(s.handleNode))
	mux.HandleFunc("GET /v1/queues", s.authed(s.handleQueues))
	mux.HandleFunc("GET /v1/queues/{name}", s.authed(s.handleQueue))
	mux.HandleFunc("GET /v1/rules", s.authed(s.handleRules))
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return recoverer(s.log, mux)
}

// recoverer answers 500 instead of dropping the connection should a handler panic.
func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("handler panic", "path", r.URL.Path, "panic", v)
				writeError(w, http.StatusInternalServerError, arbiterapi.FieldErrors{{Msg: "internal error"}})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// handleReport is POST /v1/reports: authenticate, decode, check the node, validate, decide.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	result := s.report(w, r)
	s.metrics.reports.WithLabelValues(result).Inc()
	s.metrics.reportTime.Observe(time.Since(start).Seconds())
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) string {
	// Before authenticating: a follower spends no TokenReview on a report it cannot decide.
	if !s.leading() {
		s.writeNotLeader(w)
		return resultNotLeader
	}
	node, err := s.opts.Auth.Authenticate(r)
	if err != nil {
		return writeAuthError(w, err)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, arbiterapi.FieldErrors{{Msg: fmt.Sprintf("Content-Type %q: want application/json", yamlconf.Clip(ct))}})
			return resultBadMediaType
		}
	}
	report, err := arbiterapi.DecodeReport(http.MaxBytesReader(w, r.Body, s.opts.MaxReportBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, arbiterapi.FieldErrors{{Msg: fmt.Sprintf("the report is larger than %d bytes", tooLarge.Limit)}})
			return resultTooLarge
		}
		writeError(w, http.StatusBadRequest, asFieldErrors(err))
		return resultInvalid
	}
	if report.Node != node {
		writeError(w, http.StatusForbidden, arbiterapi.FieldErrors{{Field: "node", Msg: fmt.Sprintf("%q: these credentials are bound to node %q", yamlconf.Clip(report.Node), node)}})
		return resultForbidden
	}
	now := s.now()
	if err := report.Validate(now, s.opts.MaxClockSkew); err != nil {
		writeError(w, http.StatusBadRequest, asFieldErrors(err))
		return resultInvalid
	}
	if s.opts.NodeLabels != nil {
		labels, ok := s.opts.NodeLabels.NodeLabels(node)
		if !ok {
			writeError(w, http.StatusForbidden, arbiterapi.FieldErrors{{Field: "node", Msg: fmt.Sprintf("%q has no Node object: lending rules select nodes by their Node's labels", node)}})
			return resultForbidden
		}
		// The view keeps the report: a copy, since the labeler's maps are shared.
		report.Labels = maps.Clone(labels)
	}
	// Again at the decision: authenticating and reading the body can take longer than this
	// replica had left of its leadership, and two replicas must never decide at once.
	if !s.leading() {
		s.writeNotLeader(w)
		return resultNotLeader
	}
	_, lease := s.view.Accept(s.Policy(), now, report, s.opts.LeaseTTL)
	writeRawJSON(w, http.StatusOK, lease)
	return resultAccepted
}

func asFieldErrors(err error) arbiterapi.FieldErrors {
	var fe arbiterapi.FieldErrors
	if errors.As(err, &fe) {
		return fe
	}
	return arbiterapi.FieldErrors{{Msg: err.Error()}}
}

// authed lets a request through with any valid credentials, on the leader only: a
// follower's view is empty or stale.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.leading() {
			s.writeNotLeader(w)
			return
		}
		if _, err := s.opts.Auth.Authenticate(r); err != nil {
			writeAuthError(w, err)
			return
		}
		h(w, r)
	}
}

// writeAuthError answers a failed authentication: 503 when the credentials could not be
// checked (the API server unreachable), 401 otherwise. It returns the report result.
func writeAuthError(w http.ResponseWriter, err error) string {
	if errors.Is(err, ErrAuthUnavailable) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, arbiterapi.FieldErrors{{Msg: err.Error()}})
		return resultAuthUnavailable
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="tidal-arbiter"`)
	writeError(w, http.StatusUnauthorized, arbiterapi.FieldErrors{{Msg: err.Error()}})
	return resultUnauthenticated
}

// writeNotLeader answers 503 on a follower.
func (s *Server) writeNotLeader(w http.ResponseWriter) {
	leader := s.opts.Leadership.Leader()
	if leader == "" {
		leader = "not known yet"
	}
	w.Header().Set("Retry-After", "2")
	// An agent's next report must not come back here on its kept-alive connection: the
	// Service sends a new one to the leader.
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusServiceUnavailable, arbiterapi.FieldErrors{{Msg: fmt.Sprintf(
		"this arbiter replica is not the leader (the leader is %s): only the leader decides; the Service routes to it once it is ready", yamlconf.Clip(leader))}})
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"nodes": s.view.Nodes(s.now())})
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	n, ok := s.view.Node(r.PathValue("name"), s.now())
	if !ok {
		writeError(w, http.StatusNotFound, arbiterapi.FieldErrors{{Field: "name", Msg: fmt.Sprintf("no node %q in the view", yamlconf.Clip(r.PathValue("name")))}})
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	withNodes := r.URL.Query().Get("nodes") != "false"
	writeJSON(w, http.StatusOK, map[string]any{"queues": s.view.Queues(s.Policy(), s.now(), withNodes)})
}

func (s *Server) handleQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, q := range s.view.Queues(s.Policy(), s.now(), true) {
		if q.Name == name {
			writeJSON(w, http.StatusOK, q)
			return
		}
	}
	writeError(w, http.StatusNotFound, arbiterapi.FieldErrors{{Field: "name", Msg: fmt.Sprintf("no queue %q in the policy or the leases", yamlconf.Clip(name))}})
}

// PolicyInfo describes the policy in force in GET /v1/rules.
type PolicyInfo struct {
	Source      string    `json:"source"`
	SHA256      string    `json:"sha256"`
	Accepted    time.Time `json:"accepted"`
	OwnerLabel  string    `json:"ownerLabel"`
	SharedQueue string    `json:"sharedQueue"`
}

func (s *Server) handleRules(w http.ResponseWriter, r *http.Request) {
	ps := s.policy.Load()
	writeJSON(w, http.StatusOK, map[string]any{
		"policy": PolicyInfo{Source: ps.Source, SHA256: ps.Digest, Accepted: ps.accepted, OwnerLabel: ps.OwnerLabel, SharedQueue: ps.SharedQueue},
		"rules":  s.view.Rules(ps.Policy, s.now()),
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "nodes": s.view.Len(), "policySHA256": s.policy.Load().Digest})
}

// handleReady is GET /readyz: 200 on the replica that decides; on a follower 503, so that a
// Service routes to the leader only, or 200 where FollowerReady says so.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.leading():
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "leader": true})
	case s.opts.FollowerReady != nil && s.opts.FollowerReady():
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "leader": false})
	default:
		s.writeNotLeader(w)
	}
}

func writeError(w http.ResponseWriter, code int, errs arbiterapi.FieldErrors) {
	writeJSON(w, code, errs.Body())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"error":"internal error: cannot encode the answer"}`)
	}
	writeRawJSON(w, code, data)
}

func writeRawJSON(w http.ResponseWriter, code int, data []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(code)
	w.Write(data)
}
