package arbiter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

func TestArbiterConfigKubernetes(t *testing.T) {
	c, err := ParseConfig("arbiter.yaml", []byte("mode: kubernetes\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeKubernetes || c.Kubernetes.Namespace != "tidal-system" || c.Kubernetes.PolicyConfigMap != "tidal-arbiter-policy" ||
		c.Kubernetes.LeaseName != "tidal-arbiter" || c.Kubernetes.AgentServiceAccount != "system:serviceaccount:tidal-system:tidal-agent" ||
		c.Kubernetes.TokenCacheTTL != time.Minute || c.Kubernetes.LeaseDuration != 15*time.Second ||
		c.Kubernetes.RenewDeadline != 10*time.Second || c.Kubernetes.RetryPeriod != 2*time.Second ||
		c.Kubernetes.Kubeconfig != "" || len(c.Kubernetes.Audiences) != 0 {
		t.Errorf("defaults: %+v", c.Kubernetes)
	}
	if d := DefaultConfig(); d.Mode != ModeStandalone {
		t.Errorf("default mode %q", d.Mode)
	}

	c, err = ParseConfig("arbiter.yaml", []byte(`mode: kubernetes
kubernetes:
  kubeconfig: /k
  namespace: ops
  policyConfigMap: pol
  agentServiceAccount: system:serviceaccount:ops:agent
  audiences: [tidal-arbiter, other]
  tokenCacheTTL: 0s
  leaseName: lead
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
`))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kubernetes
	if k.Kubeconfig != "/k" || k.Namespace != "ops" || k.PolicyConfigMap != "pol" || k.AgentServiceAccount != "system:serviceaccount:ops:agent" ||
		strings.Join(k.Audiences, ",") != "tidal-arbiter,other" || k.TokenCacheTTL != 0 || k.LeaseName != "lead" ||
		k.LeaseDuration != 3*time.Second || k.RenewDeadline != 2*time.Second || k.RetryPeriod != 500*time.Millisecond {
		t.Errorf("parsed: %+v", k)
	}

	for _, tc := range []struct{ in, want string }{
		{"mode: cloud\n", `arbiter.yaml:1: mode: "cloud" is not allowed: want standalone or kubernetes`},
		{"kubernetes:\n  namespace: x\n", `arbiter.yaml:1: kubernetes: set, but mode is standalone`},
		{"mode: kubernetes\npolicyFile: /p\ntokensFile: /t\n", "arbiter.yaml:2: policyFile: not used in kubernetes mode"},
		{"mode: kubernetes\nkubernetes:\n  namespace: Tidal\n", `arbiter.yaml:3: kubernetes.namespace: "Tidal" is not allowed`},
		{"mode: kubernetes\nkubernetes:\n  agentServiceAccount: tidal-agent\n", `arbiter.yaml:3: kubernetes.agentServiceAccount: "tidal-agent" is not allowed: want a ServiceAccount user name`},
		{"mode: kubernetes\nkubernetes:\n  audiences: tidal\n", `arbiter.yaml:3: kubernetes.audiences: got "tidal": want a list`},
		{"mode: kubernetes\nkubernetes:\n  leaseDuration: 5s\n", "arbiter.yaml:3: kubernetes.renewDeadline: 10s is not shorter than leaseDuration (5s)"},
		{"mode: kubernetes\nkubernetes:\n  retryPeriod: 9s\n", "arbiter.yaml:3: kubernetes.retryPeriod: 9s is too long for renewDeadline 10s"},
		{"mode: kubernetes\nkubernetes:\n  leaseNmae: x\n", "arbiter.yaml:3: kubernetes.leaseNmae: unknown key (did you mean leaseName?)"},
		{"mode: kubernetes\nkubernetes:\n  leaseDuration: 15500ms\n", "arbiter.yaml:3: kubernetes.leaseDuration: 15.5s is not a whole number of seconds"},
		{"mode: kubernetes\nkubernetes:\n  tokenCacheTTL: 1h\n", `arbiter.yaml:3: kubernetes.tokenCacheTTL: "1h" is out of range`},
	} {
		_, err := ParseConfig("arbiter.yaml", []byte(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\ngot  %v\nwant %s...", tc.in, err, tc.want)
		}
	}
	// Every problem at once, in line order.
	_, err = ParseConfig("arbiter.yaml", []byte("mode: kubernetes\nstateDir: /s\nkubernetes:\n  namespace: a.b\n  leaseName: \"\"\n"))
	if lines := strings.Split(fmt.Sprint(err), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "arbiter.yaml:2: stateDir") ||
		!strings.HasPrefix(lines[1], "arbiter.yaml:4: kubernetes.namespace") || !strings.HasPrefix(lines[2], "arbiter.yaml:5: kubernetes.leaseName") {
		t.Errorf("got:\n%v", err)
	}
}

// The config and the policy deploy/arbiter.yaml ships are valid.
func TestDeployArbiterManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "arbiter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	found := map[string]bool{}
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct{ Name string }
			Data     map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj.Kind != "ConfigMap" {
			continue
		}
		found[obj.Metadata.Name] = true
		switch obj.Metadata.Name {
		case "tidal-arbiter-config":
			c, err := ParseConfig("arbiter.yaml", []byte(obj.Data["arbiter.yaml"]))
			if err != nil || c.Mode != ModeKubernetes || strings.Join(c.Kubernetes.Audiences, ",") != "tidal-arbiter" {
				t.Errorf("config %+v: %v", c, err)
			}
		case "tidal-arbiter-policy":
			p, err := ParsePolicy("policy.yaml", []byte(obj.Data[PolicyConfigMapKey]))
			if err != nil {
				t.Fatalf("policy: %v", err)
			}
			r := p.Rules[0]
			if r.Queue != "queue-1" || r.NodeSelector["tidalqos.io/pool"] != "batch" || r.Lend != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4}) ||
				r.Window.String() != "22:00-08:00" || r.Window.Zone() != "Europe/Berlin" {
				t.Errorf("reference rule: %+v", r)
			}
		}
	}
	if !found["tidal-arbiter-config"] || !found["tidal-arbiter-policy"] {
		t.Errorf("ConfigMaps found: %v", found)
	}
}

// jwt makes an unsigned token-shaped string with an exp claim.
func jwt(exp time.Time, salt string) string {
	payload, _ := json.Marshal(map[string]any{"exp": exp.Unix(), "jti": salt})
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(payload) + ".sig"
}

func TestTokenReviewerCache(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)}
	const agent = "system:serviceaccount:tidal-system:tidal-agent"
	var calls atomic.Int64
	var apiDown atomic.Bool
	tokens := map[string]authenticationv1.UserInfo{} // token -> who the API server says it is
	long := jwt(clock.Now().Add(time.Hour), "a")
	tokens[long] = authenticationv1.UserInfo{Username: agent, Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {"node-a"}}}
	tokens["unbound"] = authenticationv1.UserInfo{Username: agent}
	tokens["admin"] = authenticationv1.UserInfo{Username: "kubernetes-admin"}
	r := &TokenReviewer{
		User: agent, Audiences: []string{"tidal-arbiter"}, CacheTTL: time.Minute, Now: clock.Now,
		Review: func(ctx context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
			calls.Add(1)
			if apiDown.Load() {
				return nil, errors.New("connection refused")
			}
			if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "tidal-arbiter" {
				t.Errorf("audiences %v", tr.Spec.Audiences)
			}
			u, ok := tokens[tr.Spec.Token]
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: u}
			if !ok {
				tr.Status.Error = "invalid bearer token"
			}
			return tr, nil
		},
	}
	auth := func(tok string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, "/v1/reports", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return r.Authenticate(req)
	}
	expect := func(tok, node string, wantErr error, wantCalls int64) {
		t.Helper()
		got, err := auth(tok)
		if got != node || !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
			t.Errorf("%.12s: got %q, %v; want %q, %v", tok, got, err, node, wantErr)
		}
		if n := calls.Load(); n != wantCalls {
			t.Errorf("%.12s: %d TokenReviews so far, want %d", tok, n, wantCalls)
		}
	}
	expect(long, "node-a", nil, 1)
	expect(long, "node-a", nil, 1) // cached
	clock.Add(59 * time.Second)
	expect(long, "node-a", nil, 1)
	clock.Add(time.Second) // the cache TTL is up
	expect(long, "node-a", nil, 2)
	expect(long, "node-a", nil, 2)

	// A token expiring before the cache TTL is not remembered past its expiry.
	short := jwt(clock.Now().Add(20*time.Second), "b")
	tokens[short] = authenticationv1.UserInfo{Username: agent, Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {"node-b"}}}
	expect(short, "node-b", nil, 3)
	clock.Add(19 * time.Second)
	expect(short, "node-b", nil, 3)
	clock.Add(time.Second)
	expect(short, "node-b", nil, 4)

	// Refusals are not cached.
	expect("random-token", "", ErrUnauthenticated, 5)
	expect("random-token", "", ErrUnauthenticated, 6)
	expect("unbound", "", ErrUnauthenticated, 7)
	expect("admin", "", ErrUnauthenticated, 8)
	if _, err := auth("admin"); !strings.Contains(err.Error(), "kubernetes-admin's: want a token of "+agent) {
		t.Errorf("admin: %v", err)
	}
	if _, err := auth("unbound"); !strings.Contains(err.Error(), "not bound to a pod on a node") {
		t.Errorf("unbound: %v", err)
	}
	calls.Store(8)

	// The API server down: a cached token still works, another is "unavailable" (503), not 401.
	apiDown.Store(true)
	expect(long, "node-a", nil, 8)
	expect("other", "", ErrAuthUnavailable, 9)
	apiDown.Store(false)

	// Expired entries are swept as new ones come; the cache never passes its bound.
	clock.Add(2 * time.Minute)
	for i := range 50 {
		tok := fmt.Sprintf("tok-%d", i)
		tokens[tok] = authenticationv1.UserInfo{Username: agent, Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {fmt.Sprintf("node-%d", i)}}}
		if _, err := auth(tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.cached(); n != 50 {
		t.Errorf("%d tokens cached, want the 50 live ones", n)
	}

	// CacheTTL 0: every request is reviewed.
	r.CacheTTL = 0
	before := calls.Load()
	_, _ = auth(long)
	_, _ = auth(long)
	if calls.Load()-before != 2 {
		t.Errorf("without a cache: %d reviews for 2 requests", calls.Load()-before)
	}
}

func TestArbiterConfigMapPolicy(t *testing.T) {
	var (
		mu       sync.Mutex
		cm       *corev1.ConfigMap
		rejected []string
	)
	set := func(version, policy string) {
		mu.Lock()
		defer mu.Unlock()
		if version == "" {
			cm = nil
			return
		}
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pol", Namespace: "ns", ResourceVersion: version}, Data: map[string]string{PolicyConfigMapKey: policy}}
	}
	src := &ConfigMapPolicy{Namespace: "ns", Name: "pol",
		Get: func() (*corev1.ConfigMap, error) {
			mu.Lock()
			defer mu.Unlock()
			if cm == nil {
				return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "pol")
			}
			return cm, nil
		},
		OnReject: func(c *corev1.ConfigMap, err error) { rejected = append(rejected, err.Error()) },
	}
	if _, err := src.Load(); err == nil || !strings.Contains(err.Error(), "ConfigMap ns/pol not found") {
		t.Errorf("missing: %v", err)
	}
	if src.Changed() {
		t.Error("still missing: changed")
	}
	set("1", referencePolicy)
	if !src.Changed() {
		t.Error("created: not changed")
	}
	p, err := src.Load()
	if err != nil || len(p.Rules) != 2 || p.Source != "configmaps/ns/pol/policy.yaml" {
		t.Fatalf("%v %v", p, err)
	}
	if src.Changed() {
		t.Error("loaded: changed")
	}
	set("2", "sharedQueue: best-effort\nrules:\n  - name: r\n    queue: nope\n    lend: {milliCPU: 1000}\n    window: 00:00-24:00\n    timeZone: UTC\n")
	if !src.Changed() {
		t.Error("updated: not changed")
	}
	if _, err := src.Load(); err == nil || !strings.HasPrefix(err.Error(), "configmaps/ns/pol/policy.yaml:4: rules[0].queue") {
		t.Errorf("invalid: %v", err)
	}
	if len(rejected) != 2 || src.Changed() {
		t.Errorf("rejected %q, changed %v", rejected, src.Changed())
	}
	set("3", "")
	cm.Data = map[string]string{"other": "x"}
	if _, err := src.Load(); err == nil || !strings.Contains(err.Error(), "has no key policy.yaml") {
		t.Errorf("no key: %v", err)
	}
}

// fakeLeader is a Leadership the test flips.
type fakeLeader struct{ leading atomic.Bool }

func (f *fakeLeader) Leading() bool  { return f.leading.Load() }
func (f *fakeLeader) Leader() string { return "replica-1" }

type nodeLabels map[string]map[string]string

func (n nodeLabels) NodeLabels(node string) (map[string]string, bool) { l, ok := n[node]; return l, ok }

func TestArbiterNodeStore(t *testing.T) {
	nodes := cache.NewStore(cache.MetaNamespaceKeyFunc)
	addNode := func(name string, labels, annotations map[string]string) {
		obj, _ := TrimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			Annotations: annotations, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}})
		if err := nodes.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		patched = map[string]string{}
		fail    bool
	)
	leader := &fakeLeader{}
	leader.leading.Store(true)
	s := &NodeStore{Nodes: nodes, Leading: leader.Leading, Workers: 2,
		Patch: func(ctx context.Context, node string, patch []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return errors.New("the API server is down")
			}
			if node == "gone" {
				return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, node)
			}
			var p struct {
				Metadata struct{ Annotations map[string]string }
			}
			if err := json.Unmarshal(patch, &p); err != nil {
				t.Error(err)
			}
			patched[node] = p.Metadata.Annotations[LeaseAnnotation]
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	addNode("node-a", map[string]string{"tidalqos.io/pool": "batch"}, map[string]string{"tidalqos.io/topology": "{big}"})
	if l, ok := s.NodeLabels("node-a"); !ok || l["tidalqos.io/pool"] != "batch" {
		t.Errorf("labels %v %v", l, ok)
	}
	if _, ok := s.NodeLabels("node-x"); ok {
		t.Error("an unknown node has labels")
	}
	obj, _, _ := nodes.GetByKey("node-a")
	if m := obj.(*metav1.PartialObjectMetadata); len(m.Annotations) != 0 || len(m.ManagedFields) != 0 {
		t.Errorf("TrimNode kept %v", m.ObjectMeta)
	}

	lease := func(node string, gen uint64) SavedLease {
		return SavedLease{Lease: arbiterapi.Lease{Node: node, Generation: gen, Grants: []arbiterapi.Grant{{Queue: "q", MilliCPU: int64(gen)}}}}
	}
	writes := func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for k, v := range patched {
			out[k] = v
		}
		return out
	}
	waitFor := func(what string, ok func(map[string]string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok(writes()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: writes %v", what, writes())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 1), lease("gone", 1)}})
	waitFor("first lease", func(w map[string]string) bool { return strings.Contains(w["node-a"], `"generation":1`) })
	mu.Lock()
	clear(patched)
	mu.Unlock()
	// A renewal (same generation) writes nothing; a change does.
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 1), lease("gone", 1)}})
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 2)}})
	waitFor("changed lease", func(w map[string]string) bool { return strings.Contains(w["node-a"], `"generation":2`) })
	if w := writes(); len(w) != 1 {
		t.Errorf("writes %v, want node-a's generation 2 only", w)
	}
	// A failed write is retried with the next save.
	mu.Lock()
	fail = true
	mu.Unlock()
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 3)}})
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	fail = false
	mu.Unlock()
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 3)}})
	waitFor("retried lease", func(w map[string]string) bool { return strings.Contains(w["node-a"], `"generation":3`) })
	// A follower writes nothing.
	leader.leading.Store(false)
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 4)}})
	time.Sleep(50 * time.Millisecond)
	if w := writes(); strings.Contains(w["node-a"], `"generation":4`) {
		t.Error("a follower wrote")
	}

	// Load reads the annotations back, skipping one that names another node.
	a, _ := json.Marshal(lease("node-a", 3).Lease)
	b, _ := json.Marshal(lease("node-a", 7).Lease)
	addNode("node-a", nil, map[string]string{LeaseAnnotation: string(a)})
	addNode("node-b", nil, map[string]string{LeaseAnnotation: string(b)})
	addNode("node-c", nil, map[string]string{LeaseAnnotation: "{"})
	st, err := s.Load()
	if err != nil || len(st.Leases) != 1 || st.Leases[0].Lease.Node != "node-a" || st.Leases[0].Lease.Generation != 3 {
		t.Fatalf("load: %+v %v", st, err)
	}
	// What was loaded is not written again.
	leader.leading.Store(true)
	mu.Lock()
	clear(patched)
	mu.Unlock()
	_ = s.Save(&State{Leases: []SavedLease{lease("node-a", 3), lease("node-b", 1)}})
	waitFor("node-b", func(w map[string]string) bool { return w["node-b"] != "" })
	if w := writes(); w["node-a"] != "" {
		t.Errorf("node-a written again: %v", w)
	}
}

// Under leader election a follower answers 503 and saves nothing; the leader restores the
// Store's leases when it starts leading; labels come from the NodeLabeler, not the report.
func TestServerLeadershipAndNodeLabels(t *testing.T) {
	dir := t.TempDir()
	writeArbiterFiles(t, dir, "node-a", "node-b")
	clock := &fakeClock{t: night(t)}
	leader := &fakeLeader{}
	labels := nodeLabels{"node-a": {"pool": "gpu"}, "node-b": {"pool": "cpu"}}
	var labelledFollower atomic.Bool // what the Pod's role label says, in kubernetes mode
	a := startArbiter(t, dir, clock, func(o *Options) {
		o.Leadership, o.NodeLabels, o.FollowerReady = leader, labels, labelledFollower.Load
	})
	ctx := context.Background()

	var apiErr *arbiterapi.APIError
	if _, err := a.client("node-a").Report(ctx, a.nodeReport("node-a")); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable ||
		!strings.Contains(apiErr.Message, "not the leader (the leader is replica-1)") {
		t.Fatalf("follower report: %v", err)
	}
	for _, path := range []string{"/readyz", "/v1/nodes", "/v1/rules"} {
		if code := a.get(path, "node-a", nil); code != http.StatusServiceUnavailable {
			t.Errorf("follower GET %s: %d", path, code)
		}
	}
	if code := a.get("/healthz", "", nil); code != http.StatusOK {
		t.Errorf("follower /healthz: %d", code)
	}
	// A follower's 503 closes the connection: an agent's next report, on a new one, goes
	// where the Service points now.
	resp, err := http.Get(a.url + "/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("follower GET /v1/nodes: %d, connection closed %v; want 503 and Connection: close", resp.StatusCode, resp.Close)
	}
	// Once its Pod says follower, the follower is Ready (every replica is, for the rollout),
	// and still decides nothing.
	labelledFollower.Store(true)
	if code := a.get("/readyz", "", nil); code != http.StatusOK {
		t.Errorf("labelled follower /readyz: %d, want 200", code)
	}
	if code := a.get("/v1/nodes", "node-a", nil); code != http.StatusServiceUnavailable {
		t.Errorf("labelled follower GET /v1/nodes: %d, want 503", code)
	}
	if !strings.Contains(a.getText("/metrics"), "tidal_arbiter_leader 0") {
		t.Error("metrics: want tidal_arbiter_leader 0")
	}

	leader.leading.Store(true)
	if err := a.srv.Lead(); err != nil {
		t.Fatal(err)
	}
	if code := a.get("/readyz", "", nil); code != http.StatusOK {
		t.Errorf("leader /readyz: %d", code)
	}
	// node-a claims the cpu pool; its Node says gpu: the gpu rule applies.
	r := a.nodeReport("node-a")
	r.Labels = map[string]string{"pool": "cpu"}
	lease, err := a.client("node-a").Report(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := grantFor(lease, "queue-1"); !ok || g.Rule != "night-gpu" {
		t.Errorf("node-a lease %+v: want the gpu rule (the Node's labels)", lease)
	}
	// node-b claims gpu; its Node says cpu.
	r = a.nodeReport("node-b")
	r.Labels = map[string]string{"pool": "gpu"}
	if lease, err := a.client("node-b").Report(ctx, r); err != nil {
		t.Fatal(err)
	} else if _, ok := grantFor(lease, "queue-1"); ok {
		t.Errorf("node-b got the gpu rule from labels it claimed: %+v", lease)
	}
	// A node without a Node object is refused.
	delete(labels, "node-b")
	if _, err := a.client("node-b").Report(ctx, a.nodeReport("node-b")); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden {
		t.Errorf("node-b without a Node: %v", err)
	}
	if err := a.srv.Save(); err != nil {
		t.Fatal(err)
	}

	// Another term: the view is what the Store holds (node-a's lease, same generation).
	a.stop()
	b := startArbiter(t, dir, clock, func(o *Options) { o.Leadership = leader; o.NodeLabels = labels })
	if b.srv.View().Len() != 0 {
		t.Error("a replica under leader election loaded the store before leading")
	}
	if err := b.srv.Lead(); err != nil {
		t.Fatal(err)
	}
	var n NodeView
	if code := b.get("/v1/nodes/node-a", "node-a", &n); code != http.StatusOK || n.Lease.Generation != lease.Generation || !n.Restored {
		t.Errorf("restored node-a: %d %+v", code, n)
	}
}
