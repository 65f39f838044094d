// Package nri is tidal's NRI plugin (containerd >= 1.7, CRI-O; NRI v2 protocol): the same
// decisions as the CRI proxy, as container adjustments at creation, updates of running
// containers when the pools change, and at Synchronize (the plugin connecting to a runtime
// with containers already running). A decision that fails or is late leaves the container as
// the runtime would have made it (fail-open); the reconcile loop repairs it.
package nri

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
)

// PluginName and PluginIndex register tidal with the runtime: plugins run in index order;
// a high index runs tidal after resource-placement plugins, so its settings win.
const (
	PluginName  = "tidal"
	PluginIndex = "90"
)

// Options configure a Plugin.
type Options struct {
	// Socket is the runtime's NRI socket.
	Socket   string
	Timeout  time.Duration
	CgroupV2 bool
	Decider  isolation.Decider
	Observer isolation.HookObserver
	Log      *slog.Logger
}

// Plugin is the NRI plugin. Create it with New, run it with Run.
type Plugin struct {
	opts Options
	stub stub.Stub

	mu sync.Mutex
	// containers are the containers seen, for updates when the pools change.
	containers map[string]known
}

type known struct {
	pod  isolation.Pod
	name string
}

// New prepares the plugin; it connects in Run.
func New(opts Options) (*Plugin, error) {
	p := &Plugin{opts: opts, containers: map[string]known{}}
	s, err := stub.New(p, stub.WithPluginName(PluginName), stub.WithPluginIdx(PluginIndex), stub.WithSocketPath(opts.Socket),
		stub.WithOnClose(func() { opts.Log.Warn("NRI connection closed", "socket", opts.Socket) }))
	if err != nil {
		return nil, fmt.Errorf("nri plugin: %w", err)
	}
	p.stub = s
	return p, nil
}

// Run connects to the runtime and serves it until ctx is done, reconnecting when the runtime
// restarts (its socket goes away and comes back).
func (p *Plugin) Run(ctx context.Context) error {
	for {
		err := p.stub.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.opts.Log.Warn("NRI plugin disconnected; retrying", "socket", p.opts.Socket, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func podOf(pod *api.PodSandbox) isolation.Pod {
	cpu := pod.GetLinux().GetPodResources().GetCpu()
	return isolation.Pod{Name: pod.GetName(), Namespace: pod.GetNamespace(), UID: pod.GetUid(),
		Annotations: pod.GetAnnotations(), Labels: pod.GetLabels(), CgroupParent: pod.GetLinux().GetCgroupParent(),
		MilliCPU: translate.MilliCPU(cpu.GetQuota().GetValue(), int64(cpu.GetPeriod().GetValue()), int64(cpu.GetShares().GetValue()))}
}

// RunPodSandbox lets the agent write the pod's cgroup before its containers exist.
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	start := time.Now()
	_, err := p.decide(ctx, func(ctx context.Context) (plugins.Decision, error) {
		return plugins.Decision{}, p.opts.Decider.Sandbox(ctx, podOf(pod))
	})
	p.observe("RunPodSandbox", pod, err, false, start)
	return nil // never fail the pod because of tidal
}

// CreateContainer adjusts a container before it is created.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := time.Now()
	ip := podOf(pod)
	d, err := p.decide(ctx, func(ctx context.Context) (plugins.Decision, error) {
		return p.opts.Decider.Container(ctx, ip, ctr.GetName())
	})
	p.mu.Lock()
	p.containers[ctr.GetId()] = known{pod: ip, name: ctr.GetName()}
	p.mu.Unlock()
	if err != nil {
		p.observe("CreateContainer", pod, err, false, start)
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	changed := false
	if r := translate.ToContainer(d.Settings, p.opts.CgroupV2).NRI(); r != nil {
		adj.Linux = &api.LinuxContainerAdjustment{Resources: r}
		changed = true
	}
	if d.OOMScoreAdj != 0 {
		v := d.OOMScoreAdj
		adj.SetLinuxOomScoreAdj(&v)
		changed = true
	}
	for k, v := range d.Env {
		adj.AddEnv(k, v)
		changed = true
	}
	p.observe("CreateContainer", pod, nil, changed, start)
	return adj, nil, nil
}

// UpdateContainer keeps what the tier decides when the runtime is asked to change a
// container (the kubelet's UpdateContainerResources).
func (p *Plugin) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	start := time.Now()
	u, err := p.update(ctx, podOf(pod), ctr.GetId(), ctr.GetName())
	p.observe("UpdateContainer", pod, err, u != nil, start)
	if u == nil {
		return nil, nil
	}
	return []*api.ContainerUpdate{u}, nil
}

// RemoveContainer forgets a container.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.mu.Lock()
	delete(p.containers, ctr.GetId())
	p.mu.Unlock()
	return nil
}

// Synchronize brings the containers already running when the plugin connects to their
// tier's settings.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := map[string]*api.PodSandbox{}
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	var updates []*api.ContainerUpdate
	for _, c := range ctrs {
		pod, ok := byID[c.GetPodSandboxId()]
		if !ok {
			continue
		}
		start := time.Now()
		ip := podOf(pod)
		p.mu.Lock()
		p.containers[c.GetId()] = known{pod: ip, name: c.GetName()}
		p.mu.Unlock()
		u, err := p.update(ctx, ip, c.GetId(), c.GetName())
		p.observe("Synchronize", pod, err, u != nil, start)
		if u != nil {
			updates = append(updates, u)
		}
	}
	return updates, nil
}

// Refresh pushes the current decision to every known container (the pools changed). The
// reconcile loop writes the same values to the cgroups; this keeps the runtime's own view
// (which it may write back) in step.
func (p *Plugin) Refresh(ctx context.Context) error {
	p.mu.Lock()
	list := make(map[string]known, len(p.containers))
	for id, k := range p.containers {
		list[id] = k
	}
	p.mu.Unlock()
	var updates []*api.ContainerUpdate
	for id, k := range list {
		if u, err := p.update(ctx, k.pod, id, k.name); err == nil && u != nil {
			updates = append(updates, u)
		}
	}
	if len(updates) == 0 {
		return nil
	}
	_, err := p.stub.UpdateContainers(updates)
	return err
}

func (p *Plugin) update(ctx context.Context, pod isolation.Pod, id, name string) (*api.ContainerUpdate, error) {
	d, err := p.decide(ctx, func(ctx context.Context) (plugins.Decision, error) {
		return p.opts.Decider.Container(ctx, pod, name)
	})
	if err != nil {
		return nil, err
	}
	r := translate.ToContainer(d.Settings, p.opts.CgroupV2).NRI()
	if r == nil {
		return nil, nil
	}
	u := &api.ContainerUpdate{Linux: &api.LinuxContainerUpdate{Resources: r}}
	u.SetContainerId(id)
	return u, nil
}

// decide runs f under the timeout; past it the answer is dropped (fail-open).
func (p *Plugin) decide(ctx context.Context, f func(context.Context) (plugins.Decision, error)) (plugins.Decision, error) {
	return isolation.WithTimeout(ctx, p.opts.Timeout, f)
}

func (p *Plugin) observe(method string, pod *api.PodSandbox, err error, changed bool, start time.Time) {
	result := "unchanged"
	switch {
	case err != nil:
		result = "fail-open"
		p.opts.Log.Warn("NRI hook failed open: container left as the runtime makes it; the reconcile loop repairs it",
			"method", method, "pod", pod.GetNamespace()+"/"+pod.GetName(), "err", err)
	case changed:
		result = "adjusted"
	}
	if p.opts.Observer != nil {
		p.opts.Observer.HookCall("nri", method, result, time.Since(start))
	}
}
