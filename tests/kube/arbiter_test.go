package kube_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidalqos/tidal/arbiter"
	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// Leader election in these tests: short, so that a failover takes seconds.
const (
	arbLeaseDuration = 3 * time.Second
	arbRenewDeadline = 2 * time.Second
	arbRetryPeriod   = 500 * time.Millisecond
	arbAudience      = "tidal-arbiter"
)

// arbPolicy lends to queue-1 from nodes labelled tidalqos.io/pool=batch all day (so the test
// does not depend on the time of day); milliCPU varies between versions of the policy.
func arbPolicy(milliCPU int) string {
	return fmt.Sprintf(`sharedQueue: best-effort
queues:
  - name: queue-1
rules:
  - name: batch
    queue: queue-1
    nodeSelector: {tidalqos.io/pool: batch}
    lend: {milliCPU: %d, memory: 8Gi, gpus: 2}
    window: "00:00-24:00"
    timeZone: Europe/Berlin
`, milliCPU)
}

// arbEnv is a cluster with deploy/ applied, Nodes, and the arbiter's kubeconfig: the
// tidal-arbiter ServiceAccount's token, so that RBAC the manifests lack fails the test.
type arbEnv struct {
	*cluster
	t          *testing.T
	dir        string
	kubeconfig string
}

func newArbEnv(t *testing.T, policy string, nodes map[string]map[string]string) *arbEnv {
	t.Helper()
	c := newCluster(t)
	e := &arbEnv{cluster: c, t: t, dir: t.TempDir()}
	e.kubeconfig = filepath.Join(e.dir, "arbiter.kubeconfig")
	if err := c.WriteKubeconfig(e.kubeconfig, c.ServiceAccountToken(t, "tidal-system", "tidal-arbiter")); err != nil {
		t.Fatal(err)
	}
	for name, labels := range nodes {
		if _, err := c.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.setArbiterPolicy(policy)
	return e
}

func (e *arbEnv) setArbiterPolicy(policy string) {
	e.t.Helper()
	ctx := context.Background()
	cm, err := e.admin.CoreV1().ConfigMaps("tidal-system").Get(ctx, "tidal-arbiter-policy", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data = map[string]string{arbiter.PolicyConfigMapKey: policy}
	if _, err := e.admin.CoreV1().ConfigMaps("tidal-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// agentToken runs (as an object: there is no kubelet) an agent pod of the tidal-agent
// ServiceAccount on node and returns a token bound to it, as a projected token volume would
// hold. The pod is returned so that a test can delete it.
func (e *arbEnv) agentToken(node string, audiences ...string) (string, *corev1.Pod) {
	e.t.Helper()
	ctx := context.Background()
	pod, err := e.admin.CoreV1().Pods("tidal-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tidal-agent-"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "tidal-agent",
			Containers: []corev1.Container{{Name: "agent", Image: "tidal-test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.boundToken(pod, audiences...), pod
}

func (e *arbEnv) boundToken(pod *corev1.Pod, audiences ...string) string {
	e.t.Helper()
	return e.boundAgentToken(e.t, authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}, audiences...)
}

// arbProc is one `tidal arbiter` process (the real binary) in kubernetes mode.
type arbProc struct {
	t    *testing.T
	name string
	url  string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error // the exit, once done is closed
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startArb starts an arbiter; extra is more YAML under kubernetes:. It returns once the
// process listens (it may not lead).
func (e *arbEnv) startArb(name, extra string) *arbProc {
	e.t.Helper()
	return e.startArbPod(name, "", extra)
}

// startArbPod starts an arbiter that labels pod (in tidal-system) with its role; "" for none.
func (e *arbEnv) startArbPod(name, pod, extra string) *arbProc {
	e.t.Helper()
	port := freePort(e.t)
	cfg := fmt.Sprintf(`mode: kubernetes
listenAddress: 127.0.0.1:%d
pollInterval: 200ms
persistInterval: 200ms
logLevel: debug
kubernetes:
  kubeconfig: %s
  audiences: [%s]
  leaseDuration: %v
  renewDeadline: %v
  retryPeriod: %v
%s`, port, e.kubeconfig, arbAudience, arbLeaseDuration, arbRenewDeadline, arbRetryPeriod, extra)
	path := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	a := &arbProc{t: e.t, name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port), log: &syncBuffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(tidalBin, "arbiter", "--config", path, "--pod-name", pod)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.done) }()
	e.t.Cleanup(func() {
		a.stop(syscall.SIGTERM)
		if e.t.Failed() {
			e.t.Logf("arbiter %s log:\n%s", a.name, tail(a.log.String(), 60))
		}
	})
	eventually(e.t, 30*time.Second, "arbiter "+name+" listens", func() error {
		select {
		case <-a.done:
			e.t.Fatalf("arbiter %s exited: %v\n%s", name, a.err, tail(a.log.String(), 40))
		default:
		}
		code, _ := a.get("/healthz", "")
		if code != http.StatusOK {
			return fmt.Errorf("/healthz: %d", code)
		}
		return nil
	})
	return a
}

// stop signals the process and waits for it (SIGKILL after 15 s); it returns the exit error.
func (a *arbProc) stop(sig syscall.Signal) error {
	select {
	case <-a.done:
		return a.err
	default:
	}
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	return a.err
}

func (a *arbProc) get(path, token string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, a.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (a *arbProc) ready() bool {
	code, _ := a.get("/readyz", "")
	return code == http.StatusOK
}

// report sends node's report with token and returns the lease or the *arbiterapi.APIError.
func (a *arbProc) report(node, token string, labels map[string]string) (arbiterapi.Lease, error) {
	c := &arbiterapi.Client{URL: a.url, Token: token, NodeName: node, HTTP: &http.Client{Timeout: 5 * time.Second}}
	return c.Report(context.Background(), arbReport(node, labels))
}

func arbReport(node string, labels map[string]string) arbiterapi.Report {
	const gi = int64(1) << 30
	return arbiterapi.Report{
		Node: node, Labels: labels, Time: time.Now(),
		Capacity: arbiterapi.Resources{MilliCPU: 64000, MemoryBytes: 256 * gi, GPUs: 4},
		Online:   arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: 8000, MemoryBytes: 32 * gi}, Predicted: arbiterapi.Usage{MilliCPU: 12000, MemoryBytes: 48 * gi}, Utilization: 0.2},
		Lendable: arbiterapi.Lendable{MilliCPU: 16000, MemoryBytes: 64 * gi, GPUs: 4, GPUUUIDs: []string{node + "-GPU-0", node + "-GPU-1", node + "-GPU-2", node + "-GPU-3"}},
	}
}

func statusOf(err error) int {
	var apiErr *arbiterapi.APIError
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

func grantTo(l arbiterapi.Lease, queue string) (arbiterapi.Grant, bool) {
	for _, g := range l.Grants {
		if g.Queue == queue {
			return g, true
		}
	}
	return arbiterapi.Grant{}, false
}

// metric returns the value of one series (name with labels, as exposed) or "".
func (a *arbProc) metric(series string) string {
	_, body := a.get("/metrics", "")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// leaseAnnotation is the lease the arbiter wrote on a Node, or nil.
func (e *arbEnv) leaseAnnotation(node string) *arbiterapi.Lease {
	e.t.Helper()
	raw, ok := e.node(e.t, node).Annotations[arbiter.LeaseAnnotation]
	if !ok {
		return nil
	}
	var l arbiterapi.Lease
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		e.t.Fatalf("%s annotation %s: %v", node, raw, err)
	}
	return &l
}

// An agent's projected ServiceAccount token, bound to its pod, authenticates as that pod's
// node through a TokenReview; it cannot report for another node, and other tokens are refused.
// Lending rules select by the Node's labels, not by those a report claims.
func TestArbiterTokenReview(t *testing.T) {
	e := newArbEnv(t, arbPolicy(4000), map[string]map[string]string{
		"node-a": {"tidalqos.io/pool": "batch"},
		"node-b": nil,
	})
	ctx := context.Background()
	tokA, podA := e.agentToken("node-a", arbAudience)
	tokB, _ := e.agentToken("node-b", arbAudience)

	// What this API server says about such a token, independently of the arbiter.
	tr, err := e.admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tokA, Audiences: []string{arbAudience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:tidal-system:tidal-agent" {
		t.Fatalf("TokenReview of a pod-bound token: %+v", tr.Status)
	}
	if nodes := tr.Status.User.Extra[arbiter.NodeNameExtra]; len(nodes) != 1 || nodes[0] != "node-a" {
		t.Fatalf("this API server does not put %s=node-a on a token bound to a pod on node-a (extra: %v): the arbiter cannot bind tokens to nodes here", arbiter.NodeNameExtra, tr.Status.User.Extra)
	}

	a := e.startArb("a", "  tokenCacheTTL: 2s\n")
	eventually(t, 15*time.Second, "the only arbiter leads", func() error {
		if !a.ready() {
			return errors.New("/readyz not 200")
		}
		return nil
	})

	lease, err := a.report("node-a", tokA, nil)
	if err != nil {
		t.Fatalf("node-a's report with its own token: %v", err)
	}
	if g, ok := grantTo(lease, "queue-1"); !ok || g.MilliCPU != 4000 || len(g.GPUs) != 2 {
		t.Errorf("node-a (Node labelled pool=batch) lease %+v: want 4000m and 2 GPUs to queue-1", lease)
	}
	// node-a's token, node-b's name: a forged node name.
	if _, err := a.report("node-b", tokA, nil); statusOf(err) != http.StatusForbidden || !strings.Contains(err.Error(), `bound to node "node-a"`) {
		t.Errorf("node-b's report with node-a's token: %v, want 403", err)
	}
	// node-b claims the batch label its Node does not have: no rule applies.
	lease, err = a.report("node-b", tokB, map[string]string{"tidalqos.io/pool": "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantTo(lease, "queue-1"); ok {
		t.Errorf("node-b got queue-1 from a label it claimed: %+v", lease)
	}
	// Once its Node has the label, it does.
	patch := []byte(`{"metadata":{"labels":{"tidalqos.io/pool":"batch"}}}`)
	if _, err := e.admin.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "node-b lends once its Node is labelled", func() error {
		l, err := a.report("node-b", tokB, nil)
		if err != nil {
			return err
		}
		if _, ok := grantTo(l, "queue-1"); !ok {
			return fmt.Errorf("lease %+v", l)
		}
		return nil
	})

	ttl := int64(3600)
	unbound, err := e.admin.CoreV1().ServiceAccounts("tidal-system").CreateToken(ctx, "tidal-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{arbAudience}, ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.admin.CoreV1().ServiceAccounts("tidal-system").CreateToken(ctx, "tidal-arbiter", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{arbAudience}, ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, token, want string }{
		{"another ServiceAccount's token", other.Status.Token, "system:serviceaccount:tidal-system:tidal-arbiter's: want a token of system:serviceaccount:tidal-system:tidal-agent"},
		{"a random token", "not-a-token-0123456789", "does not accept the token"},
		// Static tokens know no audiences: the review asking for tidal-arbiter refuses it.
		{"the admin token", e.AdminConfig().BearerToken, "does not accept the token"},
		{"an agent token not bound to a pod", unbound.Status.Token, "not bound to a pod on a node"},
		{"an agent token for the API server's audience", e.ServiceAccountToken(t, "tidal-system", "tidal-agent"), "does not accept the token"},
		{"a pod-bound agent token for the API server's audience", e.boundToken(podA), "does not accept the token"},
	} {
		_, err := a.report("node-a", tc.token, nil)
		if statusOf(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 401 (%s)", tc.name, err, tc.want)
		}
	}
	// Views: any agent's token.
	code, body := a.get("/v1/nodes/node-a", tokB)
	if code != http.StatusOK || !strings.Contains(body, `"tidalqos.io/pool":"batch"`) {
		t.Errorf("GET /v1/nodes/node-a: %d %s", code, body)
	}
	if code, _ := a.get("/v1/nodes", "not-a-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/nodes with a random token: %d", code)
	}
	if hits := a.metric(`tidal_arbiter_token_cache_lookups_total{result="hit"}`); hits == "" || hits == "0" {
		t.Errorf("token cache hits: %q", hits)
	}

	// The pod goes away: its token stops working once the cache entry (2 s here) is gone.
	zero := int64(0) // no kubelet finishes a graceful deletion here
	if err := e.admin.CoreV1().Pods("tidal-system").Delete(ctx, podA.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "a deleted pod's token is refused", func() error {
		if _, err := a.report("node-a", tokA, nil); statusOf(err) != http.StatusUnauthorized {
			return fmt.Errorf("report: %v", err)
		}
		return nil
	})
}

// Two arbiters on one Lease: exactly one leads and answers; the other answers 503 to reports,
// views and /readyz. When the leader dies the other takes over within the lease duration and
// continues the leases it wrote.
func TestArbiterLeaderElection(t *testing.T) {
	e := newArbEnv(t, arbPolicy(4000), map[string]map[string]string{"node-a": {"tidalqos.io/pool": "batch"}})
	tok, _ := e.agentToken("node-a", arbAudience)
	a := e.startArb("a", "")
	b := e.startArb("b", "")

	// Never both ready, sampled through the whole test.
	var (
		sampleMu sync.Mutex
		both     int
		samples  int
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ra, rb := a.ready(), b.ready()
			sampleMu.Lock()
			samples++
			if ra && rb {
				both++
			}
			sampleMu.Unlock()
		}
	}()
	defer func() { close(stopSampling); <-sampled }()

	var leader, follower *arbProc
	eventually(t, 20*time.Second, "one arbiter leads", func() error {
		ra, rb := a.ready(), b.ready()
		switch {
		case ra && !rb:
			leader, follower = a, b
		case rb && !ra:
			leader, follower = b, a
		default:
			return fmt.Errorf("ready: a %v, b %v", ra, rb)
		}
		return nil
	})
	lease, err := e.admin.CoordinationV1().Leases("tidal-system").Get(context.Background(), "tidal-arbiter", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("Lease tidal-system/tidal-arbiter: %v %+v", err, lease)
	}
	t.Logf("leader: arbiter %s (%s)", leader.name, *lease.Spec.HolderIdentity)

	first, err := leader.report("node-a", tok, nil)
	if err != nil {
		t.Fatalf("report to the leader: %v", err)
	}
	if _, err := follower.report("node-a", tok, nil); statusOf(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "not the leader (the leader is "+*lease.Spec.HolderIdentity+")") {
		t.Errorf("report to the follower: %v, want 503 naming the leader", err)
	}
	for _, path := range []string{"/readyz", "/v1/nodes"} {
		if code, body := follower.get(path, tok); code != http.StatusServiceUnavailable {
			t.Errorf("follower GET %s: %d %s", path, code, body)
		}
	}
	if v := follower.metric("tidal_arbiter_leader"); v != "0" {
		t.Errorf("follower tidal_arbiter_leader %q", v)
	}
	if v := leader.metric("tidal_arbiter_leader"); v != "1" {
		t.Errorf("leader tidal_arbiter_leader %q", v)
	}
	eventually(t, 10*time.Second, "the leader writes node-a's lease on its Node", func() error {
		if l := e.leaseAnnotation("node-a"); l == nil || l.Generation != first.Generation {
			return fmt.Errorf("annotation %+v, want generation %d", l, first.Generation)
		}
		return nil
	})

	// The leader dies without a word (no Lease release).
	killed := time.Now()
	if err := leader.stop(syscall.SIGKILL); err == nil {
		t.Fatal("the killed leader exited 0")
	}
	eventually(t, arbLeaseDuration+5*time.Second, "the follower takes over", func() error {
		if !follower.ready() {
			return errors.New("not ready")
		}
		return nil
	})
	took := time.Since(killed)
	t.Logf("took over %v after the kill (lease duration %v, retry period %v)", took.Round(10*time.Millisecond), arbLeaseDuration, arbRetryPeriod)
	if limit := arbLeaseDuration + 3*arbRetryPeriod + time.Second; took > limit {
		t.Errorf("took over after %v, want within the lease duration (+ retries): %v", took, limit)
	}
	next, err := follower.report("node-a", tok, nil)
	if err != nil {
		t.Fatalf("report to the new leader: %v", err)
	}
	if next.Generation != first.Generation || fmt.Sprint(next.Grants[0].GPUs) != fmt.Sprint(first.Grants[0].GPUs) {
		t.Errorf("the new leader changed node-a's lease: generation %d -> %d, grants %+v -> %+v", first.Generation, next.Generation, first.Grants, next.Grants)
	}

	// The old one comes back as a follower.
	again := e.startArb(leader.name+"-again", "")
	time.Sleep(2 * arbLeaseDuration)
	if again.ready() || !follower.ready() {
		t.Errorf("after the restart: restarted ready %v, leader ready %v", again.ready(), follower.ready())
	}
	sampleMu.Lock()
	defer sampleMu.Unlock()
	if both > 0 {
		t.Errorf("both arbiters were ready at once in %d of %d samples", both, samples)
	}
}

// With its Pod named (--pod-name, $POD_NAME in deploy/) each replica labels its own Pod with
// its role: the leader's says leader, the other's follower, and both are Ready, so that the
// Service of deploy/ (which selects the leader's label) routes reports to the replica that
// decides while a Deployment counts every replica available. The labels follow the Lease.
func TestArbiterLabelsTheLeadersPod(t *testing.T) {
	e := newArbEnv(t, arbPolicy(4000), map[string]map[string]string{"node-a": {"tidalqos.io/pool": "batch"}})
	ctx := context.Background()
	pods := e.admin.CoreV1().Pods("tidal-system")
	for _, name := range []string{"arbiter-a", "arbiter-b"} {
		if _, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "tidal-arbiter"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "arbiter", Image: "tidal-test"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := func(pod string) string {
		p, err := pods.Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels[arbiter.RoleLabel]
	}
	procs := map[string]*arbProc{"arbiter-a": e.startArbPod("a", "arbiter-a", ""), "arbiter-b": e.startArbPod("b", "arbiter-b", "")}
	var leaderPod, followerPod string
	eventually(t, 20*time.Second, "one Pod labelled leader, the other follower", func() error {
		ra, rb := role("arbiter-a"), role("arbiter-b")
		switch {
		case ra == arbiter.RoleLeader && rb == arbiter.RoleFollower:
			leaderPod, followerPod = "arbiter-a", "arbiter-b"
		case rb == arbiter.RoleLeader && ra == arbiter.RoleFollower:
			leaderPod, followerPod = "arbiter-b", "arbiter-a"
		default:
			return fmt.Errorf("roles: arbiter-a %q, arbiter-b %q", ra, rb)
		}
		return nil
	})
	leader, follower := procs[leaderPod], procs[followerPod]
	if !leader.ready() || !follower.ready() {
		t.Errorf("ready: leader %v, follower %v; want both", leader.ready(), follower.ready())
	}
	tok, _ := e.agentToken("node-a", arbAudience)
	if _, err := leader.report("node-a", tok, nil); err != nil {
		t.Errorf("report to the labelled leader: %v", err)
	}
	if _, err := follower.report("node-a", tok, nil); statusOf(err) != http.StatusServiceUnavailable {
		t.Errorf("report to the follower: %v, want 503", err)
	}
	svc, err := e.admin.CoreV1().Services("tidal-system").Get(ctx, "tidal-arbiter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selected, err := pods.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(selected.Items) != 1 || selected.Items[0].Name != leaderPod {
		t.Errorf("deploy/'s Service selects %d Pods (%+v), want only the leader's %s", len(selected.Items), selected.Items, leaderPod)
	}

	// The leader stops cleanly: it releases the Lease, the other leads, and both Pods say so.
	if err := leader.stop(syscall.SIGTERM); err != nil {
		t.Errorf("the leader's clean stop: %v", err)
	}
	eventually(t, 10*time.Second, "the labels follow the Lease", func() error {
		if r1, r2 := role(followerPod), role(leaderPod); r1 != arbiter.RoleLeader || r2 != arbiter.RoleFollower {
			return fmt.Errorf("roles: %s %q, %s (stopped) %q", followerPod, r1, leaderPod, r2)
		}
		return nil
	})
	if _, err := follower.report("node-a", tok, nil); err != nil {
		t.Errorf("report to the new leader: %v", err)
	}

	// A Pod name that names no Pod stops the start, saying so.
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(runCtx, tidalBin, "arbiter", "--config", filepath.Join(e.dir, "a.yaml"), "--pod-name", "no-such-pod")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--pod-name (or $POD_NAME) must name this replica's Pod in tidal-system") {
		t.Errorf("an arbiter naming no Pod: %v\n%s", err, tail(string(out), 10))
	}
}

// The policy comes from the ConfigMap: an update is picked up; an invalid one is refused whole
// (logs, metric, a PolicyRejected Event) and the last good policy stays.
func TestArbiterPolicyConfigMap(t *testing.T) {
	e := newArbEnv(t, arbPolicy(4000), map[string]map[string]string{"node-a": {"tidalqos.io/pool": "batch"}})
	tok, _ := e.agentToken("node-a", arbAudience)
	a := e.startArb("a", "")
	eventually(t, 15*time.Second, "the arbiter leads", func() error {
		if !a.ready() {
			return errors.New("not ready")
		}
		return nil
	})
	sha := func(policy string) string { s := sha256.Sum256([]byte(policy)); return hex.EncodeToString(s[:]) }
	policyInForce := func() string {
		code, body := a.get("/v1/rules", tok)
		var v struct{ Policy arbiter.PolicyInfo }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("GET /v1/rules: %d %s", code, body)
		}
		if v.Policy.Source != "configmaps/tidal-system/tidal-arbiter-policy/policy.yaml" {
			t.Errorf("policy source %q", v.Policy.Source)
		}
		return v.Policy.SHA256
	}
	lent := func() int64 {
		l, err := a.report("node-a", tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := grantTo(l, "queue-1")
		return g.MilliCPU
	}
	if got := policyInForce(); got != sha(arbPolicy(4000)) {
		t.Errorf("policy sha256 %s, want the ConfigMap's", got)
	}
	if m := lent(); m != 4000 {
		t.Errorf("lent %dm, want 4000m", m)
	}

	e.setArbiterPolicy(arbPolicy(6000))
	eventually(t, 10*time.Second, "the updated policy is in force", func() error {
		if got := policyInForce(); got != sha(arbPolicy(6000)) {
			return fmt.Errorf("sha256 %s", got)
		}
		return nil
	})
	if m := lent(); m != 6000 {
		t.Errorf("lent %dm under the updated policy, want 6000m", m)
	}

	bad := strings.Replace(arbPolicy(9000), "queue: queue-1", "queue: queue-9", 1)
	e.setArbiterPolicy(bad)
	eventually(t, 10*time.Second, "the invalid policy is refused", func() error {
		if v := a.metric(`tidal_arbiter_policy_reloads_total{result="failure"}`); v != "1" {
			return fmt.Errorf("reload failures %q", v)
		}
		return nil
	})
	if got := policyInForce(); got != sha(arbPolicy(6000)) {
		t.Errorf("after an invalid update the policy is %s, want the last good one", got)
	}
	if m := lent(); m != 6000 {
		t.Errorf("lent %dm after an invalid update, want 6000m", m)
	}
	if !strings.Contains(a.log.String(), `rules[0].queue: \"queue-9\" is not a queue`) {
		t.Errorf("the log does not say why the policy was refused:\n%s", tail(a.log.String(), 20))
	}
	eventually(t, 10*time.Second, "a PolicyRejected Event on the ConfigMap", func() error {
		for _, ev := range e.events(t, "tidal-system", "tidal-arbiter-policy") {
			if strings.HasPrefix(ev, "PolicyRejected: ") && strings.Contains(ev, "configmaps/tidal-system/tidal-arbiter-policy/policy.yaml:6: rules[0].queue") {
				return nil
			}
		}
		return fmt.Errorf("events %q", e.events(t, "tidal-system", "tidal-arbiter-policy"))
	})
}

// A restart loses no lease: the leader keeps each node's lease in its Node annotation, and
// the next arbiter reads them back, so renewals keep their generation and GPUs.
func TestArbiterRestartKeepsLeases(t *testing.T) {
	e := newArbEnv(t, arbPolicy(4000), map[string]map[string]string{
		"node-a": {"tidalqos.io/pool": "batch"},
		"node-b": nil,
	})
	tokA, _ := e.agentToken("node-a", arbAudience)
	tokB, _ := e.agentToken("node-b", arbAudience)
	a := e.startArb("a", "")
	eventually(t, 15*time.Second, "the arbiter leads", func() error {
		if !a.ready() {
			return errors.New("not ready")
		}
		return nil
	})
	leaseA, err := a.report("node-a", tokA, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaseB, err := a.report("node-b", tokB, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Renewals write nothing: the annotation keeps the generation and the Node's
	// resourceVersion does not move.
	eventually(t, 10*time.Second, "node-a's lease on its Node", func() error {
		if l := e.leaseAnnotation("node-a"); l == nil || l.Generation != leaseA.Generation {
			return fmt.Errorf("annotation %+v", l)
		}
		return nil
	})
	rv := e.node(t, "node-a").ResourceVersion
	for range 3 {
		if _, err := a.report("node-a", tokA, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // > persistInterval
	}
	if now := e.node(t, "node-a").ResourceVersion; now != rv {
		t.Errorf("renewals rewrote node-a (resourceVersion %s -> %s)", rv, now)
	}

	// A clean stop releases the Lease: the next arbiter leads at once.
	if err := a.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("arbiter exit: %v\n%s", err, tail(a.log.String(), 20))
	}
	if l := e.leaseAnnotation("node-b"); l == nil || l.Generation != leaseB.Generation {
		t.Errorf("node-b annotation after the stop: %+v, want generation %d", l, leaseB.Generation)
	}
	started := time.Now()
	b := e.startArb("b", "")
	eventually(t, 15*time.Second, "the new arbiter leads", func() error {
		if !b.ready() {
			return errors.New("not ready")
		}
		return nil
	})
	t.Logf("the restarted arbiter leads %v after its start", time.Since(started).Round(10*time.Millisecond))
	if took := time.Since(started); took > arbLeaseDuration {
		t.Errorf("the restarted arbiter waited %v: the stopped one did not release the Lease", took)
	}

	var n arbiter.NodeView
	code, body := b.get("/v1/nodes/node-a", tokA)
	if code != http.StatusOK || json.Unmarshal([]byte(body), &n) != nil || !n.Restored || n.Lease.Generation != leaseA.Generation {
		t.Errorf("restored node-a: %d %s", code, body)
	}
	for node, want := range map[string]arbiterapi.Lease{"node-a": leaseA, "node-b": leaseB} {
		tok := map[string]string{"node-a": tokA, "node-b": tokB}[node]
		got, err := b.report(node, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Generation != want.Generation || fmt.Sprint(got.Grants) == "" || len(got.Grants) != len(want.Grants) {
			t.Errorf("%s after the restart: generation %d, want %d (grants %+v, were %+v)", node, got.Generation, want.Generation, got.Grants, want.Grants)
		}
		for i := range got.Grants {
			if fmt.Sprint(got.Grants[i].GPUs) != fmt.Sprint(want.Grants[i].GPUs) {
				t.Errorf("%s grant %d GPUs %v, were %v", node, i, got.Grants[i].GPUs, want.Grants[i].GPUs)
			}
		}
	}
}
