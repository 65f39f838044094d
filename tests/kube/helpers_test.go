// Package kube_test runs real tidal agents in kubernetes mode against a real kube-apiserver
// and etcd (tests/kube/kubetest). There is no kubelet: the tests play its part, creating each
// pod's cgroups under a uniquely named cgroup root and starting real processes in them, and
// the agents run with the ServiceAccount and RBAC from deploy/, not as admin.
package kube_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/kube/kubetest"
	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// cluster is a real API server with deploy/ applied.
type cluster struct {
	*kubetest.Cluster
	admin kubernetes.Interface
}

func deployDir(t testing.TB) string {
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// newCluster starts an API server and applies deploy/ to it: first as a server-side dry run
// (the manifests must be valid for this API server), then for real.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	isolationtest.Layout(t) // skips without root
	c := &cluster{Cluster: kubetest.Start(t)}
	c.admin = c.Clientset()
	// The namespace first: a dry run cannot create the namespace its objects go in.
	if out, err := c.Kubectl(t, "apply", "-f", filepath.Join(deployDir(t), "namespace.yaml")); err != nil {
		t.Fatalf("kubectl apply -f deploy/namespace.yaml: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "apply", "-k", deployDir(t), "--dry-run=server"); err != nil {
		t.Fatalf("kubectl apply -k deploy/ --dry-run=server: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "apply", "-k", deployDir(t)); err != nil {
		t.Fatalf("kubectl apply -k deploy/: %v\n%s", err, out)
	}
	return c
}

// agentToken is a tidal-agent ServiceAccount token bound to Node node, which names it in the
// authentication.kubernetes.io/node-name extra, as the agent pod's projected token on that
// node does (deploy/agent-node-policy.yaml lets it change that Node only). A token bound to
// the Node stands in for one bound to a pod there: there is no kubelet to run the pod, and
// an agent pod would be one more workload on the node.
func (c *cluster) agentToken(t testing.TB, node *corev1.Node) string {
	t.Helper()
	return c.boundAgentToken(t, authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID})
}

// boundAgentToken is a one-hour tidal-agent ServiceAccount token bound to ref (a Node, or the
// agent's Pod), for audiences (the API server's when none).
func (c *cluster) boundAgentToken(t testing.TB, ref authenticationv1.BoundObjectReference, audiences ...string) string {
	t.Helper()
	ttl := int64(3600)
	tr, err := c.admin.CoreV1().ServiceAccounts("tidal-system").CreateToken(context.Background(), "tidal-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &ttl, BoundObjectRef: &ref},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a tidal-agent token bound to %s %s: %v", ref.Kind, ref.Name, err)
	}
	return tr.Status.Token
}

func (c *cluster) setPolicy(t testing.TB, policy string) {
	t.Helper()
	ctx := context.Background()
	cm, err := c.admin.CoreV1().ConfigMaps("tidal-system").Get(ctx, "tidal-tier-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"policy.yaml": policy}
	if _, err := c.admin.CoreV1().ConfigMaps("tidal-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) node(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n, err := c.admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// events are the Events recorded on a pod, as "Reason: message".
func (c *cluster) events(t testing.TB, ns, pod string) []string {
	t.Helper()
	list, err := c.admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// kubeNode is one agent in kubernetes mode with the part of the kubelet the tests play: its
// pods' cgroups live under a cgroup root of the test's own.
type kubeNode struct {
	t      *testing.T
	c      *cluster
	name   string
	layout *cgroupfs.Layout
	root   string // the kubelet's --cgroup-root for this node
	driver string
	dir    string
	config string
	writer *isolation.Writer
	agent  *exec.Cmd
	log    *syncBuffer
	client *agent.Client
}

// newKubeNode registers a Node and prepares an agent for it; driver is "cgroupfs" or
// "systemd" (the layout the test's kubelet uses), extra is more config YAML.
func newKubeNode(t *testing.T, c *cluster, name, driver, extra string) *kubeNode {
	t.Helper()
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	w, err := isolation.NewWriter(layout, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := &kubeNode{t: t, c: c, name: name, layout: layout, root: root, driver: driver, dir: dir, writer: w,
		config: filepath.Join(dir, "tidal.yaml"), client: agent.NewClient(filepath.Join(dir, "tidal.sock"))}
	node, err := c.admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's QoS cgroups exist before any pod.
	for _, p := range []string{root, n.kubepods(), n.qosCgroup(corev1.PodQOSBurstable), n.qosCgroup(corev1.PodQOSBestEffort)} {
		if err := w.Apply([]plugins.Cgroup{{Path: p}}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.agentToken(t, node)); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`mode: kubernetes
cgroup:
  root: %s/tidal
stateDir: %s
socketPath: %s
metricsAddress: ""
logLevel: debug
kubernetes:
  kubeconfig: %s
  cgroupRoot: /%s
  cpuManagerStateFile: %s
  publishMaxAge: 2s
%s
`, root, filepath.Join(dir, "state"), filepath.Join(dir, "tidal.sock"), kubeconfig, root, filepath.Join(dir, "cpu_manager_state"), extra)
	if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *kubeNode) kubepods() string {
	if n.driver == "systemd" {
		return n.root + "/kubepods.slice"
	}
	return n.root + "/kubepods"
}

func (n *kubeNode) qosCgroup(class corev1.PodQOSClass) string {
	cls := strings.ToLower(string(class))
	switch {
	case class == corev1.PodQOSGuaranteed:
		return n.kubepods()
	case n.driver == "systemd":
		return n.kubepods() + "/kubepods-" + cls + ".slice"
	}
	return n.kubepods() + "/" + cls
}

// podCgroup is where the kubelet puts a pod (written out here, independently of the agent).
func (n *kubeNode) podCgroup(pod *corev1.Pod) string {
	if n.driver == "systemd" {
		prefix := "kubepods"
		if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
			prefix += "-" + strings.ToLower(string(pod.Status.QOSClass))
		}
		return n.qosCgroup(pod.Status.QOSClass) + "/" + prefix + "-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	}
	return n.qosCgroup(pod.Status.QOSClass) + "/pod" + string(pod.UID)
}

func (n *kubeNode) start() {
	n.t.Helper()
	n.log = &syncBuffer{}
	n.agent = testutil.StartDaemon(n.t, "agent "+n.name, n.log, 10*time.Second, tidalBin, "agent", "--config", n.config, "--node-name", n.name)
	eventually(n.t, 15*time.Second, "agent "+n.name+" answers", func() error { _, err := n.client.Status(); return err })
}

// alive fails the test if the agent has exited.
func (n *kubeNode) alive() {
	n.t.Helper()
	if err := n.agent.Process.Signal(syscall.Signal(0)); err != nil {
		n.t.Fatalf("agent %s is gone: %v", n.name, err)
	}
}

func (n *kubeNode) status() reporter.Status {
	n.t.Helper()
	s, err := n.client.Status()
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

// waitPasses waits until the agent has completed k more slow-loop passes: a definite event
// to check that something did not happen, instead of a sleep.
func (n *kubeNode) waitPasses(k uint64) {
	n.t.Helper()
	want := n.status().SlowPasses + k
	eventually(n.t, 30*time.Second, fmt.Sprintf("%d more slow passes", k), func() error {
		if got := n.status().SlowPasses; got < want {
			return fmt.Errorf("%d passes, want %d", got, want)
		}
		return nil
	})
}

func (n *kubeNode) workload(name string) (reporter.Workload, bool) {
	for _, w := range n.status().Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return reporter.Workload{}, false
}

// runningPod is a pod the test's kubelet started: its cgroup, one container and a process.
type runningPod struct {
	pod       *corev1.Pod
	cgroup    string
	container string
	cmd       *exec.Cmd
}

// runPod creates the pod bound to this node, makes its cgroups the kubelet's way and starts
// args (a tidal workload) in its container, moved there before it runs anything. Its cgroups
// get no CPU quota (see runLimitedPod).
func (n *kubeNode) runPod(pod *corev1.Pod, args ...string) *runningPod {
	n.t.Helper()
	return n.runPodQuota(pod, 0, args...)
}

// runLimitedPod is runPod with the CPU quota the kubelet sets for the pod's one container's
// CPU limit, on the pod's cgroup and the container's.
func (n *kubeNode) runLimitedPod(pod *corev1.Pod, args ...string) *runningPod {
	n.t.Helper()
	q := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]
	return n.runPodQuota(pod, q.MilliValue(), args...)
}

func (n *kubeNode) runPodQuota(pod *corev1.Pod, quota int64, args ...string) *runningPod {
	n.t.Helper()
	pod.Spec.NodeName = n.name
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	if len(pod.Spec.Containers) == 0 {
		pod.Spec.Containers = []corev1.Container{{Name: "main", Image: "tidal-test"}}
	}
	created, err := n.c.admin.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	// Running and ready, as the kubelet reports it (the Eviction API deletes a pending pod
	// without asking its PodDisruptionBudget), its first container under an ID its cgroup
	// is named after, as a runtime names it.
	containerID := "c0ffee" + strings.ReplaceAll(string(created.UID), "-", "")[:8]
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	created.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: created.Spec.Containers[0].Name, Image: created.Spec.Containers[0].Image,
		ContainerID: "containerd://" + containerID, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		Resources: created.Spec.Containers[0].Resources.DeepCopy()}} // a kubelet that can resize says what it gave
	if created, err = n.c.admin.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
	p := &runningPod{pod: created, cgroup: n.podCgroup(created)}
	p.container = p.cgroup + "/" + containerID
	// The agent may shrink the pod cgroup's cpuset between the container cgroup's mkdir and
	// the copy of its parent's cpus into it (v1 then refuses the copy with EACCES); the
	// kubelet retries such a failure the same way.
	eventually(n.t, 5*time.Second, "create the cgroups of "+created.Name, func() error {
		return n.writer.Apply([]plugins.Cgroup{{Path: p.cgroup, Settings: plugins.Settings{CPUQuota: quota}},
			{Path: p.container, Settings: plugins.Settings{CPUQuota: quota}}})
	})
	if len(args) > 0 {
		p.cmd = n.runPodProcess(p, args...)
	}
	return p
}

// runPodProcess starts `tidal ARGS` in a pod's container, moved there before it runs anything
// (it waits on its stdin until then).
func (n *kubeNode) runPodProcess(p *runningPod, args ...string) *exec.Cmd {
	n.t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `read go && exec "$@"`, "sh", tidalBin)
	cmd.Args = append(cmd.Args, args...)
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	r.Close()
	n.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); w.Close() })
	if err := n.writer.Attach(p.container, cmd.Process.Pid); err != nil {
		n.t.Fatal(err)
	}
	if _, err := w.Write([]byte("go\n")); err != nil {
		n.t.Fatal(err)
	}
	return cmd
}

// stopPod does what the kubelet does once a pod is deleted: stops its process, removes its
// cgroups and removes the pod from the API server.
func (n *kubeNode) stopPod(p *runningPod) {
	n.t.Helper()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	for _, cg := range []string{p.container, p.cgroup} {
		eventually(n.t, 5*time.Second, "remove "+cg, func() error { return n.writer.Remove(cg) })
	}
	zero := int64(0)
	err := n.c.admin.CoreV1().Pods(p.pod.Namespace).Delete(context.Background(), p.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil {
		n.t.Fatal(err)
	}
}

// file reads a cgroup file.
func (n *kubeNode) file(controller, rel, name string) string {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(n.layout.Dir(controller, rel), name))
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// Shared helpers, under the names these tests use.
var (
	eventually = testutil.Eventually
	tail       = testutil.Tail
)

type syncBuffer = testutil.SyncBuffer
