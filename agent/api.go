package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/agent/source/standalone"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/reporter"
)

// The local API, on a root-only unix socket:
//
//	POST   /v1/workloads        AdmitRequest -> reporter.Workload
//	DELETE /v1/workloads/{name}
//	GET    /v1/status           -> reporter.Status
//
// Errors are {"error": "..."} with a 4xx status for requests the caller can fix.

type peerKey struct{}

// peer credentials of a unix-socket connection, taken at accept time.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, cred)
}

func (a *Agent) apiServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/workloads", a.handleAdmit)
	mux.HandleFunc("DELETE /v1/workloads/{name}", a.handleRelease)
	mux.HandleFunc("GET /v1/status", a.handleStatus)
	return &http.Server{Handler: rootOnly(mux), ConnContext: connContext, ReadHeaderTimeout: 5 * time.Second}
}

// rootOnly refuses callers that are not root, on top of the socket's 0600 mode.
func rootOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, _ := r.Context().Value(peerKey{}).(*unix.Ucred)
		if cred == nil || cred.Uid != 0 {
			writeError(w, http.StatusForbidden, "the tidal agent API is for root only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) handleAdmit(w http.ResponseWriter, r *http.Request) {
	var req AdmitRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "admit request body: "+err.Error())
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		// One request, one object: what follows it would be silently dropped (FuzzAdmitRequest).
		writeError(w, http.StatusBadRequest, "admit request body: unexpected data after the request: want one JSON object")
		return
	}
	cred, _ := r.Context().Value(peerKey{}).(*unix.Ucred)
	peer := 0
	if cred != nil {
		peer = int(cred.Pid)
	}
	wl, err := a.Admit(req, peer)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, wl)
}

// AdmitRequest asks the agent to manage a process as a workload (`tidal run`).
type AdmitRequest = standalone.AdmitRequest

// Admit has the standalone source manage a process (see standalone.Source.Admit).
func (a *Agent) Admit(req AdmitRequest, peerPID int) (reporter.Workload, error) {
	r, err := a.standalone.Admit(req, peerPID)
	if err != nil {
		return reporter.Workload{}, err
	}
	return workloadStatus(r), nil
}

// Release forgets a workload whose processes have exited.
func (a *Agent) Release(name string) error { return a.standalone.Release(name) }

func (a *Agent) handleRelease(w http.ResponseWriter, r *http.Request) {
	if err := a.standalone.Release(r.PathValue("name")); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeErr(w http.ResponseWriter, err error) {
	var re *standalone.RequestError
	if errors.As(err, &re) {
		writeError(w, re.Status, re.Msg)
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Status reports pools, workloads, lending and recent actions.
func (a *Agent) Status() reporter.Status { return a.status(true) }

// StatusSummary is Status without the workloads: what a poller that watches lending and
// actions needs, at a cost that does not grow with the workloads on the node.
func (a *Agent) StatusSummary() reporter.Status { return a.status(false) }

// handleStatus serves the status; ?workloads=false leaves the workloads out.
func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	withWorkloads := true
	switch v := r.URL.Query().Get("workloads"); v {
	case "", "true":
	case "false":
		withWorkloads = false
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter workloads=%q: want true or false", v))
		return
	}
	writeJSON(w, http.StatusOK, a.status(withWorkloads))
}

// status builds the status. The agent's lock, which the fast path needs, is held only to copy
// what the figures come from (nodeStatus); each workload's decision is taken after.
func (a *Agent) status(withWorkloads bool) reporter.Status {
	snap := a.store.Snapshot()
	s, node, satisfaction := a.nodeStatus(snap, withWorkloads)
	if !withWorkloads {
		return s
	}
	for _, r := range snap.Workloads {
		ws := workloadStatus(r)
		d := a.policy.Decide(r.Workload, node).Settings
		ws.CPUBurstMilliCPU, ws.CPUBurstPercent = max(d.CPUBurst, 0), d.CPUBurstPercent
		ws.CPULimitMilliCPU = max(d.CPUQuota, 0)
		if v, ok := satisfaction[r.Name]; ok {
			ws.CPUSatisfaction = &v
		}
		s.Workloads = append(s.Workloads, ws)
	}
	sort.Slice(s.Workloads, func(i, j int) bool { return s.Workloads[i].Name < s.Workloads[j].Name })
	return s
}

// nodeStatus is the status without its workloads and, if forWorkloads, what their entries
// need: the node the decisions see and a copy of the reclaimed workloads' CPU satisfaction.
func (a *Agent) nodeStatus(snap state.Snapshot, forWorkloads bool) (s reporter.Status, node plugins.Node, satisfaction map[string]float64) {
	gpus := a.gpuStatus()
	if gpus == nil {
		gpus = []reporter.GPU{} // an empty list, as docs/status.md says, not null
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	plan := a.writtenPlanLocked(now, snap)
	s = reporter.Status{
		Schema: reporter.StatusSchemaVersion, Node: a.cfg.NodeName, Mode: a.cfg.Mode, Time: now,
		CgroupRoot: a.cfg.Cgroup.Root, CgroupVer: a.layout.Version.String(), CPUIdle: a.idle,
		MetricsOK: a.advisor.Primed(), Lendable: a.lendableLocked(now),
		Pools: []reporter.Pool{}, Workloads: []reporter.Workload{}, GPUs: gpus,
		Actions:    append([]reporter.Action{}, a.actions...),
		SlowPasses: a.completedPasses.Load(),
	}
	if a.applyErr != nil {
		s.CgroupError = a.applyErr.Error()
	}
	s.Lease = a.leaseStatusLocked(s.Time)
	fast := a.fastPath
	s.FastPath = &fast
	mem := a.memoryViewLocked(plan.ReclaimedMemory)
	s.Memory = &mem
	if a.ioAdvisor != nil {
		io := a.ioView
		s.IO = &io
	}
	for _, np := range a.pools {
		s.Pools = append(s.Pools, reporter.Pool{
			NUMANode: np.Node, System: np.System.String(), Dedicated: np.Dedicated.String(),
			Shared: np.Shared.String(), Reclaimed: np.Reclaimed.String(), Online: np.OnlineCPUs().String(), Exclusive: np.Exclusive,
			LentMilliCPU: plan.ReclaimedMilliCPU[np.Node], OnlineMilliCPU: a.online[np.Node],
			Control: a.controlStatusLocked(np.Node, plan.ReclaimedMilliCPU[np.Node]),
		})
	}
	if forWorkloads {
		node, satisfaction = a.nodeLocked(plan, snap), maps.Clone(a.satisfaction)
	}
	return s, node, satisfaction
}

func workloadStatus(r state.Record) reporter.Workload {
	st := "running"
	if r.Evicting {
		st = "evicting"
	}
	return reporter.Workload{
		Name: r.Name, Tier: string(r.Tier), Cgroup: r.Cgroup, PIDs: append([]int{}, r.PIDs...),
		CPUs: r.DedicatedCPUs.String(), ReclaimPriority: r.ReclaimPriority, MilliCPU: r.UsedMilliCPU,
		MemoryBytes: r.MemoryUsage, Started: r.Started, State: st,
		GPUs: r.GPUs, Env: gpuEnv(r.Workload), Queue: r.Queue,
	}
}

// Client talks to a running agent over its socket.
type Client struct {
	Socket string
	http   *http.Client
	// ctx ends its requests early (Ctrl-C on a command waiting for a hung agent); nil: none.
	ctx context.Context
}

// WithContext returns a copy of c whose requests end when ctx does.
func (c *Client) WithContext(ctx context.Context) *Client {
	c2 := *c
	c2.ctx = ctx
	return &c2
}

// RefusedError is the agent's answer to a request it refused: the HTTP status and why.
type RefusedError struct {
	Status int
	Msg    string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("agent refused (%d %s): %s", e.Status, http.StatusText(e.Status), e.Msg)
}

// ErrNoAgent means nothing answers on the socket.
var ErrNoAgent = errors.New("no tidal agent is running")

// NewClient returns a client for the agent at socket.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

func (c *Client) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://tidal"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		switch {
		case errors.As(err, &op) && op.Op == "dial" && errors.Is(op.Err, syscall.EACCES):
			// The socket is root's (0600): an agent may well be running.
			return fmt.Errorf("cannot reach the tidal agent at %s: permission denied (its socket is root's: run as root)", c.Socket)
		case errors.As(err, &op) && op.Op == "dial":
			return fmt.Errorf("%w at %s (start one with `tidal agent`): %v", ErrNoAgent, c.Socket, op.Err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return &RefusedError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Admit asks the agent to manage a process.
func (c *Client) Admit(req AdmitRequest) (reporter.Workload, error) {
	var w reporter.Workload
	return w, c.do(http.MethodPost, "/v1/workloads", req, &w)
}

// Release tells the agent a workload has exited.
func (c *Client) Release(name string) error {
	return c.do(http.MethodDelete, "/v1/workloads/"+name, nil, nil)
}

// Status fetches the agent's status.
func (c *Client) Status() (reporter.Status, error) {
	var s reporter.Status
	return s, c.do(http.MethodGet, "/v1/status", nil, &s)
}

// StatusSummary fetches the agent's status without the workloads.
func (c *Client) StatusSummary() (reporter.Status, error) {
	var s reporter.Status
	return s, c.do(http.MethodGet, "/v1/status?workloads=false", nil, &s)
}
