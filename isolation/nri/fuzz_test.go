package nri

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/qos"
)

// classifyingDecider decides by the real classifier over what the runtime says of the pod.
type classifyingDecider struct {
	mu  sync.Mutex
	pod isolation.Pod
}

func (c *classifyingDecider) Sandbox(context.Context, isolation.Pod) error { return nil }

func (c *classifyingDecider) Container(_ context.Context, pod isolation.Pod, _ string) (plugins.Decision, error) {
	c.mu.Lock()
	c.pod = pod
	c.mu.Unlock()
	d := qos.Classify(qos.Metadata{Name: pod.Name, Namespace: pod.Namespace, Annotations: pod.Annotations, Labels: pod.Labels}, qos.Policy{})
	switch d.Tier {
	case qos.Reclaimed:
		return plugins.Decision{Settings: plugins.Settings{CPUs: cpuset.New(1), Mems: cpuset.New(0), CPUIdle: plugins.On, CPUQuota: 1500, MemoryLimit: 1 << 30},
			OOMScoreAdj: memory.ReclaimedOOMScoreAdj, Env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}}, nil
	case qos.Dedicated:
		return plugins.Decision{Settings: plugins.Settings{CPUs: cpuset.New(2, 3), Mems: cpuset.New(0)}}, nil
	}
	return plugins.Decision{}, nil
}

// FuzzCreateContainer hands the plugin any pod and container the runtime may describe
// (protobuf, as NRI carries them) for CreateContainer, UpdateContainer and Synchronize. It
// never fails the container; its adjustment is exactly the decision: cpus, mems, shares,
// quota, memory, OOM score and env as decided, nothing else.
func FuzzCreateContainer(f *testing.F) {
	pod := &api.PodSandbox{Id: "sb1", Name: "batch", Namespace: "default", Uid: "u1",
		Annotations: map[string]string{"tidalqos.io/qos-level": "reclaimed"},
		Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/besteffort/podu1",
			PodResources: &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: &api.OptionalInt64{Value: 150000}, Period: &api.OptionalUInt64{Value: 100000}}}}}
	ctr := &api.Container{Id: "c1", PodSandboxId: "sb1", Name: "main"}
	pb, _ := proto.Marshal(pod)
	cb, _ := proto.Marshal(ctr)
	f.Add(pb, cb)
	pod.Annotations = map[string]string{"tidalqos.io/qos-level": "dedicated"}
	pod.Linux.PodResources.Cpu.Quota.Value = 1 << 62
	pb, _ = proto.Marshal(pod)
	f.Add(pb, cb)
	f.Add([]byte{}, []byte{})

	dec := &classifyingDecider{}
	p, err := New(Options{Socket: filepath.Join(f.TempDir(), "nri.sock"), Timeout: time.Second, Decider: dec,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, podBytes, ctrBytes []byte) {
		var pod api.PodSandbox
		var ctr api.Container
		if proto.Unmarshal(podBytes, &pod) != nil || proto.Unmarshal(ctrBytes, &ctr) != nil {
			return
		}
		adj, updates, err := p.CreateContainer(ctx, &pod, &ctr)
		if err != nil || len(updates) != 0 {
			t.Fatalf("CreateContainer = %v updates, %v: must never fail a container", updates, err)
		}
		dec.mu.Lock()
		seen := dec.pod
		dec.mu.Unlock()
		if seen.Name != pod.GetName() || seen.UID != pod.GetUid() || seen.CgroupParent != pod.GetLinux().GetCgroupParent() || seen.MilliCPU < 0 {
			t.Fatalf("decider saw %+v for pod %v", seen, &pod)
		}
		d, _ := dec.Container(ctx, seen, ctr.GetName())
		cpu := adj.GetLinux().GetResources().GetCpu()
		if want := d.Settings.CPUs.String(); cpu.GetCpus() != want {
			t.Fatalf("adjusted cpus %q, decided %q", cpu.GetCpus(), want)
		}
		if want := d.Settings.Mems.String(); cpu.GetMems() != want {
			t.Fatalf("adjusted mems %q, decided %q", cpu.GetMems(), want)
		}
		wantShares := d.Settings.CPUShares
		if d.Settings.CPUIdle == plugins.On {
			wantShares = 2 // cgroup v1: the smallest share under the pod's idle cgroup
		}
		if got := cpu.GetShares().GetValue(); got != wantShares {
			t.Fatalf("adjusted shares %d, decided %d", got, wantShares)
		}
		if got, want := cpu.GetQuota().GetValue(), d.Settings.CPUQuota*100; got != want {
			t.Fatalf("adjusted quota %d, decided %d", got, want)
		}
		if got := adj.GetLinux().GetResources().GetMemory().GetLimit().GetValue(); got != d.Settings.MemoryLimit {
			t.Fatalf("adjusted memory %d, decided %d", got, d.Settings.MemoryLimit)
		}
		if got := adj.GetLinux().GetOomScoreAdj().GetValue(); got != int64(d.OOMScoreAdj) {
			t.Fatalf("adjusted oom_score_adj %d, decided %d", got, d.OOMScoreAdj)
		}
		env := map[string]string{}
		for _, kv := range adj.GetEnv() {
			env[kv.GetKey()] = kv.GetValue()
		}
		if len(env) != len(d.Env) {
			t.Fatalf("adjusted env %v, decided %v", env, d.Env)
		}
		for k, v := range d.Env {
			if env[k] != v {
				t.Fatalf("env %s=%q, decided %q", k, env[k], v)
			}
		}

		// The same container later: an update carries the same decision, or none when there is
		// nothing to set; Synchronize agrees.
		ups, err := p.UpdateContainer(ctx, &pod, &ctr, nil)
		if err != nil || len(ups) > 1 {
			t.Fatalf("UpdateContainer = %v, %v", ups, err)
		}
		if len(ups) == 1 && ups[0].GetLinux().GetResources().GetCpu().GetCpus() != cpu.GetCpus() {
			t.Fatalf("update cpus %q, creation %q", ups[0].GetLinux().GetResources().GetCpu().GetCpus(), cpu.GetCpus())
		}
		pod.Id, ctr.PodSandboxId = "sb-"+strconv.Itoa(len(podBytes)), "sb-"+strconv.Itoa(len(podBytes))
		syn, err := p.Synchronize(ctx, []*api.PodSandbox{&pod}, []*api.Container{&ctr})
		if err != nil || len(syn) != len(ups) {
			t.Fatalf("Synchronize = %d updates, %v; UpdateContainer gave %d", len(syn), err, len(ups))
		}
		_ = p.RemoveContainer(ctx, &pod, &ctr)
	})
}
