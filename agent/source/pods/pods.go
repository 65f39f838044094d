// Package pods is the Kubernetes workload source: the pods bound to this node, from a watch
// on the API server, are workloads at their kubelet cgroups. It reports problems with a pod's
// metadata as Events on the pod, publishes what the node lends on its Node object, and evicts
// pods through the Eviction API so PodDisruptionBudgets hold.
package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/evict"
	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/qos"
)

// Name is the source's name in records and actions.
const Name = "kubernetes"

// Event reasons tidal records on pods.
const (
	reasonTierDowngraded  = "TierDowngraded"
	reasonBadAnnotation   = "BadAnnotation"
	reasonSettingIgnored  = "SettingIgnored"
	reasonEvicted         = "Evicted"
	reasonEvictionBlocked = "EvictionBlocked"
)

// NotReadyKubeletCgroups is the node condition reason while the kubelet's cgroups are not found.
const NotReadyKubeletCgroups = "KubeletCgroupsNotFound"

// Options configure the source.
type Options struct {
	Node   source.Node
	Client *kube.Client
	// CgroupDriver and CgroupRoot say where the kubelet's cgroups are ("" finds out).
	CgroupDriver, CgroupRoot string
	// CPUManagerStateFile is the kubelet CPU manager's state (pinned pods).
	CPUManagerStateFile string
	// Exists says whether a cgroup exists.
	Exists func(cgroup string) bool
	// Report is what the agent says of the node now, for the Node object.
	Report func() kube.NodeReport
	Damper kube.Damper
	// Interval is how often the kubelet's state is read again and the Node published.
	Interval time.Duration
	// Grace is the eviction grace period given to evicted pods.
	Grace time.Duration
	Log   *slog.Logger
}

// Source is the pods source.
type Source struct {
	opts Options

	// changing serializes sync and drop from start to end (they register with the node, which
	// may take a pass): a resync from the slow loop must not bring back a pod the watch
	// dropped meanwhile.
	changing sync.Mutex
	mu       sync.Mutex
	// layout is nil until the kubelet's cgroups are found.
	layout *kube.CgroupLayout
	// policy says who may claim system and dedicated: nobody until the ConfigMap is read.
	policy qos.Policy
	pods   map[types.UID]*corev1.Pod
	// pinned are the kubelet CPU manager's exclusive CPUs per pod.
	pinned map[types.UID]cpuset.CPUSet
	// told remembers the last problems reported per pod, so an update does not repeat them.
	told map[types.UID]string
	// publishErr is the last failure to publish, logged once until it changes.
	publishErr string
}

// New returns the source.
func New(opts Options) *Source {
	return &Source{opts: opts, policy: qos.Policy{Restricted: true},
		pods: map[types.UID]*corev1.Pod{}, pinned: map[types.UID]cpuset.CPUSet{}, told: map[types.UID]string{}}
}

// Name implements source.Source.
func (s *Source) Name() string { return Name }

// Close lets go of the API client of a source that will not run (Run closes it itself).
func (s *Source) Close() { s.opts.Client.Close() }

// Run watches this node's pods and publishes the node's capacity until ctx is done.
func (s *Source) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.publishLoop(ctx) })
	wg.Go(func() { s.opts.Client.Run(ctx, handler{s}) })
	wg.Wait()
	return nil
}

// Policy is the tier policy in force (restricted until the ConfigMap is read).
func (s *Source) Policy() qos.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// Pinned reports the cores the kubelet's CPU manager gave a pod exclusively.
func (s *Source) Pinned(uid string) (cpuset.CPUSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.pinned[types.UID(uid)]
	return c, ok
}

// Kubepods is the kubelet's cgroup of all pods, once found.
func (s *Source) Kubepods() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.layout == nil {
		return "", false
	}
	return s.layout.Kubepods(), true
}

// handler turns watch events into source calls.
type handler struct{ s *Source }

func (h handler) PodChanged(pod *corev1.Pod) { h.s.sync(pod) }

func (h handler) PodDeleted(pod *corev1.Pod) { h.s.drop(pod.UID, "deleted") }

func (h handler) PodsSynced(pods []*corev1.Pod) {
	s := h.s
	live := map[string]bool{}
	for _, p := range pods {
		live[podName(p)] = true
		s.sync(p)
	}
	// Pods restored from the checkpoint that ended while the agent was away.
	for _, r := range s.opts.Node.Snapshot().Workloads {
		if r.Owner.Foreign() && !live[r.Name] {
			s.opts.Node.Remove(r.Name, "pod gone")
		}
	}
	s.opts.Log.Info("pods of this node synced", "pods", len(pods))
}

func (h handler) PolicyChanged(data string, err error) {
	s := h.s
	if err == nil {
		var p qos.Policy
		if p, err = kube.ParsePolicy(data); err == nil {
			s.mu.Lock()
			s.policy = p
			s.mu.Unlock()
			s.opts.Log.Info("tier policy", "system", p.SystemNamespaces, "dedicated", p.DedicatedNamespaces)
			s.resync()
			return
		}
	}
	// Keep the last good policy: a bad edit must not move running pods.
	p := s.Policy()
	s.opts.Log.Error("tier policy unusable; keeping the last good one", "err", err,
		"system", p.SystemNamespaces, "dedicated", p.DedicatedNamespaces)
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// resync syncs every known pod again, each as it is now: one dropped meanwhile stays dropped.
func (s *Source) resync() {
	s.mu.Lock()
	uids := make([]types.UID, 0, len(s.pods))
	for uid := range s.pods {
		uids = append(uids, uid)
	}
	s.mu.Unlock()
	for _, uid := range uids {
		s.changing.Lock()
		s.mu.Lock()
		pod, ok := s.pods[uid]
		s.mu.Unlock()
		if ok {
			s.apply(pod)
		}
		s.changing.Unlock()
	}
}

// sync makes a pod's workload match the pod.
func (s *Source) sync(pod *corev1.Pod) {
	s.changing.Lock()
	defer s.changing.Unlock()
	s.apply(pod)
}

// apply is sync under changing.
func (s *Source) apply(pod *corev1.Pod) {
	if kube.Finished(pod) {
		s.forget(pod.UID, "finished")
		return
	}
	s.mu.Lock()
	s.pods[pod.UID] = pod
	layout := s.layoutLocked()
	policy := s.policy
	var pinned *cpuset.CPUSet
	if c, ok := s.pinned[pod.UID]; ok {
		pinned = &c
	}
	s.mu.Unlock()
	if layout == nil {
		return // the pass retries the layout, then syncs every pod
	}
	info := kube.PodInfo{
		Meta: kube.Metadata(pod), UID: string(pod.UID), Created: pod.CreationTimestamp.Time,
		Cgroup:            layout.Pod(kube.QOSClass(pod), pod.UID),
		MilliCPU:          kube.RequestMilli(pod, corev1.ResourceCPU),
		ReclaimedMilliCPU: kube.RequestValue(pod, kube.ResourceReclaimedMilliCPU),
		ReclaimedMemory:   kube.RequestValue(pod, kube.ResourceReclaimedMemory),
		Pinned:            pinned,
		IPs:               podIPs(pod),
	}
	info.CPULimit, info.ContainerCPULimits = kube.CPULimits(pod)
	old, had := s.opts.Node.Get(podName(pod))
	if had && old.UID != string(pod.UID) && old.UID != "" {
		s.opts.Node.Remove(old.Name, "replaced by a new pod of the same name")
	}
	// A pod the kubelet is stopping is not a victim to pick again.
	info.Terminating = pod.DeletionTimestamp != nil
	_, problems := kube.PutPod(s.opts.Node, Name, info, policy)
	s.tell(pod, problems)
}

// podIPs are the pod's IPs (nil until it has one), with loopback for a pod on the host's
// network, whose own services listen there too.
func podIPs(pod *corev1.Pod) []string {
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	if len(ips) > 0 && pod.Spec.HostNetwork {
		ips = append(ips, "127.0.0.1", "::1", "localhost")
	}
	return ips
}

// tell records each problem with a pod's metadata as an Event on it, once.
func (s *Source) tell(pod *corev1.Pod, problems []error) {
	var sb strings.Builder
	for _, p := range problems {
		sb.WriteString(p.Error())
		sb.WriteByte('\n')
	}
	s.mu.Lock()
	same := s.told[pod.UID] == sb.String()
	s.told[pod.UID] = sb.String()
	s.mu.Unlock()
	if same {
		return
	}
	for _, p := range problems {
		reason := reasonSettingIgnored
		switch {
		case errors.Is(p, qos.ErrNotAllowed):
			reason = reasonTierDowngraded
		case errors.Is(p, qos.ErrMalformed):
			reason = reasonBadAnnotation
		}
		s.opts.Client.Event(pod, corev1.EventTypeWarning, reason, p.Error())
		s.opts.Log.Warn("pod metadata problem", "pod", podName(pod), "reason", reason, "problem", p.Error())
	}
}

// drop forgets a pod that ended or left the node.
func (s *Source) drop(uid types.UID, why string) {
	s.changing.Lock()
	defer s.changing.Unlock()
	s.forget(uid, why)
}

// forget is drop under changing.
func (s *Source) forget(uid types.UID, why string) {
	s.mu.Lock()
	pod, ok := s.pods[uid]
	delete(s.pods, uid)
	delete(s.told, uid)
	s.mu.Unlock()
	if !ok {
		return
	}
	if r, ok := s.opts.Node.Get(podName(pod)); ok && (r.UID == "" || r.UID == string(uid)) {
		s.opts.Node.Remove(r.Name, "pod "+why)
	}
}

// layoutLocked finds the kubelet's cgroup layout, once.
func (s *Source) layoutLocked() *kube.CgroupLayout {
	if s.layout == nil {
		l, err := kube.DetectLayout(s.opts.CgroupDriver, s.opts.CgroupRoot, s.opts.Exists)
		if err != nil {
			return nil
		}
		s.layout = &l
		s.opts.Log.Info("kubelet cgroups found", "driver", l.Driver, "kubepods", l.Kubepods())
	}
	return s.layout
}

// Refresh implements source.Refreshing: it finds the kubelet's cgroups if not yet and reads
// the CPU manager's pinned CPUs again; when either changed, every pod is synced again.
func (s *Source) Refresh() {
	pinned, err := kube.ExclusiveCPUs(s.opts.CPUManagerStateFile)
	s.mu.Lock()
	if err != nil {
		s.opts.Log.Warn("cannot read the kubelet CPU manager state; keeping the last", "err", err)
		pinned = s.pinned
	}
	changed := !samePinned(pinned, s.pinned)
	s.pinned = pinned
	hadLayout := s.layout != nil
	found := s.layoutLocked() != nil
	s.mu.Unlock()
	if found && (!hadLayout || changed) {
		s.resync()
	}
}

func samePinned(x, y map[types.UID]cpuset.CPUSet) bool {
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

// publishLoop publishes the node report, damped, every interval. A failure (API server
// away) is retried on the next tick; local enforcement goes on regardless.
func (s *Source) publishLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		s.publish(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Source) publish(ctx context.Context) {
	now := time.Now()
	r := s.opts.Report()
	s.mu.Lock()
	if s.layout == nil {
		r = kube.NodeReport{Topology: r.Topology, Reason: NotReadyKubeletCgroups,
			Message: "the kubelet's pod cgroups were not found (check kubernetes.cgroupRoot and cgroupDriver)"}
	}
	due := s.opts.Damper.Due(now, r)
	transition := s.opts.Damper.Transition(now, r)
	s.mu.Unlock()
	if !due {
		return
	}
	err := s.opts.Client.PublishNode(ctx, r, now, transition)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.opts.Damper.Published(now, r)
		if s.publishErr != "" {
			s.opts.Log.Info("node report published again")
		}
		s.publishErr = ""
	} else if msg := err.Error(); msg != s.publishErr && ctx.Err() == nil {
		s.publishErr = msg
		s.opts.Log.Warn("cannot publish the node report; retrying", "err", err)
	}
}

// Event records an Event on the pod with this UID (clipped to the API's limit); nothing for a
// pod the watch does not see.
func (s *Source) Event(uid, eventType, reason, message string) {
	s.mu.Lock()
	pod := s.pods[types.UID(uid)]
	s.mu.Unlock()
	if pod != nil {
		s.opts.Client.Event(pod, eventType, reason, kube.Clip(message))
	}
}

// Evictor implements source.Evicting: pods go through the Eviction API.
func (s *Source) Evictor() evict.Evictor { return podEvictor{s} }

type podEvictor struct{ s *Source }

// Evict asks the API server to evict a pod (PodDisruptionBudgets hold) with the configured
// grace period; the kubelet stops it and the watch reports it gone. A refusal is an error and
// an Event on the pod.
func (e podEvictor) Evict(ctx context.Context, v evict.Victim) error {
	s := e.s
	s.mu.Lock()
	pod := s.pods[types.UID(v.UID)]
	s.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("pod %s (uid %s) not seen by the pod watch", v.Name, v.UID)
	}
	if err := s.opts.Client.Evict(ctx, pod, s.opts.Grace); err != nil {
		s.opts.Client.Event(pod, corev1.EventTypeWarning, reasonEvictionBlocked, kube.Clip(fmt.Sprintf("tidal could not evict this pod (%s): %v", v.Reason, err)))
		return err
	}
	s.opts.Client.Event(pod, corev1.EventTypeWarning, reasonEvicted, kube.Clip("evicted by tidal: "+v.Reason))
	return nil
}
