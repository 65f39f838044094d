package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// fakeClock is an injected clock that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// tokenOf is the test token of a node.
func tokenOf(node string) string { return "token-" + node + "-0123456789abcdef" }

// testArbiter is a real arbiter serving on 127.0.0.1:0 with files in a temp dir.
type testArbiter struct {
	t      *testing.T
	dir    string
	url    string
	srv    *Server
	clock  *fakeClock
	cancel context.CancelFunc
	done   chan error
}

// night is 23:00 in Berlin: the reference rule's window is open.
func night(t *testing.T) time.Time {
	return time.Date(2026, time.June, 10, 23, 0, 0, 0, mustZone(t, "Europe/Berlin"))
}

// writeArbiterFiles writes a policy and a tokens file for nodes into dir.
func writeArbiterFiles(t *testing.T, dir string, nodes ...string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(referencePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s: %s\n", n, tokenOf(n))
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startArbiter starts an arbiter on the files in dir; tweak adjusts the options.
func startArbiter(t *testing.T, dir string, clock *fakeClock, tweak func(*Options)) *testArbiter {
	t.Helper()
	tokens, err := LoadTokenFile(filepath.Join(dir, "tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewFileStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Policy:         NewFilePolicy(filepath.Join(dir, "policy.yaml")),
		Auth:           tokens,
		Store:          store,
		LeaseTTL:       30 * time.Second,
		NodeTimeout:    5 * time.Minute,
		MaxReportBytes: 64 << 10,
		Now:            clock.Now,
	}
	if tweak != nil {
		tweak(&opts)
	}
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &testArbiter{t: t, dir: dir, url: "http://" + ln.Addr().String(), srv: srv, clock: clock, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(a.stop)
	return a
}

// stop shuts the arbiter down (saving its state) and waits for it.
func (a *testArbiter) stop() {
	if a.cancel == nil {
		return
	}
	// Connections a client dialed but never used would hold the server's graceful shutdown
	// for 5 s; close them first.
	http.DefaultClient.CloseIdleConnections()
	a.cancel()
	a.cancel = nil
	if err := <-a.done; err != nil {
		a.t.Errorf("Serve: %v", err)
	}
}

func (a *testArbiter) client(node string) *arbiterapi.Client {
	return &arbiterapi.Client{URL: a.url, Token: tokenOf(node), NodeName: node}
}

// get fetches path with node's token into out and returns the status code.
func (a *testArbiter) get(path, node string, out any) int {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.url+path, nil)
	if node != "" {
		req.Header.Set("Authorization", "Bearer "+tokenOf(node))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("GET %s: %v\n%s", path, err, data)
		}
	}
	return resp.StatusCode
}

// nodeReport is a valid report from a GPU node at the clock's time.
func (a *testArbiter) nodeReport(node string) arbiterapi.Report {
	r := gpuNode(node, map[string]string{"pool": "gpu"})
	r.Time = a.clock.Now()
	r.NUMA = []arbiterapi.NUMANode{
		{ID: 0, Capacity: arbiterapi.Resources{MilliCPU: 32000, MemoryBytes: 128 * gi, GPUs: 4}, Online: arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: 10000, MemoryBytes: 50 * gi}, Predicted: arbiterapi.Usage{MilliCPU: 15000, MemoryBytes: 60 * gi}, Utilization: 0.3},
			Lendable: arbiterapi.Lendable{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4, GPUUUIDs: []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}}},
		{ID: 1, Capacity: arbiterapi.Resources{MilliCPU: 32000, MemoryBytes: 128 * gi, GPUs: 4}, Online: arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: 10000, MemoryBytes: 50 * gi}, Predicted: arbiterapi.Usage{MilliCPU: 15000, MemoryBytes: 60 * gi}, Utilization: 0.3},
			Lendable: arbiterapi.Lendable{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4, GPUUUIDs: []string{"GPU-4", "GPU-5", "GPU-6", "GPU-7"}}},
	}
	return r
}

func TestServerReportAndViews(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a", "node-b")
	a := startArbiter(t, dir, &fakeClock{t: night(t)}, nil)

	lease, err := a.client("node-a").Report(context.Background(), a.nodeReport("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	g, ok := grantFor(lease, "queue-1")
	if !ok || g.MilliCPU != 8000 || len(g.GPUs) != 4 || lease.Node != "node-a" || lease.Generation == 0 {
		t.Fatalf("lease %+v", lease)
	}

	var nodes struct{ Nodes []NodeView }
	if code := a.get("/v1/nodes", "node-b", &nodes); code != 200 || len(nodes.Nodes) != 1 || nodes.Nodes[0].Report.Node != "node-a" {
		t.Errorf("GET /v1/nodes: %d %+v", code, nodes)
	}
	var node NodeView
	if code := a.get("/v1/nodes/node-a", "node-a", &node); code != 200 || node.Lease.Generation != lease.Generation || len(node.Report.NUMA) != 2 {
		t.Errorf("GET /v1/nodes/node-a: %d %+v", code, node)
	}
	if code := a.get("/v1/nodes/node-z", "node-a", nil); code != 404 {
		t.Errorf("GET /v1/nodes/node-z: %d", code)
	}
	var queues struct{ Queues []QueueView }
	if code := a.get("/v1/queues", "node-a", &queues); code != 200 || len(queues.Queues) != 3 || queues.Queues[1].Lent.MilliCPU != 8000 {
		t.Errorf("GET /v1/queues: %d %+v", code, queues)
	}
	var q QueueView
	if code := a.get("/v1/queues/queue-1", "node-a", &q); code != 200 || len(q.Nodes) != 1 || q.Nodes[0].Node != "node-a" {
		t.Errorf("GET /v1/queues/queue-1: %d %+v", code, q)
	}
	var rules struct {
		Policy PolicyInfo
		Rules  []RuleView
	}
	if code := a.get("/v1/rules", "node-a", &rules); code != 200 || len(rules.Rules) != 2 || !rules.Rules[0].Open || rules.Policy.SharedQueue != "best-effort" {
		t.Errorf("GET /v1/rules: %d %+v", code, rules)
	}
	for _, path := range []string{"/v1/nodes", "/v1/queues", "/v1/rules", "/v1/nodes/node-a"} {
		if code := a.get(path, "", nil); code != 401 {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
	}
	if code := a.get("/healthz", "", nil); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}

	// The lease expires when the node stops reporting.
	a.clock.Add(31 * time.Second)
	if a.get("/v1/nodes/node-a", "node-a", &node); !node.LeaseExpired || !node.Lent.IsZero() {
		t.Errorf("after the TTL: %+v", node)
	}
	if a.get("/v1/queues/queue-1", "node-a", &q); !q.Lent.IsZero() || len(q.Nodes) != 0 {
		t.Errorf("queue-1 after the TTL: %+v", q)
	}

	metrics := a.getText("/metrics")
	for _, want := range []string{
		`tidal_arbiter_reports_total{result="accepted"} 1`,
		`tidal_arbiter_report_duration_seconds_count 1`,
		`tidal_arbiter_nodes{lease="expired"} 1`,
		`tidal_arbiter_queue_lent{queue="queue-1",resource="millicpu"} 0`,
		`tidal_arbiter_queue_guaranteed{queue="queue-1",resource="gpus"} 8`,
		`tidal_arbiter_policy_rules{window="open"} 2`,
		`tidal_arbiter_policy_reloads_total{result="failure"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func (a *testArbiter) getText(path string) string {
	resp, err := http.Get(a.url + path)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// Bad tokens, forged node names and malformed bodies are refused, naming the field, and touch
// nothing.
func TestServerRefusesBadRequests(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a", "node-b")
	a := startArbiter(t, dir, &fakeClock{t: night(t)}, nil)
	before, err := a.client("node-b").Report(context.Background(), a.nodeReport("node-b"))
	if err != nil {
		t.Fatal(err)
	}

	// valid returns node-a's report as a JSON object to mutate.
	valid := func() map[string]any {
		data, _ := json.Marshal(a.nodeReport("node-a"))
		var m map[string]any
		json.Unmarshal(data, &m)
		return m
	}
	encode := func(m map[string]any) string {
		data, _ := json.Marshal(m)
		return string(data)
	}
	with := func(f func(m map[string]any)) string {
		m := valid()
		f(m)
		return encode(m)
	}
	sub := func(m map[string]any, path ...string) map[string]any {
		for _, p := range path {
			m = m[p].(map[string]any)
		}
		return m
	}
	huge := with(func(m map[string]any) {
		m["labels"] = map[string]any{"pad": strings.Repeat("x", 70<<10)}
	})

	for _, tc := range []struct {
		name        string
		method      string
		auth        string // Authorization header; "a" is node-a's bearer token
		contentType string
		body        string
		code        int
		field       string // named in the answer
		msg         string // in the answer
	}{
		{"no credentials", "POST", "", "", encode(valid()), 401, "", "no Authorization header"},
		{"unknown token", "POST", "Bearer not-a-token-of-anyone-at-all", "", encode(valid()), 401, "", "unknown token"},
		{"another node's token, slightly changed", "POST", "Bearer " + tokenOf("node-a") + "x", "", encode(valid()), 401, "", "unknown token"},
		{"basic auth", "POST", "Basic bm9kZS1hOnB3", "", encode(valid()), 401, "", "not \"Bearer TOKEN\""},
		{"forged node name", "POST", "a", "", with(func(m map[string]any) { m["node"] = "node-b" }), 403, "node", `bound to node "node-a"`},
		{"forged unknown node name", "POST", "a", "", with(func(m map[string]any) { m["node"] = "node-z" }), 403, "node", ""},
		{"empty body", "POST", "a", "", "", 400, "", "empty body"},
		{"truncated JSON", "POST", "a", "", `{"node": "node-a"`, 400, "", "ends too early"},
		{"invalid JSON", "POST", "a", "", `{"node": ]`, 400, "", "invalid JSON at byte"},
		{"not an object", "POST", "a", "", `[1, 2]`, 400, "", "got a JSON array"},
		{"trailing data", "POST", "a", "", encode(valid()) + `{}`, 400, "", "unexpected data after the report"},
		{"unknown field", "POST", "a", "", with(func(m map[string]any) { m["lendAll"] = true }), 400, "lendAll", "unknown field"},
		{"unknown nested field", "POST", "a", "", with(func(m map[string]any) { sub(m, "capacity")["cores"] = 4 }), 400, "cores", "unknown field"},
		{"negative number", "POST", "a", "", with(func(m map[string]any) { sub(m, "capacity")["milliCPU"] = -1 }), 400, "capacity.milliCPU", "is negative"},
		{"negative NUMA figure", "POST", "a", "", with(func(m map[string]any) {
			m["numa"].([]any)[1].(map[string]any)["lendable"].(map[string]any)["memoryBytes"] = -5
		}), 400, "numa[1].lendable.memoryBytes", "is negative"},
		{"string for a number", "POST", "a", "", with(func(m map[string]any) { sub(m, "lendable")["milliCPU"] = "8000" }), 400, "lendable.milliCPU", "got a JSON string: want an integer"},
		{"fraction for an integer", "POST", "a", "", with(func(m map[string]any) { sub(m, "lendable")["gpus"] = 1.5 }), 400, "lendable.gpus", "want an integer"},
		{"huge number", "POST", "a", "", strings.Replace(encode(valid()), `"milliCPU":64000`, `"milliCPU":1e300`, 1), 400, "capacity.milliCPU", ""},
		{"missing object", "POST", "a", "", with(func(m map[string]any) { delete(m, "lendable") }), 400, "lendable", "missing"},
		{"missing number", "POST", "a", "", with(func(m map[string]any) { delete(sub(m, "capacity"), "gpus") }), 400, "capacity.gpus", "missing"},
		{"missing utilization", "POST", "a", "", with(func(m map[string]any) { delete(sub(m, "online"), "utilization") }), 400, "online.utilization", "missing"},
		{"missing node", "POST", "a", "", with(func(m map[string]any) { delete(m, "node") }), 400, "node", "missing"},
		{"null node", "POST", "a", "", with(func(m map[string]any) { m["node"] = nil }), 400, "node", "missing"},
		{"missing time", "POST", "a", "", with(func(m map[string]any) { delete(m, "time") }), 400, "time", "missing"},
		{"bad time", "POST", "a", "", with(func(m map[string]any) { m["time"] = "yesterday" }), 400, "time", "not an RFC 3339 time"},
		{"clock skew", "POST", "a", "", with(func(m map[string]any) { m["time"] = night(t).Add(time.Hour).Format(time.RFC3339) }), 400, "time", "ahead of the arbiter's clock"},
		{"utilization above 1", "POST", "a", "", with(func(m map[string]any) { sub(m, "online")["utilization"] = 1.5 }), 400, "online.utilization", "out of range"},
		{"lending more than capacity", "POST", "a", "", with(func(m map[string]any) { sub(m, "lendable")["milliCPU"] = 65000 }), 400, "lendable.milliCPU", "more than capacity.milliCPU"},
		{"GPU count and UUIDs disagree", "POST", "a", "", with(func(m map[string]any) { sub(m, "lendable")["gpus"] = 7 }), 400, "lendable.gpuUUIDs", "8 UUIDs for lendable.gpus 7"},
		{"repeated GPU UUID", "POST", "a", "", with(func(m map[string]any) { sub(m, "lendable")["gpuUUIDs"].([]any)[1] = "GPU-0" }), 400, "lendable.gpuUUIDs[1]", "repeats"},
		{"NUMA GPU not lendable on the node", "POST", "a", "", with(func(m map[string]any) {
			m["numa"].([]any)[0].(map[string]any)["lendable"].(map[string]any)["gpuUUIDs"].([]any)[0] = "GPU-X"
		}), 400, "numa[0].lendable.gpuUUIDs[0]", "not in lendable.gpuUUIDs"},
		{"NUMA sums above the node", "POST", "a", "", with(func(m map[string]any) {
			m["numa"].([]any)[0].(map[string]any)["capacity"].(map[string]any)["milliCPU"] = 40000
		}), 400, "numa[*].capacity", "milliCPU sums to 72000"},
		{"duplicate NUMA id", "POST", "a", "", with(func(m map[string]any) { m["numa"].([]any)[1].(map[string]any)["id"] = 0 }), 400, "numa[1].id", "repeats"},
		{"bad label", "POST", "a", "", with(func(m map[string]any) { m["labels"] = map[string]any{"pool": "a b"} }), 400, "labels.pool", "not a valid label value"},
		{"label of the wrong type", "POST", "a", "", with(func(m map[string]any) { m["labels"] = map[string]any{"pool": 3} }), 400, "labels", "want a string"},
		{"bad node name", "POST", "a", "", with(func(m map[string]any) { m["node"] = "Node_A" }), 403, "node", ""},
		{"oversized body", "POST", "a", "", huge, 413, "", "larger than 65536 bytes"},
		{"wrong content type", "POST", "a", "text/plain", encode(valid()), 415, "", "want application/json"},
		{"wrong method", "PUT", "a", "", encode(valid()), 405, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, a.url+"/v1/reports", strings.NewReader(tc.body))
			switch tc.auth {
			case "":
			case "a":
				req.Header.Set("Authorization", "Bearer "+tokenOf("node-a"))
			default:
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.code, data)
			}
			if tc.code == 405 {
				return
			}
			var eb arbiterapi.ErrorBody
			if err := json.Unmarshal(data, &eb); err != nil {
				t.Fatalf("answer is not a JSON error: %s", data)
			}
			if !strings.Contains(eb.Error, tc.msg) {
				t.Errorf("error %q lacks %q", eb.Error, tc.msg)
			}
			if tc.field != "" {
				found := false
				for _, f := range eb.Fields {
					found = found || f.Field == tc.field
				}
				if !found {
					t.Errorf("fields %+v do not name %q (error %q)", eb.Fields, tc.field, eb.Error)
				}
			}
		})
	}

	// None of it reached the view: node-a never reported, node-b's lease is as it was.
	if _, ok := a.srv.View().Node("node-a", a.clock.Now()); ok {
		t.Error("node-a is in the view")
	}
	after, ok := a.srv.View().Node("node-b", a.clock.Now())
	if !ok || after.Lease.Generation != before.Generation || !after.Received.Equal(night(t)) || after.Report.Labels["pool"] != "gpu" {
		t.Errorf("node-b's state changed: %+v", after)
	}
	metrics := a.getText("/metrics")
	for _, want := range []string{`result="forbidden"} 3`, `result="unauthenticated"} 4`, `result="too_large"} 1`, `result="bad_media_type"} 1`, `result="accepted"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The client reports errors with the fields named.
	r := a.nodeReport("node-a")
	r.Capacity.MilliCPU = -3
	_, err = a.client("node-a").Report(context.Background(), r)
	var apiErr *arbiterapi.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || len(apiErr.Fields) == 0 || apiErr.Fields[0] != "capacity.milliCPU" {
		t.Errorf("client error: %#v", err)
	}
	if _, err := a.client("node-a").Report(context.Background(), a.nodeReport("node-b")); err == nil {
		t.Error("the client sent a report for another node")
	}
	bad := a.client("node-a")
	bad.Token = "wrong-token-wrong-token"
	if _, err := bad.Report(context.Background(), a.nodeReport("node-a")); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("bad token: %v", err)
	}
}

// An arbiter restart loses no lease: leases within their expiry are served again, and a
// restart with a broken policy file runs on the last accepted policy.
func TestServerRestartKeepsLeases(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a", "node-b")
	clock := &fakeClock{t: night(t)}
	a := startArbiter(t, dir, clock, nil)
	leaseA, err := a.client("node-a").Report(context.Background(), a.nodeReport("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(10 * time.Second)
	if _, err := a.client("node-b").Report(context.Background(), a.nodeReport("node-b")); err != nil {
		t.Fatal(err)
	}
	a.stop() // saves

	// Break the policy file before the restart.
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("sharedQueue: [broken\n"), 0o600)
	clock.Add(5 * time.Second)
	b := startArbiter(t, dir, clock, nil)
	if got := b.srv.Policy(); got.Digest != a.srv.Policy().Digest {
		t.Fatalf("restarted on another policy: %q", got.Raw)
	}
	var node NodeView
	if code := b.get("/v1/nodes/node-a", "node-b", &node); code != 200 || node.LeaseExpired ||
		node.Lease.Generation != leaseA.Generation || !node.Lease.Expires.Equal(leaseA.Expires) || len(node.Lease.Grants) != 2 {
		t.Errorf("node-a after the restart: %d %+v", code, node)
	}
	var q QueueView
	if b.get("/v1/queues/queue-1", "node-a", &q); q.Lent != (arbiterapi.Resources{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 8}) || len(q.Nodes) != 2 {
		t.Errorf("queue-1 after the restart: %+v", q)
	}
	// A renewal after the restart keeps the generation (nothing changed).
	again, err := b.client("node-a").Report(context.Background(), b.nodeReport("node-a"))
	if err != nil || again.Generation != leaseA.Generation {
		t.Errorf("renewal after the restart: %v, generation %d -> %d", err, leaseA.Generation, again.Generation)
	}
	// node-a's lease expires 30 s after its report; node-b's lives 10 s longer.
	clock.Add(16 * time.Second)
	if b.get("/v1/queues/queue-1", "node-a", &q); len(q.Nodes) != 2 {
		t.Errorf("queue-1 lost a node early: %+v", q)
	}
	b.stop()

	// Without a saved state and without a valid policy file, the arbiter refuses to start.
	os.RemoveAll(filepath.Join(dir, "state"))
	tokens, _ := LoadTokenFile(filepath.Join(dir, "tokens.yaml"))
	store, _ := NewFileStore(filepath.Join(dir, "state"))
	_, err = NewServer(Options{Policy: NewFilePolicy(filepath.Join(dir, "policy.yaml")), Auth: tokens, Store: store})
	if err == nil || !strings.Contains(err.Error(), "policy.yaml:2: invalid YAML") {
		t.Errorf("start with a broken policy and no state: %v", err)
	}
}

// The policy file is polled: a valid change is applied, an invalid one leaves the old policy.
func TestServerPolicyReload(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a")
	a := startArbiter(t, dir, &fakeClock{t: night(t)}, func(o *Options) { o.PollInterval = 20 * time.Millisecond })
	policyFile := filepath.Join(dir, "policy.yaml")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	changed := strings.Replace(referencePolicy, "milliCPU: 8000", "milliCPU: 4000", 1)
	os.WriteFile(policyFile, []byte(changed), 0o600)
	waitFor("the new policy", func() bool { return a.srv.Policy().Rules[0].Lend.MilliCPU == 4000 })
	lease, err := a.client("node-a").Report(context.Background(), a.nodeReport("node-a"))
	if g, _ := grantFor(lease, "queue-1"); err != nil || g.MilliCPU != 4000 {
		t.Errorf("lease under the new policy: %v %+v", err, lease)
	}

	digest := a.srv.Policy().Digest
	os.WriteFile(policyFile, []byte(changed+"  - name: broken\n"), 0o600)
	waitFor("the failed reload", func() bool {
		return strings.Contains(a.getText("/metrics"), `tidal_arbiter_policy_reloads_total{result="failure"} 1`)
	})
	if a.srv.Policy().Digest != digest {
		t.Error("an invalid policy replaced the valid one")
	}
	if err := a.srv.Reload(); err == nil || !strings.Contains(err.Error(), "policy.yaml:") {
		t.Errorf("Reload() = %v", err)
	}
}

// Several agents report concurrently over loopback; each gets its own lease.
func TestServerConcurrentClients(t *testing.T) {
	const agents, nodesPerAgent, rounds = 8, 5, 20
	dir := t.TempDir()
	var names []string
	for i := range agents * nodesPerAgent {
		names = append(names, fmt.Sprintf("node-%02d", i))
	}
	writeArbiterFiles(t, dir, names...)
	clock := &fakeClock{t: night(t)}
	a := startArbiter(t, dir, clock, func(o *Options) { o.PersistInterval = 10 * time.Millisecond; o.SweepInterval = 5 * time.Millisecond })

	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i := range agents {
		wg.Go(func() {
			for round := range rounds {
				for _, name := range names[i*nodesPerAgent : (i+1)*nodesPerAgent] {
					r := a.nodeReport(name)
					r.NUMA = nil
					r.Lendable.MilliCPU = int64(1000 * (round%4 + 1))
					lease, err := a.client(name).Report(context.Background(), r)
					if err != nil {
						errs <- err
						return
					}
					total := int64(0)
					for _, g := range lease.Grants {
						total += g.MilliCPU
					}
					if lease.Node != name || total != r.Lendable.MilliCPU {
						errs <- fmt.Errorf("%s got %+v", name, lease)
						return
					}
				}
				var q QueueView
				a.get("/v1/queues/queue-1", names[0], &q)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := a.srv.View().Len(); n != agents*nodesPerAgent {
		t.Errorf("%d nodes in the view", n)
	}
}

// Tokens: parsing problems are reported with their line, tokens are bound to one node.
func TestParseTokens(t *testing.T) {
	_, err := ParseTokens("tokens.yaml", []byte("node-a: short\nNode_B: 0123456789abcdef0\nnode-c: 0123456789abcdef0\nnode-d: 0123456789abcdef0\nnode-e: [x]\nnode-f: \"with space 0123456789\"\n"))
	want := []string{
		"tokens.yaml:1: node-a: the token has 5 characters",
		`tokens.yaml:2: Node_B: "Node_B" is not a valid node name`,
		"tokens.yaml:4: node-d: the token is also node node-c's",
		"tokens.yaml:5: node-e: got a list",
		"tokens.yaml:6: node-f: the token has a character that is not printable ASCII",
	}
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got:\n%v", err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("got %s\nwant %s", lines[i], want[i])
		}
	}
	if _, err := ParseTokens("t", nil); err == nil {
		t.Error("an empty tokens file is accepted")
	}
	tokens, err := ParseTokens("t", []byte("node-a: 0123456789abcdef\n"))
	if err != nil || tokens["node-a"] != "0123456789abcdef" {
		t.Errorf("%v %v", tokens, err)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("arbiter.yaml", []byte("listenAddress: 0.0.0.0:9999\nleaseTTL: 45s\nnodeTimeout: 10m\nmaxReportBytes: 2Mi\nlogLevel: debug\n"))
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	if c.ListenAddress != "0.0.0.0:9999" || c.LeaseTTL != 45*time.Second || c.NodeTimeout != 10*time.Minute ||
		c.MaxReportBytes != 2<<20 || c.LogLevel != "debug" || c.PolicyFile != def.PolicyFile || def.ListenAddress != "127.0.0.1:9480" {
		t.Errorf("config %+v", c)
	}
	_, err = ParseConfig("arbiter.yaml", []byte("listen: x\nleaseTTL: 30\nnodeTimeout: 10s\ntlsCertFile: /c\nlogLevel: loud\nmaxReportBytes: 1K\n"))
	want := []string{
		"arbiter.yaml:1: listen: unknown key",
		"arbiter.yaml:2: leaseTTL: 30 is not a duration (a unit is required)",
		"arbiter.yaml:3: nodeTimeout: 10s is shorter than leaseTTL (30s)",
		"arbiter.yaml:4: tlsCertFile: tlsCertFile and tlsKeyFile go together",
		`arbiter.yaml:5: logLevel: "loud" is not allowed`,
		`arbiter.yaml:6: maxReportBytes: "1K" is out of range`,
	}
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got:\n%v", err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("got %s\nwant %s", lines[i], want[i])
		}
	}
}
