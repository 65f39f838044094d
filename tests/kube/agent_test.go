package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

const (
	reclaimedMilliCPU = corev1.ResourceName("tidalqos.io/reclaimed-millicpu")
	reclaimedMemory   = corev1.ResourceName("tidalqos.io/reclaimed-memory")
)

func newPod(name string, annotations map[string]string, requests corev1.ResourceList) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{"app": name}}}
	c := corev1.Container{Name: "main", Image: "tidal-test", Resources: corev1.ResourceRequirements{Requests: requests}}
	// Extended resources need limits equal to requests; so does a Guaranteed pod's CPU.
	c.Resources.Limits = requests
	p.Spec.Containers = []corev1.Container{c}
	return p
}

func cpusOf(t testing.TB, n *kubeNode, cg string) cpuset.CPUSet {
	t.Helper()
	s, err := cpuset.Parse(n.file("cpuset", cg, "cpuset.cpus"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quotaMilli is a cgroup's CFS quota in millicores, -1 without one.
func quotaMilli(t testing.TB, n *kubeNode, cg string) int64 {
	t.Helper()
	if n.layout.Version == cgroupfs.V2 {
		f := strings.Fields(n.file("cpu", cg, "cpu.max"))
		if f[0] == "max" {
			return -1
		}
		q, _ := strconv.ParseInt(f[0], 10, 64)
		p, _ := strconv.ParseInt(f[1], 10, 64)
		return q * 1000 / p
	}
	q, _ := strconv.ParseInt(n.file("cpu", cg, "cpu.cfs_quota_us"), 10, 64)
	if q < 0 {
		return -1
	}
	p, _ := strconv.ParseInt(n.file("cpu", cg, "cpu.cfs_period_us"), 10, 64)
	return q * 1000 / p
}

// Each agent may change only its own Node (deploy/agent-node-policy.yaml): the tidal-agent
// ServiceAccount's RBAC lets it patch every Node, and the admission policy refuses a patch of
// any Node (or its status) but the one its token is bound to, and every patch from a token
// bound to none. Nobody else's requests are touched.
func TestAgentTokenChangesOnlyItsOwnNode(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	nodes := map[string]*corev1.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		n, err := c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	own := c.ClientsetFor(c.agentToken(t, nodes["node-a"]))
	unbound := c.ClientsetFor(c.ServiceAccountToken(t, "tidal-system", "tidal-agent"))
	patch := func(cs kubernetes.Interface, node string, status bool) error {
		if status {
			_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
				[]byte(`{"status":{"capacity":{"tidalqos.io/reclaimed-millicpu":"1000"}}}`), metav1.PatchOptions{}, "status")
			return err
		}
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"tidalqos.io/topology":"{}"}}}`), metav1.PatchOptions{})
		return err
	}
	refused := func(err error, want string) error {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may change only the Node it runs on") || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("got %v, want refused naming %q", err, want)
		}
		return nil
	}
	// The API server enforces a policy once it has loaded it, a moment after it is created.
	eventually(t, 20*time.Second, "the policy in force", func() error { return refused(patch(own, "node-b", false), "bound to node-a") })
	for _, status := range []bool{false, true} {
		if err := patch(own, "node-a", status); err != nil {
			t.Errorf("node-a's agent patching node-a (status %v): %v", status, err)
		}
		if err := refused(patch(own, "node-b", status), "bound to node-a"); err != nil {
			t.Errorf("node-a's agent patching node-b (status %v): %v", status, err)
		}
		if err := refused(patch(unbound, "node-a", status), "names no node"); err != nil {
			t.Errorf("a token bound to no node patching node-a (status %v): %v", status, err)
		}
		if err := patch(c.admin, "node-b", status); err != nil {
			t.Errorf("the admin patching node-b (status %v): %v", status, err)
		}
	}
}

// Reclaimed pods sit in the kubelet's cgroups, outside the tier whose one quota holds tidal's
// own reclaimed work: under the quota mechanism their quotas add up to what the node lends,
// not that times the number of pods, a pod with a smaller request keeps it, and the others
// share the rest evenly. Before, each pod could use all that was lent.
func TestReclaimedPodsShareWhatIsLent(t *testing.T) {
	c := newCluster(t)
	n := newKubeNode(t, c, "node-a", "cgroupfs", "cpu:\n  mechanism: quota\n")
	n.start()
	var pods []*runningPod
	for _, name := range []string{"batch-1", "batch-2", "batch-3"} {
		pods = append(pods, n.runPod(newPod(name, map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "1"))
	}
	small := n.runPod(newPod("small", nil, corev1.ResourceList{reclaimedMilliCPU: resource.MustParse("50")}), "workload", "burner", "--threads", "1")
	lent := func() int64 {
		var sum int64
		for _, p := range n.status().Pools {
			sum += p.LentMilliCPU
		}
		return sum
	}
	eventually(t, 30*time.Second, "the pods' quotas add up to what is lent", func() error {
		before := lent()
		quotas := map[string]int64{}
		var sum int64
		for _, p := range append(pods, small) {
			quotas[p.pod.Name] = quotaMilli(t, n, p.cgroup)
			sum += quotas[p.pod.Name]
		}
		if after := lent(); after != before || before < 200 {
			return fmt.Errorf("lending %dm then %dm", before, after)
		}
		// A millicore a pod for the rounding of quotas into µs.
		if sum < before-4 || sum > before {
			return fmt.Errorf("quotas %v add up to %dm with %dm lent", quotas, sum, before)
		}
		if quotas["small"] != 50 {
			return fmt.Errorf("quotas %v: small asked for 50m", quotas)
		}
		even := (before - 50) / 3
		for _, p := range pods {
			if q := quotas[p.pod.Name]; q < even-1 || q > even+1 {
				return fmt.Errorf("quotas %v: want about %dm each for the three without a request", quotas, even)
			}
		}
		// Status shows each pod's part as it is in its cgroup.
		for _, p := range append(pods, small) {
			w, ok := n.workload("default/" + p.pod.Name)
			if q := quotas[p.pod.Name]; !ok || w.CPULimitMilliCPU < q || w.CPULimitMilliCPU > q+1 {
				return fmt.Errorf("status of %s: CPU limit %dm, its cgroup's quota %dm", p.pod.Name, w.CPULimitMilliCPU, q)
			}
		}
		return nil
	})
}

// Two agents, each with its own node name and kubelet layout (cgroupfs and systemd), see only
// their own pods, confine them in their kubelet cgroups, report on their own Node only, and
// apply the tier policy from its ConfigMap with Events for what they refuse.
func TestAgentsManageOnlyTheirOwnPods(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := newKubeNode(t, c, "node-a", "cgroupfs", "")
	// node-a has the default mechanism (quota-on-cut); node-b the quota, so that a reclaimed
	// pod without a cap of its own shows what is lent as its quota.
	b := newKubeNode(t, c, "node-b", "systemd", "cpu:\n  mechanism: quota\n")
	if _, err := c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.start()
	b.start()

	batch := a.runPod(newPod("batch", map[string]string{"tidalqos.io/qos-level": "reclaimed", "tidalqos.io/reclaim-priority": "3"},
		corev1.ResourceList{reclaimedMilliCPU: resource.MustParse("500")}), "workload", "burner", "--threads", "1")
	web := a.runLimitedPod(newPod("web", map[string]string{"tidalqos.io/cpu-burst-percent": "30"}, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}))
	dbPod := newPod("db", map[string]string{"tidalqos.io/qos-level": "dedicated"},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")})
	dbPod.Namespace = "prod"
	db := a.runPod(dbPod)
	a.runPod(newPod("odd", map[string]string{"tidalqos.io/qos-level": "bogus"}, nil))
	other := b.runPod(newPod("other", map[string]string{"katalyst.kubewharf.io/qos_level": "reclaimed_cores"}, nil), "workload", "burner", "--threads", "1")

	wantTiers := map[string]string{"default/batch": "reclaimed", "default/web": "shared", "prod/db": "shared", "default/odd": "shared"}
	eventually(t, 20*time.Second, "node-a's pods classified", func() error {
		got := map[string]string{}
		for _, w := range a.status().Workloads {
			got[w.Name] = string(w.Tier)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantTiers) {
			return fmt.Errorf("workloads %v, want %v", got, wantTiers)
		}
		return nil
	})
	eventually(t, 20*time.Second, "node-b sees its own pod only", func() error {
		ws := b.status().Workloads
		if len(ws) != 1 || ws[0].Name != "default/other" || ws[0].Tier != "reclaimed" {
			return fmt.Errorf("workloads %+v", ws)
		}
		return nil
	})

	// The reclaimed pods are confined in the kubelet's cgroups: idle priority, under what is
	// lent, on the reclaimed pool, containers included.
	for _, pc := range []struct {
		n *kubeNode
		p *runningPod
	}{{a, batch}, {b, other}} {
		n, p := pc.n, pc.p
		eventually(t, 10*time.Second, p.pod.Name+" confined", func() error {
			// The quota mechanism caps a reclaimed pod at what is lent; every mechanism at
			// its own reclaimed-millicpu request, or what is lent when smaller (batch
			// asked for 500m).
			if q := quotaMilli(t, n, p.cgroup); q <= 0 || p == batch && q > 500 {
				return fmt.Errorf("quota %dm", q)
			}
			if _, err := os.Stat(filepath.Join(n.layout.Dir("cpu", p.cgroup), "cpu.idle")); err == nil && n.file("cpu", p.cgroup, "cpu.idle") != "1" {
				return fmt.Errorf("cpu.idle %s", n.file("cpu", p.cgroup, "cpu.idle"))
			}
			if n.layout.Version == cgroupfs.V1 && !cpusOf(t, n, p.container).Equals(cpusOf(t, n, p.cgroup)) {
				return fmt.Errorf("container cpus %s, pod %s", cpusOf(t, n, p.container), cpusOf(t, n, p.cgroup))
			}
			return nil
		})
	}
	if q := quotaMilli(t, a, batch.cgroup); q > 500 {
		t.Errorf("batch asked for 500 reclaimed millicores but may use %dm", q)
	}

	// An online pod with a CPU limit bursts by its annotation's share of the quota the
	// kubelet gave its cgroups (100m: 10000 µs), the container's included; reclaimed ones
	// never burst.
	burstFile := "cpu.cfs_burst_us"
	if a.layout.Version == cgroupfs.V2 {
		burstFile = "cpu.max.burst"
	}
	if _, err := os.Stat(filepath.Join(a.layout.Dir("cpu", web.cgroup), burstFile)); err == nil {
		eventually(t, 40*time.Second, "web's CPU burst", func() error {
			for cg, want := range map[string]string{web.cgroup: "3000", web.container: "3000", batch.cgroup: "0"} {
				if got := a.file("cpu", cg, burstFile); got != want {
					return fmt.Errorf("%s %s = %s, want %s", cg, burstFile, got, want)
				}
			}
			if w, _ := a.workload("default/web"); w.CPUBurstPercent != 30 {
				return fmt.Errorf("status: web bursts %d%%, want 30%%", w.CPUBurstPercent)
			}
			return nil
		})

		// An in-place resize lowers web's limit to 20m. The kubelet then lowers its
		// quotas to 2000 µs, which the kernel refuses while the burst (3000 µs) is above
		// them; it retries until they land. The agent sizes the burst on the spec's new
		// limit (600 µs), so they do.
		// The API server admits a resize only onto a node with the CPU for it, as the
		// kubelet reports it.
		eventually(t, 10*time.Second, "node-a's allocatable CPU", func() error {
			node := c.node(t, "node-a")
			for _, l := range []*corev1.ResourceList{&node.Status.Capacity, &node.Status.Allocatable} {
				if *l == nil {
					*l = corev1.ResourceList{}
				}
				(*l)[corev1.ResourceCPU] = resource.MustParse("2")
			}
			_, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			return err
		})
		pod, err := c.admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m")},
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m")}}
		if _, err := c.admin.CoreV1().Pods("default").UpdateResize(ctx, "web", pod, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("resize web: %v", err)
		}
		eventually(t, 40*time.Second, "the kubelet's quotas for web's resize", func() error {
			return a.writer.Apply([]plugins.Cgroup{{Path: web.cgroup, Settings: plugins.Settings{CPUQuota: 20}},
				{Path: web.container, Settings: plugins.Settings{CPUQuota: 20}}})
		})
		eventually(t, 40*time.Second, "web's CPU burst after the resize", func() error {
			for _, cg := range []string{web.cgroup, web.container} {
				if q, b := quotaMilli(t, a, cg), a.file("cpu", cg, burstFile); q != 20 || b != "600" {
					return fmt.Errorf("%s: quota %dm, %s = %s; want 20m and 600", cg, q, burstFile, b)
				}
			}
			return nil
		})
	}

	// Refused claims and malformed annotations are Events on the pods.
	eventually(t, 10*time.Second, "events on refused claims", func() error {
		dbEv, oddEv := c.events(t, "prod", "db"), c.events(t, "default", "odd")
		if !slices.ContainsFunc(dbEv, func(e string) bool { return strings.HasPrefix(e, "TierDowngraded: ") && strings.Contains(e, "prod") }) {
			return fmt.Errorf("prod/db events %q", dbEv)
		}
		if !slices.ContainsFunc(oddEv, func(e string) bool { return strings.HasPrefix(e, "BadAnnotation: ") && strings.Contains(e, "bogus") }) {
			return fmt.Errorf("default/odd events %q", oddEv)
		}
		return nil
	})

	// Each agent publishes on its own Node only.
	for _, name := range []string{"node-a", "node-b"} {
		eventually(t, 20*time.Second, name+" reports reclaimed capacity", func() error {
			node := c.node(t, name)
			q, ok := node.Status.Allocatable[reclaimedMilliCPU]
			if !ok || q.Value() <= 0 {
				return fmt.Errorf("allocatable %v", node.Status.Allocatable)
			}
			if _, ok := node.Status.Capacity[reclaimedMemory]; !ok {
				return fmt.Errorf("capacity %v", node.Status.Capacity)
			}
			var ready *corev1.NodeCondition
			for i := range node.Status.Conditions {
				if node.Status.Conditions[i].Type == "TidalReclaimReady" {
					ready = &node.Status.Conditions[i]
				}
			}
			if ready == nil || ready.Status != corev1.ConditionTrue {
				return fmt.Errorf("condition %+v", ready)
			}
			var topo struct {
				NUMA []struct {
					Node    int              `json:"node"`
					CPUs    string           `json:"cpus"`
					Control reporter.Control `json:"control"`
				} `json:"numa"`
			}
			if err := json.Unmarshal([]byte(node.Annotations["tidalqos.io/topology"]), &topo); err != nil || len(topo.NUMA) == 0 {
				return fmt.Errorf("topology annotation %q: %v", node.Annotations["tidalqos.io/topology"], err)
			}
			// How lending was sized, as tidal status shows it, with the mechanism in effect
			// and, under quota-on-cut (node-a's default), the rule that chose it.
			c := topo.NUMA[0].Control
			mechanismShown := c.Mechanism == "quota"
			if name == "node-a" {
				mechanismShown = (c.Mechanism == "quota" || c.Mechanism == "idle") && strings.Contains(c.MechanismChoice, "quota-on-cut: ")
			}
			if !mechanismShown || c.Bound == "" || c.Formula == "" {
				return fmt.Errorf("topology annotation's control %+v", c)
			}
			return nil
		})
	}
	nodeC := c.node(t, "node-c")
	if len(nodeC.Status.Capacity) != 0 || len(nodeC.Status.Conditions) != 0 || len(nodeC.Annotations) != 0 {
		t.Errorf("node-c has no agent but was written: %+v %+v", nodeC.Status, nodeC.Annotations)
	}

	// Allowing prod to claim dedicated moves db onto a core of its own, which every other
	// pod's cpuset leaves out.
	c.setPolicy(t, "systemNamespaces: [kube-system]\ndedicatedNamespaces: [prod]\n")
	var dbCPUs cpuset.CPUSet
	eventually(t, 10*time.Second, "prod/db dedicated", func() error {
		w, ok := a.workload("prod/db")
		if !ok || w.Tier != "dedicated" || w.CPUs == "" {
			return fmt.Errorf("prod/db %+v", w)
		}
		var err error
		if dbCPUs, err = cpuset.Parse(w.CPUs); err != nil {
			return err
		}
		if got := cpusOf(t, a, db.cgroup); !got.Equals(dbCPUs) {
			return fmt.Errorf("db's cgroup cpus %s, want %s", got, dbCPUs)
		}
		if got := cpusOf(t, a, batch.cgroup); !got.Intersection(dbCPUs).IsEmpty() {
			return fmt.Errorf("batch's cpus %s overlap db's %s", got, dbCPUs)
		}
		return nil
	})
	a.alive()
	b.alive()
}

// Memory taken beyond what is lent evicts reclaimed pods through the Eviction API, lowest
// priority first, one at a time; a PodDisruptionBudget holds (its pod is passed over), and
// each eviction is an Event with the reason and figures.
func TestEvictionThroughTheAPILowestPriorityFirst(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	n := newKubeNode(t, c, "node-a", "cgroupfs", `memory:
  reservedSystemBytes: 1Ti
  minReclaimedBytes: 100Mi
eviction:
  coolDown: 1s`)
	n.start()
	minAvailable := intstr.FromInt32(1)
	if _, err := c.admin.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*runningPod{}
	for _, p := range []struct {
		name, prio, size string
		grace            int64 // the pod's own termination grace period; 0: the API's default (30 s)
	}{{"p5", "5", "45Mi", 0}, {"guarded", "0", "8Mi", 0}, {"p1", "1", "45Mi", 2}, {"p3", "3", "45Mi", 0}} {
		pod := newPod(p.name, map[string]string{"tidalqos.io/qos-level": "reclaimed", "tidalqos.io/reclaim-priority": p.prio}, nil)
		if p.grace > 0 {
			pod.Spec.TerminationGracePeriodSeconds = &p.grace
		}
		pods[p.name] = n.runPod(pod, "workload", "memhog", "--target", p.size, "--rate", "256Mi")
	}
	// The test's kubelet: a pod marked for deletion is stopped and removed, in the order seen.
	var evicted []string
	graces := map[string]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && len(evicted) < 2 {
		for name, p := range pods {
			cur, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.DeletionTimestamp == nil {
				continue
			}
			evicted = append(evicted, name)
			if cur.DeletionGracePeriodSeconds != nil {
				graces[name] = *cur.DeletionGracePeriodSeconds
			}
			n.stopPod(p)
			delete(pods, name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fmt.Sprint(evicted) != "[p1 p3]" {
		t.Fatalf("evicted %v, want [p1 p3] (guarded held by its PodDisruptionBudget, p5 last)", evicted)
	}
	// Each is stopped within eviction.gracePeriod (5 s), or sooner where its own grace is.
	if graces["p1"] != 2 || graces["p3"] != 5 {
		t.Errorf("grace periods %v, want p1 its own 2 s and p3 the agent's 5 s (its own is 30 s)", graces)
	}
	// What is left (p5 and guarded) fits in what is lent: nothing more goes, however many
	// times the agent looks again.
	n.waitPasses(3)
	for _, name := range []string{"p5", "guarded"} {
		if cur, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil || cur.DeletionTimestamp != nil {
			t.Errorf("%s was evicted too (%v)", name, err)
		}
	}
	ev := c.events(t, "default", "p1")
	if !slices.ContainsFunc(ev, func(e string) bool {
		return strings.HasPrefix(e, "Evicted: ") && strings.Contains(e, "priority 1") && strings.Contains(e, "MiB")
	}) {
		t.Errorf("p1's events %q: want Evicted naming the priority and the figures", ev)
	}
	if ev := c.events(t, "default", "guarded"); !slices.ContainsFunc(ev, func(e string) bool { return strings.HasPrefix(e, "EvictionBlocked: ") }) {
		t.Errorf("guarded's events %q: want EvictionBlocked", ev)
	}
	n.alive()
}

// With the API server gone the agent keeps enforcing on its own (an online spike still takes
// CPU back from reclaimed pods), does not crash, and catches up once it is back: new pods are
// managed and the Node is reported again.
func TestAPIServerGoesAwayAndComesBack(t *testing.T) {
	c := newCluster(t)
	// The quota mechanism: what is lent shows as the reclaimed pod's quota, calm or not.
	n := newKubeNode(t, c, "node-a", "cgroupfs", "cpu:\n  growStepMilliCPU: 1000\n  peakWindow: 2s\n  mechanism: quota")
	n.start()
	batch := n.runPod(newPod("batch", map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "2")
	web := n.runPod(newPod("web", nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}))
	var lent int64
	eventually(t, 30*time.Second, "batch lent a good part of the node", func() error {
		if lent = quotaMilli(t, n, batch.cgroup); lent < 500 {
			return fmt.Errorf("batch quota %dm", lent)
		}
		if _, ok := n.workload("default/web"); !ok {
			return fmt.Errorf("web not managed yet")
		}
		return nil
	})

	c.StopAPIServer(t)
	stopped := time.Now()
	// Online load arrives in the web pod while the API server is away.
	online := n.runPodProcess(web, "workload", "burner", "--threads", "2")
	eventually(t, 10*time.Second, "reclaimed CPU taken back without the API server", func() error {
		if q := quotaMilli(t, n, batch.cgroup); q > lent/2 {
			return fmt.Errorf("batch quota still %dm (was %dm)", q, lent)
		}
		return nil
	})
	n.waitPasses(2)
	n.alive()
	_ = online.Process.Kill()

	c.StartAPIServer(t)
	restarted := time.Now()
	late := n.runPod(newPod("late", map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "1")
	eventually(t, 30*time.Second, "a pod created after the restart is managed", func() error {
		if w, ok := n.workload("default/late"); !ok || w.Tier != "reclaimed" {
			return fmt.Errorf("late: %+v", w)
		}
		if q := quotaMilli(t, n, late.cgroup); q <= 0 {
			return fmt.Errorf("late's quota %dm", q)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the Node is reported again", func() error {
		for _, cond := range c.node(t, "node-a").Status.Conditions {
			if cond.Type == "TidalReclaimReady" && cond.LastHeartbeatTime.After(restarted) {
				return nil
			}
		}
		return fmt.Errorf("no TidalReclaimReady heartbeat since %s (stopped at %s)", restarted.Format(time.TimeOnly), stopped.Format(time.TimeOnly))
	})
	n.alive()
}

// Beside the kubelet's CPU manager (static policy): the CPUs it gave a container exclusively
// count as dedicated, so no pool of tidal's holds them, and tidal never writes that pod's
// cpusets.
func TestKubeletCPUManagerCoexistence(t *testing.T) {
	c := newCluster(t)
	n := newKubeNode(t, c, "node-a", "cgroupfs", "")
	if n.layout.Version != cgroupfs.V1 {
		t.Skip("cpuset files per container are checked on cgroup v1")
	}
	all := cpusOf(t, n, "")
	if all.Size() < 2 {
		t.Skip("needs 2 CPUs")
	}
	pinnedCPU := all.List()[all.Size()-1]
	n.start()
	pinned := n.runPod(newPod("pinned", nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}),
		"workload", "burner", "--threads", "1")
	// What the kubelet does for a Guaranteed pod with an integer CPU request: a checkpoint
	// entry and the container's cpuset.
	state := fmt.Sprintf(`{"policyName":"static","defaultCpuSet":"%s","entries":{"%s":{"main":"%d"}},"checksum":1}`,
		all.Difference(cpuset.New(pinnedCPU)), pinned.pod.UID, pinnedCPU)
	if err := os.WriteFile(filepath.Join(n.dir, "cpu_manager_state"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.layout.Dir("cpuset", pinned.container), "cpuset.cpus"), []byte(strconv.Itoa(pinnedCPU)), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := n.runPod(newPod("batch", map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "1")
	web := n.runPod(newPod("web", nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}))
	eventually(t, 20*time.Second, "exclusive CPU kept out of tidal's pools", func() error {
		for _, p := range []*runningPod{batch, web} {
			if got := cpusOf(t, n, p.container); got.Contains(pinnedCPU) || got.IsEmpty() {
				return fmt.Errorf("%s's container cpus %s include the pinned CPU %d", p.pod.Name, got, pinnedCPU)
			}
		}
		return nil
	})
	// Still the kubelet's value after several passes.
	n.waitPasses(3)
	if got := cpusOf(t, n, pinned.container); !got.Equals(cpuset.New(pinnedCPU)) {
		t.Fatalf("the pinned container's cpuset was rewritten: %s", got)
	}
	if w, ok := n.workload("default/pinned"); !ok || w.CPUs != strconv.Itoa(pinnedCPU) {
		t.Errorf("status of the pinned pod: %+v", w)
	}
}

// An agent that cannot do its job (here: no kubelet cgroups where it was told to look)
// publishes zero reclaimed capacity and a condition saying why, and keeps running.
func TestNodeReportsWhyItCannotLend(t *testing.T) {
	c := newCluster(t)
	n := newKubeNode(t, c, "node-a", "cgroupfs", "")
	// Point the agent at a kubelet root with no kubepods in it.
	cfg, err := os.ReadFile(n.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "cgroupRoot: /"+n.root, "cgroupRoot: /"+n.root+"/nothing-here", 1))
	if err := os.WriteFile(n.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	n.start()
	eventually(t, 20*time.Second, "not-ready condition with zero capacity", func() error {
		node := c.node(t, "node-a")
		for _, cond := range node.Status.Conditions {
			if cond.Type == "TidalReclaimReady" && cond.Status == corev1.ConditionFalse && cond.Reason == "KubeletCgroupsNotFound" {
				if q := node.Status.Allocatable[reclaimedMilliCPU]; !q.IsZero() {
					return fmt.Errorf("allocatable %s while not ready", q.String())
				}
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", node.Status.Conditions)
	})
	n.alive()
}

// A pod whose SLO target lies under what its probe answers with nothing lent hears so: once
// the feedback has cut lending to its minimum for the probe, the probe's answers there are its
// floor, and the agent records a Warning Event on the pod naming the figures (a real server
// doing 30 ms of work an answer, probed over HTTP at the pod's IP, against a 10 ms target).
func TestSLOFloorOverTargetIsAnEventOnThePod(t *testing.T) {
	c := newCluster(t)
	n := newKubeNode(t, c, "node-a", "cgroupfs", "interference:\n  shared:\n    runQueueWait: 0\n    runQueueWaitOverBaseline: 0\n")
	n.start()
	addr := testutil.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	web := n.runPod(newPod("web", map[string]string{"tidalqos.io/slo-probe": "http://:" + port + "/work", "tidalqos.io/slo-latency": "10ms"}, nil),
		"workload", "server", "--addr", addr, "--work", "30ms")
	// The pod's IP, as the kubelet reports it once the sandbox runs: the probe starts then.
	pod := web.pod.DeepCopy()
	pod.Status.PodIP, pod.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	if _, err := c.admin.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "an SLOUnreachable Event on web", func() error {
		for _, e := range c.events(t, "default", "web") {
			if strings.HasPrefix(e, "SLOUnreachable: ") {
				t.Logf("event: %s", e)
				if !strings.Contains(e, "over its 10ms target") || !strings.Contains(e, "the SLO probe http://127.0.0.1:") || !strings.Contains(e, "/work is ") {
					t.Errorf("the Event does not give the figures: %s", e)
				}
				return nil
			}
		}
		return fmt.Errorf("events %q", c.events(t, "default", "web"))
	})
	var probe reporter.Indicator
	for _, i := range n.status().Pools[0].Control.Indicators {
		if i.Workload == "default/web" && i.Name == "probe latency" {
			probe = i
		}
	}
	if probe.Baseline < 0.02 || probe.Target != 0.01 {
		t.Errorf("status shows web's probe %+v: want its baseline over 20 ms against the 10 ms target", probe)
	}
}
