package agent

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidalqos/tidal/isolation"
)

// hookDecider answers the runtime hooks (CRI proxy, NRI plugin) from the agent's state with
// the same decision function the reconcile loop uses.
type hookDecider struct{ a *Agent }

// Sandbox registers the pod (if the pod watch has not yet) and writes its cgroup, which the
// kubelet made before asking for the sandbox: the pod is confined before anything runs in it.
func (h hookDecider) Sandbox(_ context.Context, pod isolation.Pod) error {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hookWorkloadLocked(pod) == nil {
		return nil
	}
	return a.applyLocked()
}

// Container decides what a container of the pod gets.
func (h hookDecider) Container(_ context.Context, pod isolation.Pod, _ string) (isolation.Decision, error) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.hookWorkloadLocked(pod)
	if w == nil {
		return isolation.Decision{}, fmt.Errorf("pod %s/%s: no cgroup known for it", pod.Namespace, pod.Name)
	}
	return isolation.Decide(w.Workload, a.nodeLocked(a.writtenPlanLocked(time.Now()))), nil
}

// hookWorkloadLocked is the workload of a pod a hook asks about: the one the pod watch made,
// else one made now from what the runtime was told (the watch confirms or replaces it).
func (a *Agent) hookWorkloadLocked(pod isolation.Pod) *workload {
	name := pod.Namespace + "/" + pod.Name
	if w := a.workloads[name]; w != nil && (w.pod == nil || string(w.pod.UID) == pod.UID) {
		return w
	}
	if p, ok := a.kube.pods[types.UID(pod.UID)]; ok {
		a.syncPodLocked(p)
		return a.workloads[name]
	}
	cgroup := cgroupOfParent(pod.CgroupParent)
	if cgroup == "" {
		return nil // no parent, or one naming a hierarchy's root: nothing of the pod's to write
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: types.UID(pod.UID),
		Annotations: pod.Annotations, Labels: pod.Labels, CreationTimestamp: metav1.Now()}}
	if pod.MilliCPU > 0 {
		// What the runtime was told of the pod's CPU stands in for its request (a dedicated
		// pod's whole cores).
		p.Spec.Containers = []corev1.Container{{Name: "pod", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(pod.MilliCPU, resource.DecimalSI)}}}}
	}
	a.kube.pods[p.UID] = p
	a.putPodLocked(p, cgroup)
	return a.workloads[name]
}

// cgroupOfParent turns the cgroup parent a runtime is given into a path relative to each
// hierarchy: a cgroupfs path as is, a systemd slice name expanded into its parent slices
// ("kubepods-besteffort-pod1.slice" is kubepods.slice/kubepods-besteffort.slice/...).
// The path is cleaned as if rooted, so ".." never climbs out of a hierarchy; a parent naming
// the root itself is "" (FuzzCgroupOfParent).
func cgroupOfParent(parent string) string {
	if !strings.HasSuffix(parent, ".slice") || strings.Contains(parent, "/") {
		return strings.TrimPrefix(path.Clean("/"+parent), "/")
	}
	parts := strings.Split(strings.TrimSuffix(parent, ".slice"), "-")
	var out []string
	for i := range parts {
		out = append(out, strings.Join(parts[:i+1], "-")+".slice")
	}
	return path.Join(out...)
}
