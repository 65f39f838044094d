package cri_test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/cri/critest"
	"github.com/tidalqos/tidal/tests/testutil"
)

// nriCalls is tidal_hook_calls_total for the NRI plugin's method and result.
func nriCalls(t *testing.T, metrics, method, result string) int {
	t.Helper()
	text, err := testutil.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	want := fmt.Sprintf(`tidal_hook_calls_total{hook="nri",method=%q,result=%q} `, method, result)
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, want); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// The NRI plugin's runtime peer (containerd 2) hangs (SIGSTOP: every call to it, such as the
// plugin's push of new cpusets, waits on it) and later disconnects mid-connection (SIGKILL,
// then restarted on the same sockets). What must hold: the agent keeps answering and keeps
// its reconcile loop running while the runtime hangs; it never crashes; the plugin reconnects
// by itself, synchronizes the containers still running and adjusts a new container at
// creation again; the containers keep their tier's settings throughout.
func TestNRIPluginPeerHangsAndDisconnects(t *testing.T) {
	layout, root := critest.CgroupRoot(t)
	if layout.Version != cgroupfs.V1 {
		t.Skip("checks cgroup v1 files")
	}
	o := testutil.Record(t, "the NRI plugin's runtime (containerd 2) hangs (SIGSTOP), then is SIGKILLed and restarted")
	all := cpus(t, layout, "")
	rt := critest.StartContainerd2(t, "")
	rt.ImportImage(t, burnerImage, critest.BuildStatic(t, critest.BurnerPackage))
	t.Cleanup(func() { rs, _ := rt.CRI(t); critest.Cleanup(t, rs) })
	reclaimed := func(name, uid string) string {
		t.Helper()
		rs, _ := rt.CRI(t)
		parent := critest.PodCgroupParent(root, uid)
		makePodCgroup(t, layout, parent)
		pod := critest.RunPod(t, rs, name, "default", uid, parent, map[string]string{"tidalqos.io/qos-level": "reclaimed"})
		id := critest.CreateContainer(t, rs, pod, nil, "burner", burnerImage, []string{"--threads", "1"},
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: all.String()}, nil)
		critest.StartContainer(t, rs, id)
		return parent + "/" + id
	}
	lowest := func(cgs ...string) func() error {
		return func() error {
			for _, cg := range cgs {
				if got := read(t, layout, "cpu", cg, "cpu.shares"); got != "2" {
					return fmt.Errorf("%s: cpu.shares %s", cg, got)
				}
			}
			return nil
		}
	}

	// Running before tidal connects: only the plugin's Synchronize tells the agent about it.
	early := reclaimed("early", "7e11aa00-0020")
	metrics := testutil.FreeAddr(t)
	client, log := startAgentWith(t, root, fmt.Sprintf("hooks:\n  nri: true\n  nriSocket: %s\n", rt.NRISocket), metrics)
	eventually(t, 20*time.Second, "the plugin connected and synchronized", lowest(early))

	// The runtime hangs.
	if err := rt.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Signal(syscall.SIGCONT) })
	st, err := client.Status()
	if err != nil {
		t.Fatal(err)
	}
	passes := st.SlowPasses
	var slowest time.Duration
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		start := time.Now()
		if st, err = client.Status(); err != nil {
			t.Fatalf("the agent stopped answering while the runtime hung: %v", err)
		}
		slowest = max(slowest, time.Since(start))
	}
	if st.SlowPasses < passes+2 {
		t.Errorf("the reconcile loop stalled while the runtime hung: %d passes in 3s", st.SlowPasses-passes)
	}
	if slowest > time.Second {
		t.Errorf("a status call took %v while the runtime hung", slowest)
	}
	if err := lowest(early)(); err != nil {
		t.Errorf("while the runtime hung: %v", err)
	}
	if err := rt.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	adjusted := nriCalls(t, metrics, "CreateContainer", "adjusted")
	after := reclaimed("after-hang", "7e11aa00-0021")
	eventually(t, 10*time.Second, "a container created after the hang adjusted by the plugin", func() error {
		if n := nriCalls(t, metrics, "CreateContainer", "adjusted"); n <= adjusted {
			return fmt.Errorf("%d CreateContainer adjustments, %d before", n, adjusted)
		}
		return lowest(after)()
	})

	// The runtime disconnects mid-connection and comes back.
	synced := nriCalls(t, metrics, "Synchronize", "adjusted") + nriCalls(t, metrics, "Synchronize", "unchanged")
	killed := time.Now()
	rt.Restart(t)
	restarted := time.Since(killed)
	if _, err := client.Status(); err != nil {
		t.Fatalf("the agent after the runtime was killed: %v", err)
	}
	eventually(t, 20*time.Second, "the plugin reconnected and synchronized the running containers", func() error {
		if n := nriCalls(t, metrics, "Synchronize", "adjusted") + nriCalls(t, metrics, "Synchronize", "unchanged"); n < synced+2 {
			return fmt.Errorf("%d Synchronize calls, %d before the restart", n, synced)
		}
		return nil
	})
	reconnected := time.Since(killed)
	adjusted = nriCalls(t, metrics, "CreateContainer", "adjusted")
	late := reclaimed("after-restart", "7e11aa00-0022")
	eventually(t, 10*time.Second, "a container created after the restart adjusted by the plugin", func() error {
		if n := nriCalls(t, metrics, "CreateContainer", "adjusted"); n <= adjusted {
			return fmt.Errorf("%d CreateContainer adjustments, %d before", n, adjusted)
		}
		return lowest(late)()
	})
	if err := lowest(early, after, late)(); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	if _, err := client.Status(); err != nil {
		t.Fatalf("agent at the end: %v", err)
	}
	if l := log.String(); strings.Contains(l, "panic") || !strings.Contains(l, "NRI") {
		t.Errorf("agent log: a panic, or no word of the NRI disconnection:\n%s", testutil.Tail(l, 30))
	}
	o.Add(t, "runtime hung 3s: status answered in at most %v, %d slow passes meanwhile; after the runtime's SIGKILL the plugin synchronized again %v after it (the restart took %v)",
		slowest.Round(time.Millisecond), st.SlowPasses-passes, reconnected.Round(100*time.Millisecond), restarted.Round(100*time.Millisecond))
}
