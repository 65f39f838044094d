package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/reporter"
)

// GET /v1/status of a real agent (own cgroup root, loops not running) managing two workloads:
// the full status lists them, ?workloads=false leaves them out and keeps the node's figures,
// and a query value other than true or false is refused with a message naming it.
func TestStatusWithoutWorkloads(t *testing.T) {
	a := agentOnTestRoot(t)
	for _, w := range []struct{ name, tier string }{{"web", "shared"}, {"batch", "reclaimed"}} {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if _, err := a.Admit(AdmitRequest{Name: w.name, Tier: w.tier, PID: cmd.Process.Pid}, 0); err != nil {
			t.Fatal(err)
		}
	}
	h := a.apiServer().Handler
	ctx := context.WithValue(context.Background(), peerKey{}, &unix.Ucred{Uid: 0})
	get := func(query string) (int, []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/status"+query, nil))
		return rec.Code, rec.Body.Bytes()
	}

	for _, c := range []struct {
		query     string
		workloads int
	}{{"", 2}, {"?workloads=true", 2}, {"?workloads=false", 0}} {
		code, body := get(c.query)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/status%s: %d %s", c.query, code, body)
		}
		var s reporter.Status
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("GET /v1/status%s: %v", c.query, err)
		}
		if len(s.Workloads) != c.workloads {
			t.Errorf("GET /v1/status%s: %d workloads, want %d", c.query, len(s.Workloads), c.workloads)
		}
		if len(s.Pools) == 0 || s.Node == "" || s.CgroupRoot != a.cfg.Cgroup.Root {
			t.Errorf("GET /v1/status%s: node figures missing: pools %d, node %q, root %q", c.query, len(s.Pools), s.Node, s.CgroupRoot)
		}
	}

	// Exactly true or false, as docs/status.md says (strconv's 1, t or TRUE are not).
	for _, v := range []string{"some", "1", "TRUE", "f"} {
		code, body := get("?workloads=" + v)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, `workloads="`+v+`"`) {
			t.Errorf("GET /v1/status?workloads=%s: %d %s, want 400 naming the parameter", v, code, body)
		}
	}
	// Lists are lists, empty or not: no GPUs here is "gpus": [], not null.
	if _, body := get(""); !strings.Contains(string(body), `"gpus":[]`) && !strings.Contains(string(body), `"gpus":[{`) {
		t.Errorf("GET /v1/status: gpus is neither a list of GPUs nor an empty one: %s", body)
	}
}

// /healthz answers while the slow loop ends passes and fails once it has stalled, so that a
// supervisor restarts a wedged agent; /readyz is not touched by it.
func TestHealthzFailsWhenTheSlowLoopStalls(t *testing.T) {
	a := agentOnTestRoot(t)
	health := func() (int, string) {
		rec := httptest.NewRecorder()
		a.metricsServer().Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	a.lastPass.Store(time.Now().UnixNano())
	if code, body := health(); code != http.StatusOK {
		t.Errorf("with a pass just ended: %d %q, want 200", code, body)
	}
	a.lastPass.Store(time.Now().Add(-a.stalledAfter() - time.Minute).UnixNano())
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "the slow loop has ended no pass for 3m") {
		t.Errorf("with no pass for 3 minutes: %d %q, want 503 saying how long", code, body)
	}
	a.slowPass(context.Background())
	if code, body := health(); code != http.StatusOK {
		t.Errorf("after a pass: %d %q, want 200", code, body)
	}
}
