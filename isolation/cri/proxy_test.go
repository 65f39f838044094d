package cri

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/memory"
)

// recordingRuntime is a stand-in CRI runtime for the proxy's unit tests: it records what
// reaches it. The proxy against real containerd is tested in tests/cri.
type recordingRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu      sync.Mutex
	created []*runtimeapi.CreateContainerRequest
	updated []*runtimeapi.UpdateContainerResourcesRequest
}

func (r *recordingRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "recording", RuntimeApiVersion: "v1"}, nil
}

func (r *recordingRuntime) RunPodSandbox(context.Context, *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sandbox-1"}, nil
}

func (r *recordingRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created = append(r.created, req)
	return &runtimeapi.CreateContainerResponse{ContainerId: "ctr-1"}, nil
}

func (r *recordingRuntime) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updated = append(r.updated, req)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (r *recordingRuntime) RemoveContainer(context.Context, *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *recordingRuntime) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (r *recordingRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: req.ContainerId, Metadata: &runtimeapi.ContainerMetadata{Name: "main"}}}, nil
}

type fakeDecider struct {
	d     plugins.Decision
	err   error
	delay time.Duration
}

func (f fakeDecider) Sandbox(context.Context, Pod) error { return f.err }

func (f fakeDecider) Container(ctx context.Context, _ Pod, _ string) (plugins.Decision, error) {
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	return f.d, f.err
}

type countingObserver struct {
	mu      sync.Mutex
	results map[string]int
}

func (o *countingObserver) HookCall(_, method, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.results[method+" "+result]++
}

// start runs a recording runtime and a proxy in front of it; it returns a CRI client of the
// proxy and one of the runtime directly.
func start(t testing.TB, dec Decider, obs Observer) (proxy, direct runtimeapi.RuntimeServiceClient, rt *recordingRuntime) {
	t.Helper()
	dir := t.TempDir()
	rt = &recordingRuntime{}
	rtSock := filepath.Join(dir, "runtime.sock")
	ln, err := net.Listen("unix", rtSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served })

	p, err := New(Options{Socket: filepath.Join(dir, "proxy.sock"), RuntimeSocket: rtSock, Timeout: 50 * time.Millisecond,
		Decider: dec, Observer: obs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	proxied := make(chan error, 1)
	go func() { proxied <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-proxied; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	dial := func(sock string) runtimeapi.RuntimeServiceClient {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return runtimeapi.NewRuntimeServiceClient(conn)
	}
	// The proxy's socket appears once Serve listens.
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("unix", filepath.Join(dir, "proxy.sock")); err == nil {
			c.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return dial(filepath.Join(dir, "proxy.sock")), dial(rtSock), rt
}

var reclaimed = plugins.Decision{
	Settings:    plugins.Settings{CPUs: cpuset.New(1), Mems: cpuset.New(0), CPUIdle: plugins.On, CPUQuota: 1500, MemoryLimit: 1 << 30},
	OOMScoreAdj: memory.ReclaimedOOMScoreAdj,
	Env:         map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
}

func createRequest() *runtimeapi.CreateContainerRequest {
	return &runtimeapi.CreateContainerRequest{
		PodSandboxId: "sandbox-1",
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: "0-1"}}},
		SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "batch", Namespace: "default", Uid: "u1"},
			Annotations: map[string]string{"tidalqos.io/qos-level": "reclaimed"}},
	}
}

func TestCreateAndUpdateCarryTheDecision(t *testing.T) {
	obs := &countingObserver{results: map[string]int{}}
	proxy, _, rt := start(t, fakeDecider{d: reclaimed}, obs)
	ctx := context.Background()
	// A method the proxy does not read goes through untouched.
	v, err := proxy.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "recording" {
		t.Fatalf("Version through the proxy: %v, %v", v, err)
	}
	if _, err := proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: createRequest().SandboxConfig}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.CreateContainer(ctx, createRequest()); err != nil {
		t.Fatal(err)
	}
	got := rt.created[0].Config
	r := got.Linux.Resources
	if r.CpusetCpus != "1" || r.CpusetMems != "0" || r.CpuShares != 2 || r.CpuQuota != 150000 || r.CpuPeriod != 100000 ||
		r.MemoryLimitInBytes != 1<<30 || r.OomScoreAdj != memory.ReclaimedOOMScoreAdj {
		t.Errorf("the runtime got %+v", r)
	}
	if !slices.ContainsFunc(got.Envs, func(kv *runtimeapi.KeyValue) bool {
		return kv.Key == "NVIDIA_VISIBLE_DEVICES" && string(kv.Value) == "void"
	}) {
		t.Errorf("env %v", got.Envs)
	}
	// The kubelet widening the cpuset later is corrected on the way.
	if _, err := proxy.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "ctr-1",
		Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1", CpuShares: 1024}}); err != nil {
		t.Fatal(err)
	}
	if u := rt.updated[0].Linux; u.CpusetCpus != "1" || u.CpuShares != 2 {
		t.Errorf("update reached the runtime as %+v", u)
	}
	if obs.results["CreateContainer adjusted"] != 1 || obs.results["UpdateContainerResources adjusted"] != 1 {
		t.Errorf("observed %v", obs.results)
	}
}

// Once the runtime removed a pod the proxy forgets it: an update for one of its containers
// no longer finds it in memory, asks the runtime (which knows none) and goes through as sent.
func TestRemovedPodsAreForgotten(t *testing.T) {
	obs := &countingObserver{results: map[string]int{}}
	proxy, _, rt := start(t, fakeDecider{d: reclaimed}, obs)
	ctx := context.Background()
	if _, err := proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: createRequest().SandboxConfig}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.CreateContainer(ctx, createRequest()); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "ctr-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "sandbox-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "ctr-1",
		Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1", CpuShares: 1024}}); err != nil {
		t.Fatal(err)
	}
	if u := rt.updated[0].Linux; u.CpusetCpus != "0-1" || u.CpuShares != 1024 {
		t.Errorf("an update for a removed pod's container was changed: %+v", u)
	}
	if obs.results["UpdateContainerResources adjusted"] != 0 {
		t.Errorf("observed %v", obs.results)
	}
}

func TestFailOpenForwardsUnchanged(t *testing.T) {
	for name, dec := range map[string]fakeDecider{
		"error":   {err: errors.New("boom")},
		"timeout": {d: reclaimed, delay: 300 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			obs := &countingObserver{results: map[string]int{}}
			proxy, _, rt := start(t, dec, obs)
			if _, err := proxy.CreateContainer(context.Background(), createRequest()); err != nil {
				t.Fatalf("the container must still be created: %v", err)
			}
			if r := rt.created[0].Config.Linux.Resources; r.CpusetCpus != "0-1" || r.CpuShares != 1024 || r.CpuQuota != 0 {
				t.Errorf("fail-open changed the request: %+v", r)
			}
			if obs.results["CreateContainer fail-open"] != 1 {
				t.Errorf("observed %v", obs.results)
			}
		})
	}
}

// BenchmarkProxyAddedLatency measures what the proxy adds to a CreateContainer (decision,
// rewrite, one more gRPC hop), against the same runtime called directly, interleaved. The
// target is p99 under 1 ms.
func BenchmarkProxyAddedLatency(b *testing.B) {
	proxy, direct, _ := start(b, fakeDecider{d: reclaimed}, nil)
	ctx := context.Background()
	var viaProxy, straight []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := direct.CreateContainer(ctx, createRequest()); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := proxy.CreateContainer(ctx, createRequest()); err != nil {
			b.Fatal(err)
		}
		viaProxy, straight = append(viaProxy, time.Since(t1)), append(straight, t1.Sub(t0))
	}
	q := func(d []time.Duration, f float64) time.Duration {
		s := slices.Clone(d)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(f*float64(len(s)-1))]
	}
	b.ReportMetric(float64(q(viaProxy, 0.5)-q(straight, 0.5))/1e3, "added-p50-µs")
	b.ReportMetric(float64(q(viaProxy, 0.99)-q(straight, 0.99))/1e3, "added-p99-µs")
	b.ReportMetric(float64(q(viaProxy, 0.99))/1e3, "proxied-p99-µs")
}
