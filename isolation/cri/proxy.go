// Package cri is tidal's CRI proxy: a gRPC server on the socket the kubelet points at
// (--container-runtime-endpoint) that forwards every call to the real runtime's socket. On
// RunPodSandbox, CreateContainer and UpdateContainerResources it asks a Decider for the tier's
// settings and fills them in, so a container starts confined and the kubelet cannot undo it.
// Every other call (and the whole ImageService) is forwarded as raw bytes, unparsed, so new
// CRI methods pass through unchanged.
//
// Fail-open: when the Decider errors or takes longer than the timeout, the call is forwarded
// unchanged, counted and logged; the agent's reconcile loop repairs the settings later.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
)

// Pod, Decider and Observer are the hooks' shared shapes (isolation/hooks.go).
type (
	Pod      = isolation.Pod
	Decider  = isolation.Decider
	Observer = isolation.HookObserver
)

// Options configure a Proxy.
type Options struct {
	// Socket is where the proxy listens (root-only); RuntimeSocket the real runtime's.
	Socket, RuntimeSocket string
	// Timeout bounds a decision; past it the call goes on unchanged.
	Timeout time.Duration
	// CgroupV2: the node runs the unified hierarchy, so cpu.idle can be passed as a unified
	// resource (runc refuses unified resources on v1).
	CgroupV2 bool
	Decider  Decider
	Observer Observer
	Log      *slog.Logger
}

// Proxy is the CRI proxy. Create it with New, run it with Serve.
type Proxy struct {
	opts    Options
	conn    *grpc.ClientConn
	runtime runtimeapi.RuntimeServiceClient
	server  *grpc.Server

	mu sync.Mutex
	// sandboxes and containers remember pods by sandbox ID and container IDs' sandboxes, so
	// UpdateContainerResources (which names only a container) finds its pod.
	sandboxes  map[string]Pod
	containers map[string]string
}

// New connects to the runtime (lazily: gRPC dials on first use) and prepares the server.
func New(opts Options) (*Proxy, error) {
	if opts.Decider == nil || opts.Log == nil {
		return nil, errors.New("cri proxy: a Decider and a Log are required")
	}
	conn, err := grpc.NewClient("unix://"+opts.RuntimeSocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}), grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("cri proxy: runtime %s: %w", opts.RuntimeSocket, err)
	}
	p := &Proxy{opts: opts, conn: conn, runtime: runtimeapi.NewRuntimeServiceClient(conn),
		sandboxes: map[string]Pod{}, containers: map[string]string{}}
	p.server = grpc.NewServer(grpc.ForceServerCodecV2(codec{}), grpc.UnknownServiceHandler(p.forward),
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage))
	p.server.RegisterService(&interceptedDesc, p)
	return p, nil
}

// maxMessage is the kubelet's own limit for CRI messages (16 MiB).
const maxMessage = 16 << 20

// Serve listens on the socket (0600 in a 0700 folder) until ctx is done.
func (p *Proxy) Serve(ctx context.Context) error {
	defer p.conn.Close()
	if err := os.MkdirAll(filepath.Dir(p.opts.Socket), 0o700); err != nil {
		return err
	}
	_ = os.Remove(p.opts.Socket)
	ln, err := net.Listen("unix", p.opts.Socket)
	if err != nil {
		return fmt.Errorf("cri proxy socket %s: %w", p.opts.Socket, err)
	}
	if err := os.Chmod(p.opts.Socket, 0o600); err != nil {
		ln.Close()
		return err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		p.server.GracefulStop()
	}()
	err = p.server.Serve(ln)
	<-stopped
	_ = os.Remove(p.opts.Socket)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop ends Serve now (tests).
func (p *Proxy) Stop() { p.server.Stop() }

// interceptedDesc registers the calls the proxy reads (three it decides on, two that end what
// it remembers); grpc hands every other method of the RuntimeService (and every other
// service) to the raw forwarder.
var interceptedDesc = grpc.ServiceDesc{
	ServiceName: "runtime.v1.RuntimeService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "RunPodSandbox", Handler: unary(func(p *Proxy, ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (any, error) {
			return p.runPodSandbox(ctx, r)
		})},
		{MethodName: "CreateContainer", Handler: unary(func(p *Proxy, ctx context.Context, r *runtimeapi.CreateContainerRequest) (any, error) {
			return p.createContainer(ctx, r)
		})},
		{MethodName: "UpdateContainerResources", Handler: unary(func(p *Proxy, ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (any, error) {
			return p.updateContainerResources(ctx, r)
		})},
		{MethodName: "RemoveContainer", Handler: unary(func(p *Proxy, ctx context.Context, r *runtimeapi.RemoveContainerRequest) (any, error) {
			return p.removeContainer(ctx, r)
		})},
		{MethodName: "RemovePodSandbox", Handler: unary(func(p *Proxy, ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (any, error) {
			return p.removePodSandbox(ctx, r)
		})},
	},
}

// unary adapts a typed handler to grpc's method handler shape (no interceptors are used).
func unary[Req any](h func(*Proxy, context.Context, *Req) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		req := new(Req)
		if err := dec(req); err != nil {
			return nil, err
		}
		return h(srv.(*Proxy), outgoing(ctx), req)
	}
}

// outgoing passes the kubelet's request metadata on to the runtime.
func outgoing(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return metadata.NewOutgoingContext(ctx, md)
	}
	return ctx
}

func podOf(cfg *runtimeapi.PodSandboxConfig) Pod {
	r := cfg.GetLinux().GetResources()
	pod := Pod{Annotations: cfg.GetAnnotations(), Labels: cfg.GetLabels(), CgroupParent: cfg.GetLinux().GetCgroupParent(),
		MilliCPU: translate.MilliCPU(r.GetCpuQuota(), r.GetCpuPeriod(), r.GetCpuShares())}
	if m := cfg.GetMetadata(); m != nil {
		pod.Name, pod.Namespace, pod.UID = m.Name, m.Namespace, m.Uid
	}
	return pod
}

func (p *Proxy) runPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (any, error) {
	pod := podOf(r.GetConfig())
	start := time.Now()
	_, err := isolation.WithTimeout(ctx, p.opts.Timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, p.opts.Decider.Sandbox(ctx, pod)
	})
	p.observe("RunPodSandbox", pod, err, true, start)
	resp, err := p.runtime.RunPodSandbox(ctx, r)
	if err == nil {
		p.mu.Lock()
		p.sandboxes[resp.PodSandboxId] = pod
		p.mu.Unlock()
	}
	return resp, err
}

func (p *Proxy) createContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (any, error) {
	pod := podOf(r.GetSandboxConfig())
	name := r.GetConfig().GetMetadata().GetName()
	start := time.Now()
	d, err := isolation.WithTimeout(ctx, p.opts.Timeout, func(ctx context.Context) (plugins.Decision, error) {
		return p.opts.Decider.Container(ctx, pod, name)
	})
	changed := false
	if err == nil && r.Config != nil {
		if r.Config.Linux == nil {
			r.Config.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		if r.Config.Linux.Resources == nil {
			r.Config.Linux.Resources = &runtimeapi.LinuxContainerResources{}
		}
		changed = p.fill(r.Config.Linux.Resources, d)
		if d.OOMScoreAdj != 0 && r.Config.Linux.Resources.OomScoreAdj != int64(d.OOMScoreAdj) {
			r.Config.Linux.Resources.OomScoreAdj = int64(d.OOMScoreAdj)
			changed = true
		}
		r.Config.Envs, changed = setEnv(r.Config.Envs, d.Env, changed)
	}
	p.observe("CreateContainer", pod, err, changed, start)
	resp, err := p.runtime.CreateContainer(ctx, r)
	if err == nil {
		p.mu.Lock()
		p.containers[resp.ContainerId] = r.PodSandboxId
		if _, ok := p.sandboxes[r.PodSandboxId]; !ok {
			p.sandboxes[r.PodSandboxId] = pod
		}
		p.mu.Unlock()
	}
	return resp, err
}

func (p *Proxy) updateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (any, error) {
	start := time.Now()
	pod, name, err := p.containerPod(ctx, r.ContainerId)
	var d plugins.Decision
	if err == nil {
		d, err = isolation.WithTimeout(ctx, p.opts.Timeout, func(ctx context.Context) (plugins.Decision, error) {
			return p.opts.Decider.Container(ctx, pod, name)
		})
	}
	changed := false
	if err == nil {
		if r.Linux == nil {
			r.Linux = &runtimeapi.LinuxContainerResources{}
		}
		changed = p.fill(r.Linux, d)
	}
	p.observe("UpdateContainerResources", pod, err, changed, start)
	return p.runtime.UpdateContainerResources(ctx, r)
}

// removeContainer forwards the removal and, once the runtime has removed it, forgets the
// container: a node that runs pod after pod must not remember them all.
func (p *Proxy) removeContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (any, error) {
	resp, err := p.runtime.RemoveContainer(ctx, r)
	if err == nil {
		p.mu.Lock()
		delete(p.containers, r.ContainerId)
		p.mu.Unlock()
	}
	return resp, err
}

// removePodSandbox forwards the removal and forgets the pod and its containers once removed.
func (p *Proxy) removePodSandbox(ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (any, error) {
	resp, err := p.runtime.RemovePodSandbox(ctx, r)
	if err == nil {
		p.mu.Lock()
		delete(p.sandboxes, r.PodSandboxId)
		for id, sandbox := range p.containers {
			if sandbox == r.PodSandboxId {
				delete(p.containers, id)
			}
		}
		p.mu.Unlock()
	}
	return resp, err
}

// containerPod finds a container's pod: remembered from CreateContainer, else (a container
// created before the proxy started) asked of the runtime and remembered.
func (p *Proxy) containerPod(ctx context.Context, id string) (Pod, string, error) {
	st, err := p.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return Pod{}, "", fmt.Errorf("container %s: %w", id, err)
	}
	name := st.GetStatus().GetMetadata().GetName()
	p.mu.Lock()
	sandbox, ok := p.containers[id]
	pod, known := p.sandboxes[sandbox]
	p.mu.Unlock()
	if ok && known {
		return pod, name, nil
	}
	list, err := p.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil || len(list.Containers) == 0 {
		return Pod{}, "", fmt.Errorf("container %s: no sandbox found (%v)", id, err)
	}
	sandbox = list.Containers[0].PodSandboxId
	ps, err := p.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandbox})
	if err != nil {
		return Pod{}, "", fmt.Errorf("sandbox %s: %w", sandbox, err)
	}
	s := ps.GetStatus()
	pod = Pod{Annotations: s.GetAnnotations(), Labels: s.GetLabels()}
	if m := s.GetMetadata(); m != nil {
		pod.Name, pod.Namespace, pod.UID = m.Name, m.Namespace, m.Uid
	}
	p.mu.Lock()
	p.containers[id], p.sandboxes[sandbox] = sandbox, pod
	p.mu.Unlock()
	return pod, name, nil
}

// fill lays a decision over a container's resources; it reports whether anything changed.
func (p *Proxy) fill(r *runtimeapi.LinuxContainerResources, d plugins.Decision) bool {
	before := proto.Clone(r)
	translate.ToContainer(d.Settings, p.opts.CgroupV2).CRI(r)
	return !proto.Equal(before, r)
}

// setEnv sets each variable of env in envs (replacing one of the same key).
func setEnv(envs []*runtimeapi.KeyValue, env map[string]string, changed bool) ([]*runtimeapi.KeyValue, bool) {
	for k, v := range env {
		found := false
		for _, kv := range envs {
			if kv.Key == k {
				found = true
				if string(kv.Value) != v {
					kv.Value, changed = []byte(v), true
				}
			}
		}
		if !found {
			envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
			changed = true
		}
	}
	return envs, changed
}

func (p *Proxy) observe(method string, pod Pod, err error, changed bool, start time.Time) {
	result := "unchanged"
	switch {
	case err != nil:
		result = "fail-open"
		p.opts.Log.Warn("CRI hook failed open: forwarding unchanged; the reconcile loop repairs it",
			"method", method, "pod", pod.Namespace+"/"+pod.Name, "err", err)
	case changed:
		result = "adjusted"
	}
	if p.opts.Observer != nil {
		p.opts.Observer.HookCall("cri", method, result, time.Since(start))
	}
}

// forward relays any call the proxy does not read, message by message, as raw bytes.
func (p *Proxy) forward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return errors.New("cri proxy: no method in stream")
	}
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	// Kubelet -> runtime in its own goroutine; it ends when the kubelet's side does or the
	// call is cancelled (this function returning cancels ctx).
	upErr := make(chan error, 1)
	go func() {
		for {
			var f frame
			if err := ss.RecvMsg(&f); err != nil {
				if err == io.EOF {
					err = cs.CloseSend()
				}
				upErr <- err
				return
			}
			if err := cs.SendMsg(&f); err != nil {
				upErr <- err
				return
			}
		}
	}()
	for i := 0; ; i++ {
		var f frame
		if err := cs.RecvMsg(&f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err
		}
		if i == 0 {
			if md, err := cs.Header(); err == nil {
				_ = ss.SendHeader(md)
			}
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
		select {
		case err := <-upErr:
			if err != nil {
				return err
			}
			upErr = nil
		default:
		}
	}
}
