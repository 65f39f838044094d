package agent

// A fuzz target for what the agent reads from outside: its local API's request bodies (the
// checkpoint's is in agent/state, the hooks' cgroup parent in agent/source/hooks). It sits in
// a file of its own so it moves with the code it exercises. scripts/fuzz.sh runs it for a
// bounded time.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
)

// FuzzAdmitRequest sends any body to the local API's POST /v1/workloads of a real agent (own
// cgroup root, not running its loops). The caller is a sleeping child process, so the only pid
// the API may accept is that child's. Every answer is JSON with the documented status codes;
// a refusal says why; an admission names the workload asked for and releases cleanly.
func FuzzAdmitRequest(f *testing.F) {
	a := agentOnTestRoot(f)
	layout := isolationtest.Layout(f)
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid
	// The child lives in a cgroup of the test's own between requests, so an admission that
	// moved it can be undone and the workload released.
	home := isolationtest.RootName(f, layout)
	wr, err := isolation.NewWriter(layout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	if err := wr.Attach(home, pid); err != nil {
		f.Fatal(err)
	}
	h := a.apiServer().Handler
	ctx := context.WithValue(context.Background(), peerKey{}, &unix.Ucred{Pid: int32(pid), Uid: 0})

	for _, s := range []string{
		`{"name":"batch","tier":"reclaimed","pid":PID}`,
		`{"name":"web","tier":"shared","pid":PID,"memoryBytes":268435456}`,
		`{"name":"db","tier":"dedicated","cpus":1,"numaBinding":true,"pid":PID}`,
		`{"name":"q","tier":"reclaimed","queue":"team-a","reclaimPriority":-5,"gpus":0,"pid":PID,"command":["sleep","1"]}`,
		`{"name":"Bad Name","tier":"shared","pid":PID}`,
		`{"name":"x","tier":"gold","pid":PID}`,
		`{"name":"x","tier":"shared","pid":1}`,
		`{"name":"x","tier":"shared","pid":PID,"extra":1}`,
		`{"name":"x","tier":"dedicated","cpus":99999,"pid":PID}`,
		`{"name":"x","tier":"shared","pid":PID,"memoryBytes":-1}`,
		`{"name":"x","tier":"shared","pid":PID} trailing`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(strings.ReplaceAll(s, "PID", fmt.Sprint(pid))))
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/workloads", bytes.NewReader(body))
		h.ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("status %d: Content-Type %q", rec.Code, ct)
		}
		switch rec.Code {
		case http.StatusCreated:
			var w reporter.Workload
			if err := json.Unmarshal(rec.Body.Bytes(), &w); err != nil {
				t.Fatalf("201 body %q: %v", rec.Body, err)
			}
			// Undo the admission first, so a failed check below leaves nothing behind.
			if err := wr.Attach(home, pid); err != nil {
				t.Fatal(err)
			}
			del := httptest.NewRecorder()
			h.ServeHTTP(del, httptest.NewRequestWithContext(ctx, http.MethodDelete, "/v1/workloads/"+w.Name, nil))
			if del.Code != http.StatusNoContent {
				t.Fatalf("release %q: %d %s", w.Name, del.Code, del.Body)
			}
			var sent AdmitRequest
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatalf("admitted %q, which is not one JSON request: %v", body, err)
			}
			if w.Name == "" || w.Name != sent.Name || !qos.Tier(w.Tier).Valid() || len(w.PIDs) != 1 || w.PIDs[0] != pid {
				t.Fatalf("admitted %+v for request %q", w, body)
			}
		case http.StatusBadRequest, http.StatusForbidden, http.StatusConflict:
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || strings.TrimSpace(e.Error) == "" {
				t.Fatalf("%d without an error message: %q (%v)", rec.Code, rec.Body, err)
			}
		default:
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body)
		}
		if n := len(a.Status().Workloads); n != 0 {
			t.Fatalf("%d workloads left after the request", n)
		}
	})
}
