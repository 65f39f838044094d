package kube

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tidalqos/tidal/qos"
)

// Extended resources a node lends to reclaimed pods.
const (
	ResourceReclaimedMilliCPU corev1.ResourceName = "tidalqos.io/reclaimed-millicpu"
	ResourceReclaimedMemory   corev1.ResourceName = "tidalqos.io/reclaimed-memory"
	ResourceReclaimedGPU      corev1.ResourceName = "tidalqos.io/reclaimed-gpu"
)

// Metadata is what qos.Classify reads from a pod.
func Metadata(pod *corev1.Pod) qos.Metadata {
	m := qos.Metadata{
		Name:        pod.Namespace + "/" + pod.Name,
		Namespace:   pod.Namespace,
		Annotations: pod.Annotations,
		Labels:      pod.Labels,
	}
	if pod.Spec.Priority != nil {
		m.Priority = *pod.Spec.Priority
	}
	seen := map[corev1.ResourceName]bool{}
	for _, c := range allContainers(pod) {
		for name := range c.Resources.Requests {
			seen[name] = true
		}
		for name := range c.Resources.Limits {
			seen[name] = true
		}
	}
	for name := range seen {
		m.Requests = append(m.Requests, string(name))
	}
	sort.Strings(m.Requests)
	return m
}

func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

// Request is what a pod asks of a resource as the scheduler counts it: the sum over its
// containers and its sidecars (init containers that keep running, restartPolicy Always), or
// what an init container needs beside the sidecars started before it, if larger (init
// containers run one at a time), plus the pod's overhead.
func Request(pod *corev1.Pod, name corev1.ResourceName) resource.Quantity {
	sum := aggregate(pod, name, requestsOf)
	if q, ok := pod.Spec.Overhead[name]; ok { // a RuntimeClass's (a sandboxed runtime's)
		sum.Add(q)
	}
	return sum
}

func requestsOf(r corev1.ResourceRequirements) corev1.ResourceList { return r.Requests }
func limitsOf(r corev1.ResourceRequirements) corev1.ResourceList   { return r.Limits }

// aggregate is what a pod's containers take of a resource together, by the scheduler's and
// the kubelet's rule (see Request), overhead left out; of picks requests or limits.
func aggregate(pod *corev1.Pod, name corev1.ResourceName, of func(corev1.ResourceRequirements) corev1.ResourceList) resource.Quantity {
	var sum, sidecars, init resource.Quantity
	for _, c := range pod.Spec.Containers {
		if q, ok := of(c.Resources)[name]; ok {
			sum.Add(q)
		}
	}
	for _, c := range pod.Spec.InitContainers {
		q := of(c.Resources)[name]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum.Add(q)
			sidecars.Add(q)
			q = sidecars.DeepCopy()
		} else {
			q.Add(sidecars)
		}
		if q.Cmp(init) > 0 {
			init = q
		}
	}
	if init.Cmp(sum) > 0 {
		sum = init
	}
	return sum
}

// CPULimits are the CPU limits, in millicores, that a pod's spec gives its cgroups, from which
// the kubelet sizes their CFS quotas: the pod's (0 when one of its containers has none, and
// so the pod's cgroup no quota), and each container's that has one, by container ID (from
// the pod's status, once the container has one). They are the spec's: an in-place resize
// changes them before the kubelet writes the new quotas, so a CPU burst sized on them never
// stands in the way of a quota lowered to them (the kernel refuses a quota below the burst).
// The pod's overhead is left out: a burst sized a little small is safe, a little large is not.
func CPULimits(pod *corev1.Pod) (podMilli int64, containers map[string]int64) {
	byName := map[string]int64{}
	for _, c := range allContainers(pod) {
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && !q.IsZero() {
			byName[c.Name] = q.MilliValue()
		}
	}
	for _, s := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		_, id, _ := strings.Cut(s.ContainerID, "://") // "containerd://<id>"
		if milli, ok := byName[s.Name]; ok && id != "" {
			if containers == nil {
				containers = map[string]int64{}
			}
			containers[id] = milli
		}
	}
	if r := pod.Spec.Resources; r != nil { // pod-level resources: the pod's limit is its own
		if q, ok := r.Limits[corev1.ResourceCPU]; ok && !q.IsZero() {
			return q.MilliValue(), containers
		}
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := byName[c.Name]; !ok {
			return 0, containers
		}
	}
	q := aggregate(pod, corev1.ResourceCPU, limitsOf)
	return q.MilliValue(), containers
}

// QOSClass is the pod's Kubernetes QoS class, which decides its cgroup. The API server sets
// status.qosClass at creation; this computes it the kubelet's way when it is missing.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests, limits := false, true
	for _, c := range allContainers(pod) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq && !req.IsZero() || hasLim && !lim.IsZero() {
				requests = true
			}
			if !hasLim || lim.IsZero() || hasReq && req.Cmp(lim) != 0 {
				limits = false
			}
		}
	}
	switch {
	case !requests:
		return corev1.PodQOSBestEffort
	case limits:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// Finished reports whether a pod's containers are done for good: its cgroup goes away and
// it holds nothing tidal must manage.
func Finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// RequestMilli is a pod's request of a resource in thousandths (millicores for CPU).
func RequestMilli(pod *corev1.Pod, name corev1.ResourceName) int64 {
	q := Request(pod, name)
	return q.MilliValue()
}

// RequestValue is a pod's request of a resource in its own units (bytes, millicpu counts).
func RequestValue(pod *corev1.Pod, name corev1.ResourceName) int64 {
	q := Request(pod, name)
	return q.Value()
}
