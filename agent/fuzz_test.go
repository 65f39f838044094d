package agent

// Fuzz targets for what the agent reads from outside: its checkpoint file, the cgroup parent a
// runtime hook names, and its local API's request bodies. They sit in a file of their own so
// they move with the code they exercise. scripts/fuzz.sh runs each for a bounded time.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
)

// FuzzCheckpoint: any bytes in the state folder's checkpoint either load or give an error
// naming the file; what loads saves and loads back the same.
func FuzzCheckpoint(f *testing.F) {
	seedDir := f.TempDir()
	ws := []plugins.Workload{
		{Name: "db", Tier: qos.Dedicated, Cgroup: "tidal/dedicated/db", DedicatedCPUs: cpuset.New(2, 3), NUMABinding: true, Started: time.Unix(100, 0).UTC()},
		{Name: "batch", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/batch", DedicatedCPUs: cpuset.New(), ReclaimPriority: -3,
			MemoryLimit: 1 << 30, MilliCPU: 500, Started: time.Unix(200, 0).UTC(), GPUs: []string{"GPU-1"}, Queue: "team-a"},
		{Name: "default/web", Tier: qos.Shared, Cgroup: "kubepods/burstable/pod1", DedicatedCPUs: cpuset.New(), KubeletOwned: true, KubeletCPUs: true},
	}
	if err := saveCheckpoint(seedDir, ws); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(seedDir, checkpointName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2]) // torn
	f.Add(bytes.Replace(good, []byte(`"2-3"`), []byte(`"0-3"`), 1))
	f.Add([]byte(`{"version":1,"workloads":[],"checksum":"4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, checkpointName)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := loadCheckpoint(dir)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error does not name the file: %v", err)
			}
			if got != nil {
				t.Fatalf("error %v with workloads %v", err, got)
			}
			return
		}
		for _, w := range got {
			// A loaded workload's cpus are a valid set (String parses back to the same).
			back, err := cpuset.Parse(w.DedicatedCPUs.String())
			if err != nil || !back.Equals(w.DedicatedCPUs) {
				t.Fatalf("workload %q: cpus %q do not parse back: %v", w.Name, w.DedicatedCPUs, err)
			}
		}
		dir2 := t.TempDir()
		if err := saveCheckpoint(dir2, got); err != nil {
			t.Fatalf("save what loaded: %v", err)
		}
		again, err := loadCheckpoint(dir2)
		if err != nil {
			t.Fatalf("load what was saved: %v", err)
		}
		if !sameWorkloads(got, again) {
			t.Fatalf("round trip changed the workloads:\n got %+v\nwant %+v", again, got)
		}
	})
}

func sameWorkloads(a, b []plugins.Workload) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Started.Equal(y.Started) || !x.DedicatedCPUs.Equals(y.DedicatedCPUs) {
			return false
		}
		x.Started, y.Started = time.Time{}, time.Time{}
		x.DedicatedCPUs, y.DedicatedCPUs = cpuset.New(), cpuset.New()
		if len(x.GPUs) == 0 && len(y.GPUs) == 0 {
			x.GPUs, y.GPUs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// FuzzCgroupOfParent: whatever cgroup parent a runtime hook names, the path the agent makes of
// it is relative, clean and stays inside each hierarchy (no ".." climbing out of it).
func FuzzCgroupOfParent(f *testing.F) {
	for _, s := range []string{
		"/kubepods/besteffort/pod1234", "kubepods-besteffort-pod12_34.slice", "kubepods-pod12_34.slice",
		"/tidal-test-ab/kubepods/burstable/p1", "kubepods.slice/kubepods-burstable.slice", "", "/", "-.slice",
		"../../etc", "kubepods/../../x", "a--b.slice", "..slice", "/..", ".",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, parent string) {
		got := cgroupOfParent(parent)
		if got == "" {
			return
		}
		if strings.HasPrefix(got, "/") {
			t.Fatalf("cgroupOfParent(%q) = %q: absolute", parent, got)
		}
		if path.Clean(got) != got {
			t.Fatalf("cgroupOfParent(%q) = %q: not clean (%q)", parent, got, path.Clean(got))
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." || el == "." {
				t.Fatalf("cgroupOfParent(%q) = %q: climbs out of the hierarchy", parent, got)
			}
		}
	})
}

// FuzzAdmitRequest sends any body to the local API's POST /v1/workloads of a real agent (own
// cgroup root, not running its loops). The caller is a sleeping child process, so the only pid
// the API may accept is that child's. Every answer is JSON with the documented status codes;
// a refusal says why; an admission names the workload asked for and releases cleanly.
func FuzzAdmitRequest(f *testing.F) {
	layout := isolationtest.Layout(f)
	cfg := config.Default()
	cfg.Cgroup.Root = isolationtest.RootName(f, layout)
	dir := f.TempDir()
	cfg.StateDir, cfg.SocketPath = filepath.Join(dir, "state"), filepath.Join(dir, "sock")
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
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
