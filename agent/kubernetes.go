package agent

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/qos"
)

// Event reasons tidal records on pods.
const (
	reasonTierDowngraded  = "TierDowngraded"
	reasonBadAnnotation   = "BadAnnotation"
	reasonSettingIgnored  = "SettingIgnored"
	reasonEvicted         = "Evicted"
	reasonEvictionBlocked = "EvictionBlocked"
)

// Node condition reasons when the agent cannot vouch for lending.
const (
	notReadyMetricsStale   = "MetricsStale"
	notReadyCgroupWrites   = "CgroupWritesFailing"
	notReadyKubeletCgroups = "KubeletCgroupsNotFound"
)

// kubeSource is the kubernetes mode: the pods bound to this node are workloads whose cgroups
// the kubelet owns. All fields are guarded by the agent's mutex.
type kubeSource struct {
	// client is nil without Kubernetes (pods known from the runtime hooks only).
	client *kube.Client
	// layout is nil until the kubelet's cgroups are found.
	layout *kube.CgroupLayout
	// policy says who may claim system and dedicated: nobody until the ConfigMap is read.
	policy    qos.Policy
	policyErr string
	pods      map[types.UID]*corev1.Pod
	// exclusive are the kubelet CPU manager's exclusive CPUs per pod.
	exclusive map[types.UID]cpuset.CPUSet
	// told remembers the last problems reported per pod, so an update does not repeat them.
	told   map[types.UID]string
	damper kube.Damper
	// publishErr is the last failure to publish, logged once until it changes.
	publishErr string
}

// newKubeSource is nil in standalone mode without runtime hooks. With hooks but no
// Kubernetes (containerd driven directly), pods come from the hooks only: no API client,
// every tier claim allowed (only root reaches the runtime).
func newKubeSource(cfg config.Config, a *Agent) (*kubeSource, error) {
	k8s := cfg.Mode == config.ModeKubernetes
	if !k8s && !cfg.Hooks.CRIProxy && !cfg.Hooks.NRI {
		return nil, nil
	}
	var client *kube.Client
	policy := qos.Policy{}
	if k8s {
		rc, err := kube.RESTConfig(cfg.Kubernetes.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if client, err = kube.NewClient(rc, cfg.NodeName, cfg.Kubernetes.TierPolicy, a.log); err != nil {
			return nil, err
		}
		policy = qos.Policy{Restricted: true}
	}
	return &kubeSource{
		client:    client,
		policy:    policy,
		policyErr: "not read yet",
		pods:      map[types.UID]*corev1.Pod{},
		exclusive: map[types.UID]cpuset.CPUSet{},
		told:      map[types.UID]string{},
		damper:    kube.Damper{MinChange: cfg.Kubernetes.PublishMinChange, MaxAge: cfg.Kubernetes.PublishMaxAge},
	}, nil
}

// runKubernetes watches this node's pods and publishes the node's capacity until ctx is done.
func (a *Agent) runKubernetes(ctx context.Context, done func()) {
	defer done()
	publish := make(chan struct{})
	go func() {
		defer close(publish)
		a.publishNodeLoop(ctx)
	}()
	a.kube.client.Run(ctx, kubeHandler{a})
	<-publish
}

// kubeHandler turns watch events into agent calls.
type kubeHandler struct{ a *Agent }

func (h kubeHandler) PodChanged(pod *corev1.Pod) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.syncPodLocked(pod)
	h.a.afterPodsChangedLocked()
}

func (h kubeHandler) PodDeleted(pod *corev1.Pod) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.dropPodLocked(pod.UID, "deleted")
	h.a.afterPodsChangedLocked()
}

func (h kubeHandler) PodsSynced(pods []*corev1.Pod) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	live := map[string]bool{}
	for _, p := range pods {
		live[podName(p)] = true
		a.syncPodLocked(p)
	}
	// Pods restored from the checkpoint that ended while the agent was away.
	for _, w := range a.workloads {
		if w.KubeletOwned && !live[w.Name] {
			a.forgetLocked(w, "release", "pod gone")
		}
	}
	a.afterPodsChangedLocked()
	a.log.Info("pods of this node synced", "pods", len(pods))
}

func (h kubeHandler) PolicyChanged(data string, err error) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		var p qos.Policy
		if p, err = kube.ParsePolicy(data); err == nil {
			a.kube.policy, a.kube.policyErr = p, ""
			a.actionLocked("policy", "tier-policy", fmt.Sprintf("tier policy: system %v, dedicated %v", p.SystemNamespaces, p.DedicatedNamespaces))
			for _, pod := range a.kube.pods {
				a.syncPodLocked(pod)
			}
			a.afterPodsChangedLocked()
			return
		}
	}
	// Keep the last good policy: a bad edit must not move running pods.
	a.kube.policyErr = err.Error()
	a.log.Error("tier policy unusable; keeping the last good one", "err", err,
		"system", a.kube.policy.SystemNamespaces, "dedicated", a.kube.policy.DedicatedNamespaces)
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func (a *Agent) afterPodsChangedLocked() {
	if err := a.applyLocked(); err != nil {
		a.log.Error("cgroup settings failed", "err", err)
	}
	a.saveLocked()
	a.publishLocked()
}

// kubeletLayoutLocked finds the kubelet's cgroup layout, once.
func (a *Agent) kubeletLayoutLocked() *kube.CgroupLayout {
	if a.kube.layout == nil {
		l, err := kube.DetectLayout(a.cfg.Kubernetes.CgroupDriver, a.cfg.Kubernetes.CgroupRoot, a.layout.Exists)
		if err != nil {
			return nil
		}
		a.kube.layout = &l
		a.log.Info("kubelet cgroups found", "driver", l.Driver, "kubepods", l.Kubepods())
	}
	return a.kube.layout
}

// syncPodLocked makes a pod's workload match the pod: classified by the same qos function as
// every source, placed at its kubelet cgroup, with dedicated cores kept across updates.
func (a *Agent) syncPodLocked(pod *corev1.Pod) {
	k := a.kube
	if kube.Finished(pod) {
		a.dropPodLocked(pod.UID, "finished")
		return
	}
	k.pods[pod.UID] = pod
	layout := a.kubeletLayoutLocked()
	if layout == nil {
		return // the slow loop retries the layout, then syncs every pod
	}
	a.putPodLocked(pod, layout.Pod(kube.QOSClass(pod), pod.UID))
}

// putPodLocked makes (or updates) the workload of a pod whose cgroup is at cgroup.
func (a *Agent) putPodLocked(pod *corev1.Pod, cgroup string) {
	k := a.kube
	d := qos.Classify(kube.Metadata(pod), k.policy)
	problems := d.Problems
	name := podName(pod)
	old := a.workloads[name]
	if old != nil && old.pod != nil && old.pod.UID != pod.UID {
		a.forgetLocked(old, "release", "replaced by a new pod of the same name")
		old = nil
	}
	w := &workload{Workload: plugins.Workload{
		Name: name, Tier: d.Tier, Cgroup: cgroup, KubeletOwned: true,
		NUMABinding: d.NUMABinding, ReclaimPriority: d.ReclaimPriority, Started: pod.CreationTimestamp.Time,
		DedicatedCPUs: cpuset.New(),
	}, pod: pod}
	if cpus, ok := k.exclusive[pod.UID]; ok {
		// The kubelet's CPU manager pinned this pod: its cores are taken whatever its tier,
		// and its cpusets are the kubelet's.
		w.DedicatedCPUs, w.KubeletCPUs = cpus, true
	}
	switch d.Tier {
	case qos.Dedicated:
		if err := a.dedicatedPodCPUsLocked(w, old); err != nil {
			problems = append(problems, err)
			w.Tier, w.NUMABinding = qos.Shared, false
		}
	case qos.Reclaimed:
		// What a reclaimed pod asked for caps it, under what the node lends.
		req := kube.Request(pod, kube.ResourceReclaimedMilliCPU)
		w.MilliCPU = req.Value()
		mem := kube.Request(pod, kube.ResourceReclaimedMemory)
		if m := mem.Value(); m > 0 {
			w.MemoryLimit = max(m, minWrittenMemory)
		}
	}
	a.tellPodLocked(pod, problems)
	if old != nil {
		// Keep what the loops learned and what is in flight.
		w.pids, w.cpuMilli, w.cpuPrev, w.cpuAt, w.MemoryUsage = old.pids, old.cpuMilli, old.cpuPrev, old.cpuAt, old.MemoryUsage
		w.Containers = old.Containers
		w.evicting, w.refusedUntil = old.evicting, old.refusedUntil
	}
	if pod.DeletionTimestamp != nil {
		w.evicting = true // the kubelet is stopping it: not a victim to pick again
	}
	a.workloads[name] = w
	if old == nil {
		a.refreshContainersLocked(w)
		a.actionLocked("admit", "pod", fmt.Sprintf("%s as %s (%s)%s", name, w.Tier, d.Source, describeCPUs(w.Workload)))
	} else if old.Tier != w.Tier || !old.DedicatedCPUs.Equals(w.DedicatedCPUs) {
		a.actionLocked("admit", "pod", fmt.Sprintf("%s now %s (was %s)%s", name, w.Tier, old.Tier, describeCPUs(w.Workload)))
	}
}

// dedicatedPodCPUsLocked gives a dedicated pod whole cores: the kubelet CPU manager's
// exclusive ones when it has them (never written by tidal), else the cores it already had,
// else newly allocated ones for its CPU request rounded up.
func (a *Agent) dedicatedPodCPUsLocked(w, old *workload) error {
	if w.KubeletCPUs {
		return nil
	}
	if old != nil && old.Tier == qos.Dedicated && !old.KubeletCPUs && !old.DedicatedCPUs.IsEmpty() {
		w.DedicatedCPUs = old.DedicatedCPUs
		return nil
	}
	req := kube.Request(w.pod, corev1.ResourceCPU)
	n := int((req.MilliValue() + 999) / 1000)
	if n == 0 {
		return &qos.Problem{Key: qos.AnnotationQoSLevel, Value: string(qos.Dedicated), Source: qos.SourceAnnotation, Kind: qos.ErrIgnored,
			Reason: "the dedicated tier needs a CPU request (whole cores of its own); running as shared"}
	}
	taken := a.dedicatedCPUsLocked()
	if old != nil {
		taken = taken.Difference(old.DedicatedCPUs)
	}
	cpus, _, err := cpu.Allocate(a.topo, a.cfg.CPU.ReservedSystemCPUs, taken, n, w.NUMABinding)
	if err != nil {
		return &qos.Problem{Key: qos.AnnotationQoSLevel, Value: string(qos.Dedicated), Source: qos.SourceAnnotation, Kind: qos.ErrIgnored,
			Reason: fmt.Sprintf("cannot give %d whole cores: %v; running as shared", n, err)}
	}
	w.DedicatedCPUs = cpus
	return nil
}

// tellPodLocked records each problem with a pod's metadata as an Event on it, once.
func (a *Agent) tellPodLocked(pod *corev1.Pod, problems []error) {
	var sb strings.Builder
	for _, p := range problems {
		sb.WriteString(p.Error())
		sb.WriteByte('\n')
	}
	if a.kube.told[pod.UID] == sb.String() {
		return
	}
	a.kube.told[pod.UID] = sb.String()
	for _, p := range problems {
		reason := reasonSettingIgnored
		switch {
		case errors.Is(p, qos.ErrNotAllowed):
			reason = reasonTierDowngraded
		case errors.Is(p, qos.ErrMalformed):
			reason = reasonBadAnnotation
		}
		if a.kube.client != nil {
			a.kube.client.Event(pod, corev1.EventTypeWarning, reason, p.Error())
		}
		a.log.Warn("pod metadata problem", "pod", podName(pod), "reason", reason, "problem", p.Error())
	}
}

// dropPodLocked forgets a pod that ended or left the node.
func (a *Agent) dropPodLocked(uid types.UID, why string) {
	pod, ok := a.kube.pods[uid]
	if !ok {
		return
	}
	delete(a.kube.pods, uid)
	delete(a.kube.told, uid)
	if w := a.workloads[podName(pod)]; w != nil && (w.pod == nil || w.pod.UID == uid) {
		a.forgetLocked(w, "release", "pod "+why)
	}
}

// refreshContainersLocked lists a pod's container cgroups (its child cgroups).
func (a *Agent) refreshContainersLocked(w *workload) {
	names, err := a.layout.Children(w.Cgroup)
	if err != nil {
		w.Containers = nil
		return
	}
	cs := make([]string, 0, len(names))
	for _, n := range names {
		cs = append(cs, path.Join(w.Cgroup, n))
	}
	w.Containers = cs
}

// podCgroupGrace is how long a pod known from a runtime hook may be without its cgroup.
const podCgroupGrace = 5 * time.Second

// kubePassLocked is the slow loop's kubernetes work: find the kubelet's cgroups if not yet,
// re-read the CPU manager's exclusive CPUs, refresh each pod's containers.
func (a *Agent) kubePassLocked() {
	k := a.kube
	hadLayout := k.layout != nil
	exclusive, err := kube.ExclusiveCPUs(a.cfg.Kubernetes.CPUManagerStateFile)
	if err != nil {
		a.log.Warn("cannot read the kubelet CPU manager state; keeping the last", "err", err)
		exclusive = k.exclusive
	}
	changed := !sameExclusiveCPUs(exclusive, k.exclusive)
	k.exclusive = exclusive
	for _, w := range a.workloads {
		if !w.KubeletOwned {
			continue
		}
		if k.client == nil && time.Since(w.Started) > podCgroupGrace && !a.layout.Exists(w.Cgroup) {
			// Without a pod watch, a pod is gone when the runtime removed its cgroup (the
			// runtime creates it just after the sandbox hook: give it time).
			if w.pod != nil {
				delete(k.pods, w.pod.UID)
			}
			a.forgetLocked(w, "release", "pod cgroup removed")
			continue
		}
		a.refreshContainersLocked(w)
	}
	if k.client == nil || a.kubeletLayoutLocked() == nil {
		return
	}
	if !hadLayout || changed {
		for _, pod := range k.pods {
			a.syncPodLocked(pod)
		}
	}
}

func sameExclusiveCPUs(x, y map[types.UID]cpuset.CPUSet) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || !w.Equals(v) {
			return false
		}
	}
	return true
}

// kubeletExclusiveLocked are the CPUs the kubelet's CPU manager gave exclusively; they count
// as dedicated, so no pool of tidal's includes them.
func (a *Agent) kubeletExclusiveLocked() cpuset.CPUSet {
	all := cpuset.New()
	if a.kube == nil {
		return all
	}
	for _, cpus := range a.kube.exclusive {
		all = all.Union(cpus)
	}
	return all
}

// nodeReportLocked is what the Node object should say now.
func (a *Agent) nodeReportLocked() kube.NodeReport {
	r := kube.NodeReport{Ready: true, Topology: a.topologyViewLocked()}
	switch {
	case a.kube.layout == nil:
		r.Ready, r.Reason, r.Message = false, notReadyKubeletCgroups, "the kubelet's pod cgroups were not found (check kubernetes.cgroupRoot and cgroupDriver)"
	case a.applyErr != nil:
		r.Ready, r.Reason, r.Message = false, notReadyCgroupWrites, "cgroup writes failing: "+clipMessage(a.applyErr.Error())
	case !a.advisor.Primed():
		r.Ready, r.Reason, r.Message = false, notReadyMetricsStale, "node metrics are not fresh; lending nothing until they are"
	}
	if r.Ready {
		l := a.lendableLocked()
		r.MilliCPU, r.MemoryBytes, r.GPUs = l.MilliCPU, l.MemoryBytes, int64(l.GPUs)
		if a.lease != nil {
			for _, g := range a.lease.active(time.Now()) {
				if g.Queue != "" && !slices.Contains(r.Queues, g.Queue) {
					r.Queues = append(r.Queues, g.Queue)
				}
			}
			slices.Sort(r.Queues)
		}
	}
	return r
}

func clipMessage(s string) string {
	if len(s) > 512 {
		return s[:512] + "..."
	}
	return s
}

// numaView is one NUMA node in the tidalqos.io/topology annotation.
type numaView struct {
	Node              int    `json:"node"`
	CPUs              string `json:"cpus"`
	System            string `json:"system"`
	Dedicated         string `json:"dedicated"`
	Shared            string `json:"shared"`
	Reclaimed         string `json:"reclaimed"`
	ReclaimedMilliCPU int64  `json:"reclaimedMilliCPU"`
}

type topologyView struct {
	NUMA []numaView `json:"numa"`
	GPUs []gpuView  `json:"gpus,omitempty"`
}

type gpuView struct {
	UUID     string `json:"uuid"`
	NUMA     int    `json:"numa"`
	Lendable bool   `json:"lendable"`
}

func (a *Agent) topologyViewLocked() topologyView {
	var v topologyView
	plan := a.writtenPlanLocked(time.Now())
	for _, np := range a.pools {
		v.NUMA = append(v.NUMA, numaView{
			Node: np.Node, CPUs: a.topo.CPUsOfNUMA(np.Node).String(), System: np.System.String(), Dedicated: np.Dedicated.String(),
			Shared: np.Shared.String(), Reclaimed: np.Reclaimed.String(), ReclaimedMilliCPU: plan.ReclaimedMilliCPU[np.Node],
		})
	}
	for _, g := range a.gpuStatusLocked() {
		v.GPUs = append(v.GPUs, gpuView{UUID: g.UUID, NUMA: g.NUMANode, Lendable: g.Lendable})
	}
	return v
}

// publishNodeLoop publishes the node report, damped, every slow interval. A failure (API
// server away) is retried on the next tick; local enforcement goes on regardless.
func (a *Agent) publishNodeLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Loops.SlowInterval)
	defer t.Stop()
	for {
		a.mu.Lock()
		now := time.Now()
		r := a.nodeReportLocked()
		due := a.kube.damper.Due(now, r)
		transition := a.kube.damper.Transition(now, r)
		a.mu.Unlock()
		if due {
			err := a.kube.client.PublishNode(ctx, r, now, transition)
			a.mu.Lock()
			if err == nil {
				a.kube.damper.Published(now, r)
				if a.kube.publishErr != "" {
					a.log.Info("node report published again")
				}
				a.kube.publishErr = ""
			} else if msg := err.Error(); msg != a.kube.publishErr && ctx.Err() == nil {
				a.kube.publishErr = msg
				a.log.Warn("cannot publish the node report; retrying", "err", err)
			}
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// evictionRetryAfter is how long a pod whose eviction was refused is passed over.
const evictionRetryAfter = 30 * time.Second

// evictPodLocked asks the API server to evict a reclaimed pod (PodDisruptionBudgets hold);
// the kubelet stops it. A refused eviction is retried after the cool-down.
func (a *Agent) evictPodLocked(ctx context.Context, w *workload, reason string) {
	pod := w.pod
	a.background.Add(1)
	go func() {
		defer a.background.Done()
		err := a.kube.client.Evict(ctx, pod)
		a.mu.Lock()
		defer a.mu.Unlock()
		if err != nil {
			if cur := a.workloads[w.Name]; cur == w {
				w.evicting = false
				w.refusedUntil = time.Now().Add(evictionRetryAfter)
			}
			a.log.Warn("eviction refused; the next victim is tried, this one again later", "pod", w.Name, "err", err, "retryAfter", evictionRetryAfter)
			a.kube.client.Event(pod, corev1.EventTypeWarning, reasonEvictionBlocked, clipMessage(fmt.Sprintf("tidal could not evict this pod (%s): %v", reason, err)))
			return
		}
		a.kube.client.Event(pod, corev1.EventTypeWarning, reasonEvicted, clipMessage("evicted by tidal: "+reason))
	}()
}

// onlineCgroupsLocked are the cgroups whose CPU time the fast path counts as online work
// (plus) once the ones to take out of it (minus) are subtracted: tidal's online tiers and,
// in kubernetes mode, every pod but the reclaimed and dedicated ones.
func (a *Agent) onlineCgroupsLocked() (plus, minus []string) {
	plus = []string{plugins.TierPath(a.cfg.Cgroup.Root, qos.Shared)}
	if a.cfg.CPU.ReservedSystemCPUs.IsEmpty() {
		// Without reserved CPUs the system tier runs in the shared pool too.
		plus = append(plus, plugins.TierPath(a.cfg.Cgroup.Root, qos.System))
	}
	if a.kube == nil || a.kube.layout == nil {
		return plus, nil
	}
	plus = append(plus, a.kube.layout.Kubepods())
	for _, w := range a.workloads {
		if w.KubeletOwned && (w.Tier == qos.Reclaimed || w.Tier == qos.Dedicated) {
			minus = append(minus, w.Cgroup)
		}
	}
	slices.Sort(minus)
	return plus, minus
}

// reclaimedCgroupsLocked are the cgroups holding reclaimed work: tidal's tier and the
// reclaimed pods.
func (a *Agent) reclaimedCgroupsLocked() []string {
	out := []string{plugins.TierPath(a.cfg.Cgroup.Root, qos.Reclaimed)}
	for _, w := range a.workloads {
		if w.KubeletOwned && w.Tier == qos.Reclaimed {
			out = append(out, w.Cgroup)
		}
	}
	return out
}
