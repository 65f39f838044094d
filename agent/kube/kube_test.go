package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/qos"
)

func TestPodCgroupPaths(t *testing.T) {
	cases := []struct {
		driver, root string
		class        corev1.PodQOSClass
		want         string
	}{
		{config.DriverCgroupfs, "", corev1.PodQOSGuaranteed, "kubepods/pod1b2c-3d4e"},
		{config.DriverCgroupfs, "", corev1.PodQOSBurstable, "kubepods/burstable/pod1b2c-3d4e"},
		{config.DriverCgroupfs, "custom", corev1.PodQOSBestEffort, "custom/kubepods/besteffort/pod1b2c-3d4e"},
		{config.DriverSystemd, "", corev1.PodQOSGuaranteed, "kubepods.slice/kubepods-pod1b2c_3d4e.slice"},
		{config.DriverSystemd, "", corev1.PodQOSBurstable, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c_3d4e.slice"},
		{config.DriverSystemd, "", corev1.PodQOSBestEffort, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c_3d4e.slice"},
	}
	for _, c := range cases {
		l := CgroupLayout{Driver: c.driver, Root: c.root}
		if got := l.Pod(c.class, "1b2c-3d4e"); got != c.want {
			t.Errorf("%s root %q %s: got %s, want %s", c.driver, c.root, c.class, got, c.want)
		}
	}
}

func TestDetectLayout(t *testing.T) {
	has := func(paths ...string) func(string) bool {
		return func(p string) bool {
			for _, q := range paths {
				if p == q {
					return true
				}
			}
			return false
		}
	}
	l, err := DetectLayout(config.DriverAuto, "/", has("kubepods.slice"))
	if err != nil || l.Driver != config.DriverSystemd {
		t.Fatalf("systemd slice: got %+v, %v", l, err)
	}
	l, err = DetectLayout(config.DriverAuto, "/k8s/", has("k8s/kubepods"))
	if err != nil || l.Driver != config.DriverCgroupfs || l.Kubepods() != "k8s/kubepods" {
		t.Fatalf("cgroupfs under a root: got %+v, %v", l, err)
	}
	if _, err = DetectLayout(config.DriverAuto, "/", has()); err == nil || !strings.Contains(err.Error(), "cgroupRoot") {
		t.Fatalf("no kubelet cgroups: got %v, want an error naming cgroupRoot", err)
	}
	if l, err = DetectLayout(config.DriverSystemd, "", has()); err != nil || l.Driver != config.DriverSystemd {
		t.Fatalf("a set driver is taken as is: %+v, %v", l, err)
	}
}

func container(req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func TestQOSClassAndRequests(t *testing.T) {
	cpu2 := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	half := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	lent := corev1.ResourceList{ResourceReclaimedMilliCPU: resource.MustParse("1500")}
	pod := func(cs ...corev1.Container) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}} }
	if got := QOSClass(pod(container(cpu2, cpu2))); got != corev1.PodQOSGuaranteed {
		t.Errorf("requests = limits: %s", got)
	}
	if got := QOSClass(pod(container(half, nil))); got != corev1.PodQOSBurstable {
		t.Errorf("requests only: %s", got)
	}
	if got := QOSClass(pod(container(lent, lent))); got != corev1.PodQOSBestEffort {
		t.Errorf("only extended resources: %s", got)
	}
	p := pod(container(cpu2, cpu2))
	p.Status.QOSClass = corev1.PodQOSBurstable
	if got := QOSClass(p); got != corev1.PodQOSBurstable {
		t.Errorf("status.qosClass is taken as is: %s", got)
	}
	two := pod(container(half, nil), container(cpu2, cpu2))
	two.Spec.InitContainers = []corev1.Container{container(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}, nil)}
	if r := Request(two, corev1.ResourceCPU); r.MilliValue() != 3000 {
		t.Errorf("an init container larger than the sum counts: got %dm", r.MilliValue())
	}
	// Sidecars (KEP-753) run beside the containers, and beside every init container after them.
	always := corev1.ContainerRestartPolicyAlways
	sidecar := container(half, nil)
	sidecar.RestartPolicy = &always
	withSidecar := pod(container(cpu2, cpu2))
	withSidecar.Spec.InitContainers = []corev1.Container{sidecar, container(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2200m")}, nil)}
	if r := Request(withSidecar, corev1.ResourceCPU); r.MilliValue() != 2700 {
		t.Errorf("a 500m sidecar, a 2200m init container after it and a 2-CPU container: got %dm, want 2700m", r.MilliValue())
	}
	withSidecar.Spec.InitContainers = withSidecar.Spec.InitContainers[:1]
	if r := Request(withSidecar, corev1.ResourceCPU); r.MilliValue() != 2500 {
		t.Errorf("a 500m sidecar beside a 2-CPU container: got %dm, want 2500m", r.MilliValue())
	}
	withSidecar.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	if r := Request(withSidecar, corev1.ResourceCPU); r.MilliValue() != 2750 {
		t.Errorf("the same with a RuntimeClass overhead of 250m: got %dm, want 2750m", r.MilliValue())
	}
	prio := int32(7)
	m := pod(container(lent, lent))
	m.Namespace, m.Name, m.Spec.Priority = "batch", "job-1", &prio
	md := Metadata(m)
	if md.Name != "batch/job-1" || md.Priority != 7 || len(md.Requests) != 1 || md.Requests[0] != string(ResourceReclaimedMilliCPU) {
		t.Errorf("metadata: %+v", md)
	}
	if d := qos.Classify(md, qos.Policy{}); d.Tier != qos.Reclaimed || d.ReclaimPriority != 7 {
		t.Errorf("a pod requesting reclaimed resources classifies as reclaimed with its priority: %+v", d)
	}
}

// A pod's CPU limits as its spec gives them, from which the kubelet sizes the quotas: the
// pod's is the sum of its containers' and sidecars' (an init container's if larger), none
// when one container has no limit, the pod-level limit where the pod has one; each
// container's is found by the ID its status gives it, once it has one.
func TestCPULimits(t *testing.T) {
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	named := func(name string, lim corev1.ResourceList) corev1.Container {
		c := container(nil, lim)
		c.Name = name
		return c
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := named("proxy", cpu("200m"))
	sidecar.RestartPolicy = &always
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{sidecar, named("setup", cpu("1"))},
		Containers:     []corev1.Container{named("web", cpu("500m")), named("log", cpu("100m"))},
		Overhead:       cpu("50m"),
	}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", ContainerID: "containerd://aaa"}, {Name: "log"}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", ContainerID: "containerd://ppp"}}
	podMilli, containers := CPULimits(pod)
	if podMilli != 1200 {
		t.Errorf("pod limit %dm, want 1200m (the 1-CPU init container beside the 200m sidecar; overhead left out)", podMilli)
	}
	if len(containers) != 2 || containers["aaa"] != 500 || containers["ppp"] != 200 {
		t.Errorf("container limits %v, want aaa:500 ppp:200 (log has no ID yet)", containers)
	}

	pod.Spec.InitContainers = nil
	if podMilli, _ := CPULimits(pod); podMilli != 600 {
		t.Errorf("pod limit %dm, want 600m", podMilli)
	}
	pod.Spec.Containers[1].Resources.Limits = nil
	if podMilli, containers := CPULimits(pod); podMilli != 0 || containers["aaa"] != 500 {
		t.Errorf("a container without a limit: pod limit %dm (want none), containers %v", podMilli, containers)
	}
	pod.Spec.Resources = &corev1.ResourceRequirements{Limits: cpu("2")}
	if podMilli, _ := CPULimits(pod); podMilli != 2000 {
		t.Errorf("a pod-level limit of 2 CPUs: got %dm", podMilli)
	}
}

func TestExclusiveCPUs(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "cpu_manager_state")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := ExclusiveCPUs(write(`{"policyName":"static","defaultCpuSet":"0,3","entries":{"uid-a":{"app":"1","side":"2"}},"checksum":1}`))
	if err != nil || !got["uid-a"].Equals(cpuset.New(1, 2)) || len(got) != 1 {
		t.Fatalf("static policy: got %v, %v", got, err)
	}
	if got, err = ExclusiveCPUs(write(`{"policyName":"none","defaultCpuSet":"","checksum":1}`)); err != nil || len(got) != 0 {
		t.Fatalf("none policy: got %v, %v", got, err)
	}
	if got, err = ExclusiveCPUs(filepath.Join(dir, "absent")); err != nil || len(got) != 0 {
		t.Fatalf("missing file: got %v, %v", got, err)
	}
	if _, err = ExclusiveCPUs(write(`{"policyName":"static","entries":{"uid-a":{"app":"x-1"}}}`)); err == nil || !strings.Contains(err.Error(), "uid-a") {
		t.Fatalf("bad cpuset: got %v, want an error naming the pod", err)
	}
	if _, err = ExclusiveCPUs(write(`{not json`)); err == nil {
		t.Fatal("torn file: no error")
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy("systemNamespaces: [kube-system]\ndedicatedNamespaces:\n  - prod\n")
	if err != nil || !p.Restricted || !p.Allows("prod", qos.Dedicated) || p.Allows("prod", qos.System) || !p.Allows("kube-system", qos.System) {
		t.Fatalf("good policy: %+v, %v", p, err)
	}
	if p, err = ParsePolicy(""); err != nil || !p.Restricted || p.Allows("x", qos.System) {
		t.Fatalf("empty policy allows nobody: %+v, %v", p, err)
	}
	for text, want := range map[string]string{
		"systemNamespaces: [a]\ndedicated: [b]\n": "line 2",
		"systemNamespaces: [Not_A_Name]\n":        `"Not_A_Name" is not a namespace name`,
		"systemNamespaces: kube-system\n":         "policy.yaml",
	} {
		if _, err := ParsePolicy(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePolicy(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}

func TestDamper(t *testing.T) {
	d := Damper{MinChange: 0.1, MaxAge: time.Minute}
	t0 := time.Unix(1000, 0)
	r := NodeReport{Ready: true, MilliCPU: 1000, MemoryBytes: 1 << 30}
	if !d.Due(t0, r) {
		t.Fatal("the first report is due")
	}
	if tr := d.Published(t0, r); !tr.Equal(t0) {
		t.Fatalf("first transition %v", tr)
	}
	small := r
	small.MilliCPU = 1050
	if d.Due(t0.Add(time.Second), small) {
		t.Error("a 5% move is not due")
	}
	big := r
	big.MilliCPU = 850
	if !d.Due(t0.Add(time.Second), big) {
		t.Error("a 15% move is due")
	}
	if !d.Due(t0.Add(time.Minute), small) {
		t.Error("an old report is due")
	}
	down := NodeReport{Ready: false, Reason: "MetricsStale"}
	if !d.Due(t0.Add(time.Second), down) {
		t.Error("not ready is due at once")
	}
	if tr := d.Transition(t0.Add(2*time.Second), down); !tr.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("a ready change moves the transition time: %v", tr)
	}
	if tr := d.Transition(t0.Add(3*time.Second), small); !tr.Equal(t0) {
		t.Errorf("no ready change keeps the transition time: %v", tr)
	}
	zero := r
	zero.GPUs = 0
	zero.MemoryBytes = 0
	if !d.Due(t0.Add(time.Second), zero) {
		t.Error("a fall to zero is due")
	}
}

// recordingNode keeps the last spec put: what PutPod decides is pure logic.
type recordingNode struct {
	source.Node
	last state.Spec
}

func (n *recordingNode) Put(s state.Spec) (state.Record, error) {
	n.last = s
	return state.Record{Workload: s.Workload}, nil
}

// A pod may point its SLO probe only at itself: the agent is root on the host's network. A
// probe without a host gets the pod's IP, which is not known when the pod is written.
func TestSLOProbeMustPointAtThePodItself(t *testing.T) {
	cases := []struct {
		name, probe string
		ips         []string
		want        string // the URL probed; "" for none
		problem     bool
	}{
		{"own IP", "http://10.0.0.7:8080/healthz", []string{"10.0.0.7"}, "http://10.0.0.7:8080/healthz", false},
		{"own IPv6", "http://[fd00::7]:8080/healthz", []string{"10.0.0.7", "fd00::7"}, "http://[fd00::7]:8080/healthz", false},
		{"own IPv6, spelled otherwise", "http://[FD00:0::7]:8080/healthz", []string{"10.0.0.7", "fd00::7"}, "http://[FD00:0::7]:8080/healthz", false},
		{"no host", "http://:8080/healthz", []string{"10.0.0.7"}, "http://10.0.0.7:8080/healthz", false},
		{"no host, IPv6 pod", "http://:8080/healthz", []string{"fd00::7"}, "http://[fd00::7]:8080/healthz", false},
		{"metadata service", "http://169.254.169.254/latest/meta-data", []string{"10.0.0.7"}, "", true},
		{"loopback, pod network", "http://127.0.0.1:10248/healthz", []string{"10.0.0.7"}, "", true},
		{"no IP yet", "http://:8080/healthz", nil, "", false},
		{"redis, no host", "redis://:6379/PING", []string{"10.0.0.7"}, "redis://10.0.0.7:6379/PING", false},
		{"redis, another host", "redis://10.0.0.8:6379/PING", []string{"10.0.0.7"}, "", true},
	}
	for _, c := range cases {
		n := &recordingNode{}
		meta := qos.Metadata{Name: "ns/web", Namespace: "ns", Annotations: map[string]string{
			qos.AnnotationQoSLevel: string(qos.Shared), qos.AnnotationSLOProbe: c.probe, qos.AnnotationSLOLatency: "20ms"}}
		_, problems := PutPod(n, "kubernetes", PodInfo{Meta: meta, UID: "u1", Cgroup: "kubepods/podu1", IPs: c.ips}, qos.Policy{})
		if n.last.SLO.Probe != c.want {
			t.Errorf("%s: probes %q, want %q", c.name, n.last.SLO.Probe, c.want)
		}
		var told bool
		for _, p := range problems {
			told = told || strings.Contains(p.Error(), "asks only the pod itself")
		}
		if told != c.problem {
			t.Errorf("%s: problems %v, want one about the probe's host: %v", c.name, problems, c.problem)
		}
	}
}

// A pod the kubelet's CPU manager pinned keeps the kubelet's cpusets: its NUMA binding is the
// kubelet's to keep, so the annotation is reported as ignored rather than silently dropped.
func TestNUMABindingOfAPinnedPodIsIgnoredAloud(t *testing.T) {
	pinned := cpuset.New(2, 3)
	for _, c := range []struct {
		name    string
		pinned  *cpuset.CPUSet
		binding bool // what the workload keeps
	}{{"pinned by the kubelet", &pinned, false}, {"cores tidal picks", nil, true}} {
		n := &recordingNode{}
		meta := qos.Metadata{Name: "latency-critical/quote", Namespace: "latency-critical", Annotations: map[string]string{
			qos.AnnotationQoSLevel: string(qos.Dedicated), qos.AnnotationNUMABinding: "true"}}
		policy := qos.Policy{Restricted: true, DedicatedNamespaces: []string{"latency-critical"}}
		_, problems := PutPod(n, "kubernetes", PodInfo{Meta: meta, UID: "u1", Cgroup: "kubepods/podu1", MilliCPU: 2000, Pinned: c.pinned}, policy)
		if n.last.NUMABinding != c.binding {
			t.Errorf("%s: NUMA binding %v, want %v", c.name, n.last.NUMABinding, c.binding)
		}
		var told bool
		for _, p := range problems {
			told = told || strings.Contains(p.Error(), "the kubelet's CPU manager pinned this pod")
		}
		if told == c.binding {
			t.Errorf("%s: problems %v; want one saying the binding is the kubelet's: %v", c.name, problems, !c.binding)
		}
	}
}
