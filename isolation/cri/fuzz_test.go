package cri

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// classifyingDecider decides by the real classifier over what the request says of the pod,
// and remembers the pods it was asked about.
type classifyingDecider struct {
	mu   sync.Mutex
	pods []Pod
}

func (c *classifyingDecider) Sandbox(_ context.Context, pod Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = append(c.pods, pod)
	return nil
}

func (c *classifyingDecider) Container(_ context.Context, pod Pod, _ string) (plugins.Decision, error) {
	c.mu.Lock()
	c.pods = append(c.pods, pod)
	c.mu.Unlock()
	d := qos.Classify(qos.Metadata{Name: pod.Name, Namespace: pod.Namespace, Annotations: pod.Annotations, Labels: pod.Labels}, qos.Policy{})
	switch d.Tier {
	case qos.Reclaimed:
		return reclaimed, nil
	case qos.Dedicated:
		return plugins.Decision{Settings: plugins.Settings{CPUs: cpuset.New(1), Mems: cpuset.New(0)}}, nil
	}
	return plugins.Decision{}, nil
}

// FuzzCreateContainer sends any CreateContainerRequest (protobuf bytes, as the kubelet sends
// them) through the proxy to a recording runtime. The runtime always gets the call; the proxy
// changes only the container's Linux resources, OOM score and environment; what it decided is
// what the runtime got; the pod the decider saw is what the request said.
func FuzzCreateContainer(f *testing.F) {
	seed, _ := proto.Marshal(createRequest())
	f.Add(seed)
	shared := createRequest()
	shared.SandboxConfig.Annotations = map[string]string{"tidalqos.io/qos-level": "dedicated"}
	shared.Config.Linux = nil
	shared.SandboxConfig.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods-pod1.slice",
		Resources: &runtimeapi.LinuxContainerResources{CpuQuota: 9223372036854775807, CpuPeriod: 1}}
	b, _ := proto.Marshal(shared)
	f.Add(b)
	noConfig := &runtimeapi.CreateContainerRequest{PodSandboxId: "x"}
	b, _ = proto.Marshal(noConfig)
	f.Add(b)
	f.Add([]byte{})

	dec := &classifyingDecider{}
	proxy, _, rt := start(f, dec, nil)

	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimeapi.CreateContainerRequest
		if proto.Unmarshal(data, &req) != nil {
			return // the kubelet sends valid protobuf; gRPC refuses the rest before the proxy
		}
		dec.mu.Lock()
		dec.pods = nil
		dec.mu.Unlock()
		rt.mu.Lock()
		rt.created = nil
		rt.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := proxy.CreateContainer(ctx, &req); err != nil {
			t.Fatalf("CreateContainer through the proxy: %v", err)
		}
		rt.mu.Lock()
		if len(rt.created) != 1 {
			rt.mu.Unlock()
			t.Fatalf("the runtime got %d calls", len(rt.created))
		}
		got := rt.created[0]
		rt.mu.Unlock()

		// Only resources, OOM score and env may differ.
		a, b := proto.Clone(&req).(*runtimeapi.CreateContainerRequest), proto.Clone(got).(*runtimeapi.CreateContainerRequest)
		for _, r := range []*runtimeapi.CreateContainerRequest{a, b} {
			if r.Config != nil {
				r.Config.Envs = nil
				if r.Config.Linux != nil {
					r.Config.Linux.Resources = nil
				}
			}
		}
		if a.Config != nil && a.Config.Linux == nil && b.Config.GetLinux() != nil && proto.Equal(b.Config.Linux, &runtimeapi.LinuxContainerConfig{}) {
			b.Config.Linux = nil
		}
		if !proto.Equal(a, b) {
			t.Fatalf("the proxy changed more than resources and env:\nsent %v\n got %v", a, b)
		}
		dec.mu.Lock()
		pods := slices.Clone(dec.pods)
		dec.mu.Unlock()
		if len(pods) != 1 {
			t.Fatalf("decider asked %d times", len(pods))
		}
		p := pods[0]
		if p.Name != req.GetSandboxConfig().GetMetadata().GetName() || p.CgroupParent != req.GetSandboxConfig().GetLinux().GetCgroupParent() || p.MilliCPU < 0 {
			t.Fatalf("decider saw %+v for sandbox %v", p, req.GetSandboxConfig())
		}
		if req.Config == nil {
			return // nothing to fill in
		}
		d, _ := dec.Container(ctx, p, "")
		r := got.GetConfig().GetLinux().GetResources()
		if !d.Settings.CPUs.IsEmpty() && r.GetCpusetCpus() != d.Settings.CPUs.String() {
			t.Fatalf("decided cpus %v, the runtime got %q", d.Settings.CPUs, r.GetCpusetCpus())
		}
		if d.Settings.MemoryLimit > 0 && r.GetMemoryLimitInBytes() != d.Settings.MemoryLimit {
			t.Fatalf("decided memory %d, the runtime got %d", d.Settings.MemoryLimit, r.GetMemoryLimitInBytes())
		}
		if d.OOMScoreAdj != 0 && r.GetOomScoreAdj() != int64(d.OOMScoreAdj) {
			t.Fatalf("decided oom_score_adj %d, the runtime got %d", d.OOMScoreAdj, r.GetOomScoreAdj())
		}
		for k, v := range d.Env {
			n := 0
			for _, kv := range got.Config.Envs {
				if kv.Key == k {
					n++
					if string(kv.Value) != v {
						t.Fatalf("env %s=%q, decided %q", k, kv.Value, v)
					}
				}
			}
			if n == 0 {
				t.Fatalf("env %s missing", k)
			}
		}
	})
}
