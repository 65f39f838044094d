package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// Names tidal publishes on its Node.
const (
	AnnotationTopology = "tidalqos.io/topology"
	ConditionReady     = corev1.NodeConditionType("TidalReclaimReady")
	component          = "tidal-agent"
)

// RESTConfig loads a kubeconfig file, or the in-cluster config when path is "".
func RESTConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = component
	// A node agent talks little; a short timeout keeps a dead API server from holding a loop.
	cfg.Timeout = 10 * time.Second
	return cfg, nil
}

// Handler receives what the watches see. Calls come one at a time.
type Handler interface {
	// PodChanged: a pod bound to this node was added or updated.
	PodChanged(pod *corev1.Pod)
	// PodDeleted: a pod left this node (deleted, or no longer bound here).
	PodDeleted(pod *corev1.Pod)
	// PodsSynced: the first full list of this node's pods has been delivered.
	PodsSynced(pods []*corev1.Pod)
	// PolicyChanged: the tier policy ConfigMap changed; err says why it cannot be used
	// (missing, malformed).
	PolicyChanged(data string, err error)
}

// Client is the agent's connection to the API server for one node.
type Client struct {
	cs          kubernetes.Interface
	node        string
	policyNS    string
	policyName  string
	log         *slog.Logger
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	closeOnce   sync.Once
	// publishedQueues are the queue labels last set on the Node, first read from it
	// (queueLabelsRead); PublishNode's caller serializes calls.
	publishedQueues []string
	queueLabelsRead bool
}

// NewClient connects as cfg for node; policy is the tier policy ConfigMap "namespace/name".
func NewClient(cfg *rest.Config, node, policy string, log *slog.Logger) (*Client, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ns, name, ok := splitName(policy)
	if !ok {
		return nil, fmt.Errorf("tier policy %q: want namespace/name", policy)
	}
	b := record.NewBroadcaster()
	return &Client{
		cs: cs, node: node, policyNS: ns, policyName: name, log: log, broadcaster: b,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: node}),
	}, nil
}

func splitName(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

// Close stops the event broadcaster, whose goroutine runs from NewClient on: Run closes the
// client when it returns; a client that never runs (an agent whose start failed) must be
// closed by its owner. Events recorded after Close are dropped. Closing again does nothing.
func (c *Client) Close() { c.closeOnce.Do(c.broadcaster.Shutdown) }

// Run watches this node's pods and the tier policy and hands them to h until ctx is done,
// then closes the client. A lost API server is retried by the informers; local enforcement
// never waits on it.
func (c *Client) Run(ctx context.Context, h Handler) {
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cs.CoreV1().Events("")})
	defer c.Close()

	// Both informers' callbacks go through one channel, so h is called from this goroutine
	// only; a callback gives up once ctx is done, so the informers can shut down.
	calls := make(chan func(), 256)
	deliver := func(f func()) {
		select {
		case calls <- f:
		case <-ctx.Done():
		}
	}
	onPod := func(obj any, f func(*corev1.Pod)) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			deliver(func() { f(pod) })
		}
	}
	pods := informers.NewSharedInformerFactoryWithOptions(c.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + c.node }))
	podInformer := pods.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onPod(obj, h.PodChanged) },
		UpdateFunc: func(_, obj any) { onPod(obj, h.PodChanged) },
		DeleteFunc: func(obj any) { onPod(obj, h.PodDeleted) },
	})
	policy := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, informers.WithNamespace(c.policyNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + c.policyName }))
	policyInformer := policy.Core().V1().ConfigMaps().Informer()
	onPolicy := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		data, found := cm.Data[PolicyKey]
		var err error
		if !found {
			err = fmt.Errorf("ConfigMap %s/%s has no key %s", c.policyNS, c.policyName, PolicyKey)
		}
		deliver(func() { h.PolicyChanged(data, err) })
	}
	_, _ = policyInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onPolicy,
		UpdateFunc: func(_, obj any) { onPolicy(obj) },
		DeleteFunc: func(any) {
			deliver(func() { h.PolicyChanged("", fmt.Errorf("ConfigMap %s/%s was deleted", c.policyNS, c.policyName)) })
		},
	})
	pods.Start(ctx.Done())
	policy.Start(ctx.Done())
	defer pods.Shutdown()
	defer policy.Shutdown()

	// The first list goes out once both caches have synced; a missing policy ConfigMap is
	// reported then, since no event will say so.
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced, policyInformer.HasSynced) {
			return
		}
		// Listed on the calls loop, not here: the informer updates its cache before it
		// notifies, so the list is no older than any event handled before it, and a pod
		// deleted meanwhile is not brought back.
		lister := pods.Core().V1().Pods().Lister()
		deliver(func() {
			list, _ := lister.List(labels.Everything())
			h.PodsSynced(list)
		})
		if _, err := policy.Core().V1().ConfigMaps().Lister().ConfigMaps(c.policyNS).Get(c.policyName); err != nil {
			deliver(func() { h.PolicyChanged("", fmt.Errorf("ConfigMap %s/%s: %w", c.policyNS, c.policyName, err)) })
		}
	}()
	defer func() { <-synced }()
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-calls:
			f()
		}
	}
}

// Event records an Event on a pod (type Normal or Warning) with a reason and a message.
func (c *Client) Event(pod *corev1.Pod, eventType, reason, message string) {
	c.recorder.Event(pod, eventType, reason, message)
}

// Evict asks the API server to evict a pod (policy/v1 Eviction), so PodDisruptionBudgets
// hold, with grace as its termination grace period, or the pod's own where that is shorter
// (as the kubelet's own eviction caps a pod's grace). The UID precondition keeps a same-named
// successor from being evicted instead.
func (c *Client) Evict(ctx context.Context, pod *corev1.Pod, grace time.Duration) error {
	uid := pod.UID
	seconds := int64(grace.Round(time.Second) / time.Second)
	if own := pod.Spec.TerminationGracePeriodSeconds; own != nil && *own < seconds {
		seconds = *own
	}
	return c.cs.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, GracePeriodSeconds: &seconds},
	})
}

// Clip shortens a message for an Event or a condition.
func Clip(s string) string {
	if len(s) > 512 {
		return s[:512] + "..."
	}
	return s
}

// NodeReport is what the node lends and whether the agent can do its job.
type NodeReport struct {
	MilliCPU    int64
	MemoryBytes int64
	GPUs        int64
	// Ready is false when the agent cannot vouch for lending (metrics stale, cgroups
	// unwritable); the capacity is then zero and Reason and Message say why.
	Ready   bool
	Reason  string
	Message string
	// Topology is the per-NUMA view published as the tidalqos.io/topology annotation.
	Topology any
	// Queues are the tenant queues the node's lease lends to now; each is a label
	// queue.tidalqos.io/<queue>=true on the Node, so a queue's offline pods can select it.
	Queues []string
}

// LabelQueuePrefix starts the Node labels naming the queues the node lends to.
const LabelQueuePrefix = "queue.tidalqos.io/"

// PublishNode writes the report on this node: the reclaimed extended resources (capacity and
// allocatable) and the TidalReclaimReady condition on its status, and the topology annotation.
// transition is when Ready last changed.
func (c *Client) PublishNode(ctx context.Context, r NodeReport, now, transition time.Time) error {
	topo, err := json.Marshal(r.Topology)
	if err != nil {
		return fmt.Errorf("topology annotation: %w", err)
	}
	if !c.queueLabelsRead {
		// A run before this one (or a crash) may have left queue labels this run does not
		// know of: they would draw a queue's offline work here with nothing lent to it.
		node, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read node %s's queue labels: %w", c.node, err)
		}
		for k := range node.Labels {
			if q, ok := strings.CutPrefix(k, LabelQueuePrefix); ok {
				c.publishedQueues = append(c.publishedQueues, q)
			}
		}
		c.queueLabelsRead = true
	}
	labels := map[string]any{}
	for _, q := range r.Queues {
		labels[LabelQueuePrefix+q] = "true"
	}
	// Queues lent to before and not now: a null in a merge patch removes the label.
	for _, q := range c.publishedQueues {
		if _, ok := labels[LabelQueuePrefix+q]; !ok {
			labels[LabelQueuePrefix+q] = nil
		}
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnotationTopology: string(topo)},
		"labels":      labels,
	}})
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, meta, metav1.PatchOptions{FieldManager: component}); err != nil {
		return fmt.Errorf("annotate node %s: %w", c.node, err)
	}
	c.publishedQueues = append(c.publishedQueues[:0], r.Queues...)
	resources := map[corev1.ResourceName]string{
		ResourceReclaimedMilliCPU: strconv.FormatInt(r.MilliCPU, 10),
		ResourceReclaimedMemory:   strconv.FormatInt(r.MemoryBytes, 10),
		ResourceReclaimedGPU:      strconv.FormatInt(r.GPUs, 10),
	}
	status, reason, message := corev1.ConditionTrue, "Lending", "tidal lends what online work does not use"
	if !r.Ready {
		status, reason, message = corev1.ConditionFalse, r.Reason, r.Message
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    resources,
		"allocatable": resources,
		// Conditions merge by type in a strategic merge patch: the kubelet's stay as they are.
		"conditions": []corev1.NodeCondition{{
			Type: ConditionReady, Status: status, Reason: reason, Message: message,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(transition),
		}},
	}})
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, c.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: component}, "status"); err != nil {
		return fmt.Errorf("publish capacity on node %s: %w", c.node, err)
	}
	return nil
}
