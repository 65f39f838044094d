package kube_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/testutil"
)

// priorityFiles are what the agent sets on a pod's cgroup for its tier (a reclaimed pod's
// lowest priority, an online pod's weight); they must not change while the API server is away.
func priorityFiles(t testing.TB, n *kubeNode, cg string) string {
	t.Helper()
	names := []string{"cpu.shares"}
	if n.layout.Version == cgroupfs.V2 {
		names = []string{"cpu.weight"}
	}
	var out []string
	for _, f := range append(names, "cpu.idle") {
		if data, err := os.ReadFile(filepath.Join(n.layout.Dir("cpu", cg), f)); err == nil {
			out = append(out, f+"="+strings.TrimSpace(string(data)))
		}
	}
	return strings.Join(out, " ")
}

func inCgroup(n *kubeNode, cg string, pid int) bool {
	data, err := os.ReadFile(filepath.Join(n.layout.Dir("cpu", cg), "cgroup.procs"))
	return err == nil && slices.Contains(strings.Fields(string(data)), strconv.Itoa(pid))
}

// The kube-apiserver SIGKILLed twice at a random moment of the agent's slow pass (500 ms
// passes: the kill lands while the agent lists, patches its Node or watches pods) and
// restarted each time. What must hold: the agent does not crash and evicts nothing; every
// pod keeps its cgroup, its processes and the settings of its tier; while the API server is
// away the agent lends by its own measurements (the reclaimed pod keeps a CPU quota; no new
// offline pod can be scheduled meanwhile, there is no API server to bind it); once it is back
// the agent republishes its Node (a fresh heartbeat, reclaimed capacity) and manages a pod
// created after the restart.
func TestAPIServerKilledMidPass(t *testing.T) {
	o := testutil.Record(t, "kube-apiserver SIGKILLed mid-pass (twice) and restarted")
	c := newCluster(t)
	// The quota mechanism: what the agent lends shows as the reclaimed pod's quota.
	n := newKubeNode(t, c, "node-a", "cgroupfs", "cpu:\n  mechanism: quota\nloops:\n  slowInterval: 500ms")
	n.start()
	batch := n.runPod(newPod("batch", map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "1")
	web := n.runPod(newPod("web", nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}))
	eventually(t, 30*time.Second, "both pods managed, batch lent CPU", func() error {
		if q := quotaMilli(t, n, batch.cgroup); q <= 0 {
			return fmt.Errorf("batch quota %dm", q)
		}
		for _, name := range []string{"default/batch", "default/web"} {
			if _, ok := n.workload(name); !ok {
				return fmt.Errorf("%s not managed yet", name)
			}
		}
		return nil
	})
	n.waitPasses(2)
	settings := map[*runningPod]string{batch: priorityFiles(t, n, batch.cgroup), web: priorityFiles(t, n, web.cgroup)}
	check := func(when string) {
		t.Helper()
		n.alive()
		for p, want := range settings {
			if got := priorityFiles(t, n, p.cgroup); got != want {
				t.Errorf("%s: %s's cgroup settings %q, were %q", when, p.pod.Name, got, want)
			}
			if p.cmd != nil && !inCgroup(n, p.container, p.cmd.Process.Pid) {
				t.Errorf("%s: %s's process left its container cgroup", when, p.pod.Name)
			}
			if _, ok := n.workload("default/" + p.pod.Name); !ok {
				t.Errorf("%s: %s no longer managed", when, p.pod.Name)
			}
		}
		for _, a := range n.status().Actions {
			if a.Kind == "evict" {
				t.Errorf("%s: evicted: %s", when, a.Reason)
			}
		}
	}

	for kill := 1; kill <= 2; kill++ {
		// A random moment of a pass: just after one ended, plus up to one interval.
		n.waitPasses(1)
		time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
		c.KillAPIServer(t)
		killed := time.Now()
		n.waitPasses(4)
		away := quotaMilli(t, n, batch.cgroup)
		check(fmt.Sprintf("kill %d, API server away", kill))
		if away <= 0 {
			t.Errorf("kill %d: batch's quota %dm while the API server is away: the agent stopped lending by its own measurements", kill, away)
		}
		c.StartAPIServer(t)
		restarted := time.Now()
		eventually(t, 30*time.Second, "the Node republished", func() error {
			node := c.node(t, "node-a")
			if q := node.Status.Allocatable[reclaimedMilliCPU]; q.IsZero() {
				return fmt.Errorf("reclaimed capacity %s", q.String())
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == "TidalReclaimReady" && cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(restarted.Add(-time.Second)) {
					return nil
				}
			}
			return fmt.Errorf("no ready heartbeat since the restart at %s", restarted.Format(time.TimeOnly))
		})
		o.Add(t, "kill %d: API server away %s; batch quota %dm meanwhile; Node republished %s after the restart",
			kill, restarted.Sub(killed).Round(100*time.Millisecond), away, time.Since(restarted).Round(100*time.Millisecond))
		check(fmt.Sprintf("kill %d, API server back", kill))
	}

	for _, p := range []*runningPod{batch, web} {
		got, err := c.admin.CoreV1().Pods("default").Get(context.Background(), p.pod.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s after the kills: %v (deleting: %v)", p.pod.Name, err, got != nil && got.DeletionTimestamp != nil)
		}
	}
	late := n.runPod(newPod("late", map[string]string{"tidalqos.io/qos-level": "reclaimed"}, nil), "workload", "burner", "--threads", "1")
	eventually(t, 30*time.Second, "a pod created after the restarts is managed", func() error {
		if w, ok := n.workload("default/late"); !ok || w.Tier != "reclaimed" {
			return fmt.Errorf("late: %+v", w)
		}
		if q := quotaMilli(t, n, late.cgroup); q <= 0 {
			return fmt.Errorf("late's quota %dm", q)
		}
		return nil
	})
	if strings.Contains(n.log.String(), "panic") {
		t.Errorf("agent log has a panic")
	}
	o.Add(t, "no eviction, every pod kept its cgroup, processes and tier settings; a pod created after the restarts managed")
}
