// Package hooks is the workload source of the runtime hooks: the CRI proxy between the
// kubelet and the runtime, and the NRI plugin. A hook asks before a pod's sandbox and each
// container is created; the source registers the pod from what the runtime was told (if the
// pod watch has not yet) and answers with the agent's one decision function, so settings hold
// from a container's first instruction.
package hooks

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/cri"
	"github.com/tidalqos/tidal/isolation/nri"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Name is the source's name in records and actions.
const Name = "runtime"

// cgroupGrace is how long a pod known from a hook may be without its cgroup: the runtime
// creates it just after the sandbox hook.
const cgroupGrace = 5 * time.Second

// Options configure the source.
type Options struct {
	Node source.Node
	// Decide is the agent's decision function for a workload, on the node as it is now.
	Decide func(plugins.Workload) plugins.Decision
	// Reconcile writes the cgroups now (a pod's cgroup the kubelet just made).
	Reconcile func() error
	// Policy says who may claim the system and dedicated tiers (nil: everyone, as without
	// Kubernetes only root reaches the runtime).
	Policy func() qos.Policy
	// Pinned are the cores the kubelet's CPU manager gave a pod exclusively, by UID.
	Pinned func(uid string) (cpuset.CPUSet, bool)
	// Exists says whether a cgroup exists.
	Exists func(cgroup string) bool
	// CRI and NRI configure the hooks to serve; nil leaves one off. Their Decider is set
	// by the source.
	CRI *cri.Options
	NRI *nri.Options
	// PoolsChanged wakes the NRI plugin's refresh of running containers.
	PoolsChanged <-chan struct{}
	// Interval is how often pods whose cgroups are gone are collected.
	Interval time.Duration
	Log      *slog.Logger
}

// Source is the runtime hooks' workload source.
type Source struct{ opts Options }

// New returns the source.
func New(opts Options) *Source { return &Source{opts: opts} }

// Name implements source.Source.
func (s *Source) Name() string { return Name }

// Run serves the hooks and collects pods whose cgroups the runtime removed, until ctx is
// done. A hook server that dies ends Run with its error, so the agent stops and a supervisor
// restarts it.
func (s *Source) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Cancel, then wait: a hook that fails to start must stop the ones already serving.
	defer func() { cancel(); wg.Wait() }()
	var once sync.Once
	var failed error
	fail := func(err error) { once.Do(func() { failed = err; cancel() }) }
	if s.opts.CRI != nil {
		o := *s.opts.CRI
		o.Decider = s
		proxy, err := cri.New(o)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := proxy.Serve(ctx); err != nil {
				fail(fmt.Errorf("cri proxy: %w", err))
			}
		})
	}
	if s.opts.NRI != nil {
		o := *s.opts.NRI
		o.Decider = s
		plugin, err := nri.New(o)
		if err != nil {
			return err
		}
		wg.Go(func() { _ = plugin.Run(ctx) })
		wg.Go(func() { s.refreshNRI(ctx, plugin) })
	}
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return failed
		case <-t.C:
			s.collectGone()
		}
	}
}

// collectGone forgets pods this source registered whose cgroup the runtime removed.
func (s *Source) collectGone() {
	for _, r := range s.opts.Node.Snapshot().Workloads {
		if r.Source == Name && time.Since(r.Started) > cgroupGrace && !s.opts.Exists(r.Cgroup) {
			s.opts.Node.Remove(r.Name, "pod cgroup removed")
		}
	}
}

// refreshNRI pushes new decisions to the runtime whenever the pools' CPUs change, at most
// once a second.
func (s *Source) refreshNRI(ctx context.Context, plugin *nri.Plugin) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.PoolsChanged:
		}
		if err := plugin.Refresh(ctx); err != nil {
			s.opts.Log.Debug("NRI refresh failed; the reconcile loop holds the cgroups", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Sandbox implements isolation.Decider: it registers the pod (if the pod watch has not yet)
// and writes its cgroup, which the kubelet made before asking for the sandbox, so the pod is
// confined before anything runs in it.
func (s *Source) Sandbox(_ context.Context, pod isolation.Pod) error {
	_, known, ok := s.workload(pod)
	if !ok {
		return nil
	}
	if known {
		return s.opts.Reconcile() // a new workload was written by Put already
	}
	return nil
}

// Container implements isolation.Decider.
func (s *Source) Container(_ context.Context, pod isolation.Pod, _ string) (plugins.Decision, error) {
	r, _, ok := s.workload(pod)
	if !ok {
		return plugins.Decision{}, fmt.Errorf("pod %s/%s: no cgroup known for it", pod.Namespace, pod.Name)
	}
	return s.opts.Decide(r.Workload), nil
}

// workload is the workload of a pod a hook asks about: the one already registered (by the
// pod watch or an earlier hook), else one registered now from what the runtime was told (the
// pod watch confirms or updates it). known says it was registered before.
func (s *Source) workload(pod isolation.Pod) (r state.Record, known, ok bool) {
	name := pod.Namespace + "/" + pod.Name
	if r, ok := s.opts.Node.Get(name); ok && (r.UID == "" || r.UID == pod.UID) {
		return r, true, true
	}
	cgroup := CgroupOfParent(pod.CgroupParent)
	if cgroup == "" {
		return state.Record{}, false, false // no parent, or one naming a hierarchy's root: nothing of the pod's to write
	}
	info := kube.PodInfo{
		Meta: qos.Metadata{Name: name, Namespace: pod.Namespace, Annotations: pod.Annotations, Labels: pod.Labels},
		UID:  pod.UID, Created: time.Now(), Cgroup: cgroup,
		// What the runtime was told of the pod's CPU stands in for its request (a dedicated
		// pod's whole cores).
		MilliCPU: pod.MilliCPU,
	}
	if cpus, pinned := s.opts.Pinned(pod.UID); pinned {
		info.Pinned = &cpus
	}
	policy := qos.Policy{}
	if s.opts.Policy != nil {
		policy = s.opts.Policy()
	}
	r, problems := kube.PutPod(s.opts.Node, Name, info, policy)
	for _, p := range problems {
		s.opts.Log.Warn("pod metadata problem", "pod", name, "problem", p.Error())
	}
	return r, false, r.Name != ""
}

// CgroupOfParent turns the cgroup parent a runtime is given into a path relative to each
// hierarchy: a cgroupfs path as is, a systemd slice name expanded into its parent slices
// ("kubepods-besteffort-pod1.slice" is kubepods.slice/kubepods-besteffort.slice/...).
// The path is cleaned as if rooted, so ".." never climbs out of a hierarchy; a parent naming
// the root itself is "" (FuzzCgroupOfParent).
func CgroupOfParent(parent string) string {
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
