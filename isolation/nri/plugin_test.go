package nri

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/memory"
)

type decider struct{ d plugins.Decision }

func (decider) Sandbox(context.Context, isolation.Pod) error { return nil }
func (f decider) Container(context.Context, isolation.Pod, string) (plugins.Decision, error) {
	return f.d, nil
}

var reclaimed = plugins.Decision{
	Settings:    plugins.Settings{CPUs: cpuset.New(1), Mems: cpuset.New(0), CPUIdle: plugins.On, CPUQuota: 1500, MemoryLimit: 1 << 30},
	OOMScoreAdj: memory.ReclaimedOOMScoreAdj,
	Env:         map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
}

func plugin(v2 bool) *Plugin {
	return &Plugin{containers: map[string]known{}, opts: Options{Timeout: time.Second, CgroupV2: v2,
		Decider: decider{reclaimed}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
}

// The same decision as the CRI proxy's test, as an adjustment at creation and as an update.
func TestCreateAndUpdateCarryTheDecision(t *testing.T) {
	pod := &api.PodSandbox{Id: "s1", Name: "batch", Namespace: "default"}
	ctr := &api.Container{Id: "c1", PodSandboxId: "s1", Name: "main"}
	for _, v2 := range []bool{false, true} {
		p := plugin(v2)
		adj, _, err := p.CreateContainer(context.Background(), pod, ctr)
		if err != nil || adj == nil || adj.Linux == nil {
			t.Fatalf("v2=%v: adjustment %+v, %v", v2, adj, err)
		}
		r := adj.Linux.Resources
		if r.Cpu.Cpus != "1" || r.Cpu.Mems != "0" || r.Cpu.Quota.GetValue() != 150000 || r.Cpu.Period.GetValue() != 100000 ||
			r.Memory.GetLimit().GetValue() != 1<<30 || adj.Linux.OomScoreAdj.GetValue() != memory.ReclaimedOOMScoreAdj {
			t.Errorf("v2=%v: adjustment %+v", v2, r)
		}
		if v2 && (r.Unified["cpu.idle"] != "1" || r.Cpu.Shares != nil) || !v2 && (r.Cpu.Shares.GetValue() != 2 || r.Unified != nil) {
			t.Errorf("v2=%v: idle as shares %v, unified %v", v2, r.Cpu.Shares, r.Unified)
		}
		if len(adj.Env) != 1 || adj.Env[0].Key != "NVIDIA_VISIBLE_DEVICES" || adj.Env[0].Value != "void" {
			t.Errorf("v2=%v: env %v", v2, adj.Env)
		}
		u, err := p.update(context.Background(), podOf(pod), "c1", "main")
		if err != nil || u == nil || u.ContainerId != "c1" || u.Linux.Resources.Cpu.Cpus != "1" {
			t.Errorf("v2=%v: update %+v, %v", v2, u, err)
		}
	}
	p := plugin(true)
	p.opts.Decider = decider{}
	if u, err := p.update(context.Background(), podOf(pod), "c1", "main"); u != nil || err != nil {
		t.Errorf("an empty decision sent an update: %+v, %v", u, err)
	}
}
