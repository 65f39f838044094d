package arbiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Kubernetes is the arbiter's kubernetes mode: it keeps no state of its own beyond the API
// server. Agents' ServiceAccount tokens are checked with TokenReviews (Auth), the policy comes
// from a ConfigMap (Policy), lending rules select nodes by the Node objects' labels and leases
// are kept in a Node annotation (Nodes), and a Lease elects the one replica that decides
// (Election). Use it as:
//
//	k, _ := NewKubernetes(cfg.Kubernetes, log)
//	_ = k.Start(ctx)     // informers synced; Stop undoes it
//	opts := Options{...}; k.Apply(&opts)
//	srv, _ := NewServer(opts)
//	_ = k.Serve(ctx, srv, ln)
type Kubernetes struct {
	Auth     *TokenReviewer
	Policy   *ConfigMapPolicy
	Nodes    *NodeStore
	Election *LeaderElection

	cfg       KubernetesConfig
	log       *slog.Logger
	cs        kubernetes.Interface
	configMap cache.SharedIndexInformer
	nodes     cache.SharedIndexInformer

	// role carries the role this replica's Pod should be labelled with to labelRoles;
	// landed is the role its Pod was last labelled with ("" before the first write lands).
	role   chan string
	landed atomic.Value // string

	stopInformers context.CancelFunc
	informers     sync.WaitGroup
}

// RoleLabel is the label each replica keeps on its own Pod (KubernetesConfig.PodName): the
// leader's says RoleLeader, every other's RoleFollower. The Service selects RoleLeader.
const (
	RoleLabel    = "tidalqos.io/arbiter-role"
	RoleLeader   = "leader"
	RoleFollower = "follower"
)

// API request rates, per client: each has its own limiter, so that a burst of lease writes at
// a window's edge never delays the leader's Lease renewals, and a failover (every agent's
// token reviewed again) never delays the writes.
const (
	kubeQPS, kubeBurst     = 100, 200  // informers, Node annotation writes, Events
	reviewQPS, reviewBurst = 500, 1000 // TokenReviews
	syncTimeout            = 2 * time.Minute
)

// NewKubernetes connects to the API server (cfg.Kubeconfig, or in-cluster) and builds the
// parts; nothing runs until Start.
func NewKubernetes(cfg KubernetesConfig, log *slog.Logger) (*Kubernetes, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.RenewDeadline >= cfg.LeaseDuration || float64(cfg.RenewDeadline) <= 1.2*float64(cfg.RetryPeriod) || cfg.RetryPeriod <= 0 || cfg.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("kubernetes: leader election wants retryPeriod x 1.2 < renewDeadline < leaseDuration, the last in whole seconds: got %v, %v, %v", cfg.RetryPeriod, cfg.RenewDeadline, cfg.LeaseDuration)
	}
	base, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	withRate := func(qps float32, burst int, timeout time.Duration) *rest.Config {
		c := rest.CopyConfig(base)
		c.QPS, c.Burst, c.Timeout = qps, burst, timeout
		return c
	}
	cs, err := kubernetes.NewForConfig(withRate(kubeQPS, kubeBurst, 0))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(withRate(kubeQPS, kubeBurst, 0))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	reviews, err := kubernetes.NewForConfig(withRate(reviewQPS, reviewBurst, 0))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	// A hung request must not cost the lead: client-go advises a timeout under renewDeadline.
	election, err := kubernetes.NewForConfig(withRate(5, 10, max(cfg.RenewDeadline/2, time.Second)))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	identity, err := replicaIdentity()
	if err != nil {
		return nil, err
	}

	k := &Kubernetes{cfg: cfg, log: log, cs: cs, role: make(chan string, 1)}
	k.configMap = coreinformers.NewFilteredConfigMapInformer(cs, cfg.Namespace, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + cfg.PolicyConfigMap })
	k.nodes = metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("nodes"), "", 0, cache.Indexers{}, nil).Informer()
	if err := k.nodes.SetTransform(TrimNode); err != nil {
		return nil, err
	}

	k.Auth = NewTokenReviewer(reviews.AuthenticationV1().TokenReviews(), cfg.AgentServiceAccount, cfg.Audiences, cfg.TokenCacheTTL)
	lister := corelisters.NewConfigMapLister(k.configMap.GetIndexer()).ConfigMaps(cfg.Namespace)
	k.Policy = &ConfigMapPolicy{
		Namespace: cfg.Namespace, Name: cfg.PolicyConfigMap,
		Get:      func() (*corev1.ConfigMap, error) { return lister.Get(cfg.PolicyConfigMap) },
		OnReject: k.policyRejected,
	}
	k.Election = &LeaderElection{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
			Client:     election.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		OnRole:        k.setRole,
		Log:           log,
	}
	k.Nodes = &NodeStore{
		Nodes: k.nodes.GetStore(),
		Patch: func(ctx context.Context, node string, patch []byte) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "tidal-arbiter"})
			return err
		},
		Leading: k.Election.Leading,
		Log:     log,
	}
	return k, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "tidal-arbiter"
	return cfg, nil
}

// replicaIdentity names this replica in the Lease: the host name (the pod's name) and a
// random suffix, so that a restarted pod or two processes on one host never share one.
func replicaIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(b), nil
}

// Apply sets the options the kubernetes mode provides: Policy, Auth, Store, NodeLabels,
// Leadership and its metrics.
func (k *Kubernetes) Apply(o *Options) {
	o.Policy = k.Policy
	o.Auth = k.Auth
	o.Store = k.Nodes
	o.NodeLabels = k.Nodes
	o.Leadership = k.Election
	if k.cfg.PodName != "" {
		// A follower is Ready once its Pod says follower: until then (a write failing with the
		// API server out of reach, or a restarted container whose Pod still says leader) the
		// Service could route reports to it.
		o.FollowerReady = func() bool { r, _ := k.landed.Load().(string); return r == RoleFollower }
	}
	o.Collectors = append(o.Collectors, k.Auth.Collectors()...)
	o.Collectors = append(o.Collectors, k.Nodes.Collectors()...)
}

// Start checks the arbiter's rights, starts the informers and waits until their caches hold
// the policy ConfigMap and the Nodes. Stop stops them; Serve does so when it returns.
func (k *Kubernetes) Start(ctx context.Context) error {
	if err := k.checkRights(ctx); err != nil {
		return err
	}
	if k.cfg.PodName != "" {
		if err := k.writeRole(ctx, RoleFollower, true); err != nil {
			return fmt.Errorf("kubernetes: --pod-name (or $POD_NAME) must name this replica's Pod in %s: %w", k.cfg.Namespace, err)
		}
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.stopInformers = cancel
	k.informers.Go(func() { k.configMap.RunWithContext(ictx) })
	k.informers.Go(func() { k.nodes.RunWithContext(ictx) })
	wctx, wcancel := context.WithTimeout(ctx, syncTimeout)
	defer wcancel()
	if !cache.WaitForCacheSync(wctx.Done(), k.configMap.HasSynced, k.nodes.HasSynced) {
		k.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("kubernetes: the ConfigMap %s/%s and the Nodes could not be listed within %v: is the API server reachable?", k.cfg.Namespace, k.cfg.PolicyConfigMap, syncTimeout)
	}
	k.log.Info("kubernetes: caches synced", "nodes", len(k.nodes.GetStore().ListKeys()), "identity", k.Election.Identity())
	return nil
}

// Stop stops the informers and waits for them. It is safe to call more than once.
func (k *Kubernetes) Stop() {
	if k.stopInformers != nil {
		k.stopInformers()
	}
	k.informers.Wait()
}

// Serve runs srv on ln with the leader election and the lease writer until ctx ends. On the
// way out the order matters: the server stops and saves, the writer writes what is left, and
// only then is the Lease released, so that the next leader reads the latest leases.
func (k *Kubernetes) Serve(ctx context.Context, srv *Server, ln net.Listener) error {
	defer k.Stop()
	k.Election.OnLead = srv.Lead
	storeCtx, stopStore := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStore()
	storeDone := make(chan struct{})
	go func() {
		defer close(storeDone)
		k.Nodes.Run(storeCtx)
	}()
	// The role label outlives the election: the last change (follower, once the Lease is
	// released) is written before Serve returns.
	labelCtx, stopLabels := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLabels()
	labelsDone := make(chan struct{})
	go func() {
		defer close(labelsDone)
		k.labelRoles(labelCtx)
	}()
	k.setRole(false) // a restarted container's Pod may still say leader
	electCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	electDone := make(chan error, 1)
	go func() { electDone <- k.Election.Run(electCtx) }()

	err := srv.Serve(ctx, ln)
	stopStore()
	<-storeDone
	stopElection()
	if eerr := <-electDone; err == nil {
		err = eerr
	}
	stopLabels()
	<-labelsDone
	return err
}

// setRole asks labelRoles to label this replica's Pod as leading or not; the latest ask wins.
// It has one caller at a time (Serve before the election starts, then the election's Run), so
// its send never waits for long: only for labelRoles to take the ask it just replaced.
func (k *Kubernetes) setRole(leading bool) {
	if k.cfg.PodName == "" {
		return
	}
	role := RoleFollower
	if leading {
		role = RoleLeader
	}
	select { // replace an ask not yet written
	case <-k.role:
	default:
	}
	k.role <- role
}

// labelRoles writes the asked role onto this replica's Pod, retrying a failed write (after 1
// s, doubling to 30 s) until it lands or a newer ask replaces it. Until the leader's label
// lands the Service routes to no replica, and agents keep their leases (leaseTTL) meanwhile.
// When ctx ends it writes an ask still pending once more, so a replica that stops says
// follower.
func (k *Kubernetes) labelRoles(ctx context.Context) {
	const firstRetry, lastRetry = time.Second, 30 * time.Second
	var pending, lastErr string
	wait := firstRetry
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	pod := k.cfg.Namespace + "/" + k.cfg.PodName
	for {
		select {
		case pending = <-k.role:
			wait = firstRetry
		case <-retry.C:
		case <-ctx.Done():
			select {
			case pending = <-k.role:
			default:
			}
			if pending == "" {
				return
			}
			if err := k.writeRole(context.Background(), pending, false); err != nil {
				k.log.Warn("stopping: cannot label this replica's Pod", "pod", pod, "role", pending, "err", err)
			}
			return
		}
		if pending == "" {
			continue
		}
		if err := k.writeRole(ctx, pending, false); err != nil {
			if msg := err.Error(); msg != lastErr { // once per kind of failure, not every retry
				k.log.Warn("cannot label this replica's Pod; retrying", "pod", pod, "role", pending, "err", err)
				lastErr = msg
			}
			retry.Reset(wait)
			wait = min(2*wait, lastRetry)
			continue
		}
		pending, lastErr = "", ""
	}
}

// writeRole labels this replica's Pod with role; dryRun only asks the API server whether it
// could (the Pod exists, the rights hold).
func (k *Kubernetes) writeRole(ctx context.Context, role string, dryRun bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	opts := metav1.PatchOptions{FieldManager: "tidal-arbiter"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, RoleLabel, role)
	if _, err := k.cs.CoreV1().Pods(k.cfg.Namespace).Patch(ctx, k.cfg.PodName, types.MergePatchType, []byte(patch), opts); err != nil {
		return err
	}
	if !dryRun {
		k.landed.Store(role)
		k.log.Info("labelled this replica's Pod", "pod", k.cfg.Namespace+"/"+k.cfg.PodName, RoleLabel, role)
	}
	return nil
}

// checkRights asks the API server (SelfSubjectAccessReviews) whether the arbiter may do what
// it will do, so that a missing RBAC rule fails the start with a clear message instead of
// informers retrying forever or every report answering 503.
func (k *Kubernetes) checkRights(ctx context.Context) error {
	ns := k.cfg.Namespace
	checks := []authorizationv1.ResourceAttributes{
		{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
		{Resource: "nodes", Verb: "list"},
		{Resource: "nodes", Verb: "watch"},
		{Resource: "nodes", Verb: "patch"},
		{Namespace: ns, Resource: "configmaps", Name: k.cfg.PolicyConfigMap, Verb: "list"},
		{Namespace: ns, Resource: "configmaps", Name: k.cfg.PolicyConfigMap, Verb: "watch"},
		{Namespace: ns, Group: "coordination.k8s.io", Resource: "leases", Name: k.cfg.LeaseName, Verb: "get"},
		{Namespace: ns, Group: "coordination.k8s.io", Resource: "leases", Name: k.cfg.LeaseName, Verb: "update"},
		{Namespace: ns, Group: "coordination.k8s.io", Resource: "leases", Verb: "create"},
	}
	if k.cfg.PodName != "" {
		checks = append(checks, authorizationv1.ResourceAttributes{Namespace: ns, Resource: "pods", Name: k.cfg.PodName, Verb: "patch"})
	}
	var missing []string
	for _, a := range checks {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := k.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(rctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}},
			metav1.CreateOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("kubernetes: checking the arbiter's rights: %w", err)
		}
		if !res.Status.Allowed {
			what := a.Verb + " " + a.Resource
			if a.Group != "" {
				what += "." + a.Group
			}
			if a.Name != "" {
				what += " " + a.Name
			}
			if a.Namespace != "" {
				what += " in " + a.Namespace
			}
			missing = append(missing, what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kubernetes: the arbiter may not %s: apply deploy/arbiter.yaml's RBAC (docs/arbiter.md)", strings.Join(missing, "; "))
	}
	return nil
}

// policyRejected records why a policy was refused as a Warning Event on its ConfigMap, so
// that `kubectl describe configmap` shows it beside the logs and the reload metric.
func (k *Kubernetes) policyRejected(cm *corev1.ConfigMap, err error) {
	if cm == nil {
		return // no object to attach it to; the server logs it
	}
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	now := metav1.Now()
	host, _ := os.Hostname()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cm.Name + ".", Namespace: cm.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion,
		},
		Reason: "PolicyRejected", Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "tidal-arbiter", Host: host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "tidalqos.io/arbiter", ReportingInstance: k.Election.Identity(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := k.cs.CoreV1().Events(cm.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		k.log.Debug("cannot record the PolicyRejected event", "err", err)
	}
}
