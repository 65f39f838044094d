// Package cri_test runs tidal's runtime hooks against real runtimes started by the tests:
// the CRI proxy in front of Debian's containerd 1.6, the NRI plugin inside a containerd 2
// built from its Go module (tests/cri/critest). The tests play the kubelet: they make each
// pod's cgroup under a test root of their own, then call CRI, and read the real cgroup files.
package cri_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/isolation"
	"github.com/tidalqos/tidal/isolation/cri"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/memory"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/tests/cri/critest"
	"github.com/tidalqos/tidal/tests/testutil"
)

const burnerImage = "tidal.test/hooks/burner:1"

var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// startAgent runs a standalone agent with the hooks in extra (YAML) and returns its API client.
func startAgent(t *testing.T, root, extra string) *agent.Client {
	t.Helper()
	client, _ := startAgentWith(t, root, extra, "")
	return client
}

// startAgentWith is startAgent with /metrics on metricsAddr ("" for none); it also returns
// the agent's log. Its mechanism is the quota, so that a reclaimed container shows what is
// lent as its quota from creation on, and reclaimed work runs on the reclaimed pool, narrower
// than every CPU, so that a runtime widening a container's cpuset shows.
func startAgentWith(t *testing.T, root, extra, metricsAddr string) (*agent.Client, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`cgroup:
  root: %s/tidal
stateDir: %s
socketPath: %s
metricsAddress: %q
logLevel: debug
cpu:
  growStepMilliCPU: 10
  mechanism: quota
  reclaimedCPUs: pool
%s
`, root, filepath.Join(dir, "state"), filepath.Join(dir, "tidal.sock"), metricsAddr, extra)
	path := filepath.Join(dir, "tidal.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	testutil.StartDaemon(t, "agent", log, 10*time.Second, tidalBin, "agent", "--config", path)
	client := agent.NewClient(filepath.Join(dir, "tidal.sock"))
	eventually(t, 15*time.Second, "agent answers", func() error { _, err := client.Status(); return err })
	return client, log
}

func dialCRI(t *testing.T, socket string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	eventually(t, 10*time.Second, "socket "+socket, func() error { _, err := os.Stat(socket); return err })
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// makePodCgroup does the kubelet's part: the pod's cgroup exists before its sandbox.
func makePodCgroup(t *testing.T, layout *cgroupfs.Layout, parent string) {
	t.Helper()
	w, err := isolation.NewWriter(layout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rel := strings.TrimPrefix(parent, "/")
	var cgs []plugins.Cgroup
	for p := rel; p != "." && p != ""; p = filepath.Dir(p) {
		cgs = append([]plugins.Cgroup{{Path: p}}, cgs...)
	}
	if err := w.Apply(cgs); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, layout *cgroupfs.Layout, controller, cg, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(layout.Dir(controller, strings.TrimPrefix(cg, "/")), file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func cpus(t *testing.T, layout *cgroupfs.Layout, cg string) cpuset.CPUSet {
	t.Helper()
	s, err := cpuset.Parse(read(t, layout, "cpuset", cg, "cpuset.cpus"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func oomScoreAdj(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return v
}

// reclaimedConfined checks a reclaimed container's cgroup as runc made it: the reclaimed
// pool, the smallest share (cpu.idle sits on the pod), a quota (the quota mechanism) and a
// memory limit of what is lent, the highest OOM score.
func reclaimedConfined(t *testing.T, layout *cgroupfs.Layout, rs runtimeapi.RuntimeServiceClient, cg, id string, pool cpuset.CPUSet) {
	t.Helper()
	if got := cpus(t, layout, cg); !got.Equals(pool) {
		t.Errorf("container cpuset %s, want the reclaimed pool %s", got, pool)
	}
	if got := read(t, layout, "cpu", cg, "cpu.shares"); got != "2" {
		t.Errorf("container cpu.shares %s, want 2", got)
	}
	if q, _ := strconv.ParseInt(read(t, layout, "cpu", cg, "cpu.cfs_quota_us"), 10, 64); q <= 0 {
		t.Errorf("container cfs quota %d, want what is lent (the quota mechanism)", q)
	}
	if m, _ := strconv.ParseInt(read(t, layout, "memory", cg, "memory.limit_in_bytes"), 10, 64); m <= 0 || m > 1<<50 {
		t.Errorf("container memory limit %d, want what is lent", m)
	}
	if adj := oomScoreAdj(t, critest.ContainerPID(t, rs, id)); adj != memory.ReclaimedOOMScoreAdj {
		t.Errorf("oom_score_adj %d, want %d", adj, memory.ReclaimedOOMScoreAdj)
	}
}

// The CRI proxy in front of containerd 1.6: a reclaimed container is confined before
// StartContainer returns; a dedicated one gets a core of its own; the kubelet's
// UpdateContainerResources cannot widen a reclaimed container; once the pod is removed the
// agent forgets it and nothing is left.
func TestCRIProxyConfinesFromCreation(t *testing.T) {
	layout, root := critest.CgroupRoot(t)
	if layout.Version != cgroupfs.V1 {
		t.Skip("checks cgroup v1 files")
	}
	all := cpus(t, layout, "")
	if all.Size() < 2 {
		t.Skip("needs 2 CPUs")
	}
	rt := critest.StartContainerd16(t)
	rt.ImportImage(t, burnerImage, critest.BuildStatic(t, critest.BurnerPackage))
	proxySock := filepath.Join(t.TempDir(), "cri.sock")
	client := startAgent(t, root, fmt.Sprintf("hooks:\n  criProxy: true\n  criSocket: %s\n  runtimeSocket: %s\n", proxySock, rt.Socket()))
	rs := dialCRI(t, proxySock)
	t.Cleanup(func() { critest.Cleanup(t, rs) })

	// Reclaimed.
	uid := "7e11aa00-0001"
	parent := critest.PodCgroupParent(root, uid)
	makePodCgroup(t, layout, parent)
	podID := critest.RunPod(t, rs, "batch", "default", uid, parent, map[string]string{"tidalqos.io/qos-level": "reclaimed"})
	if idle := filepath.Join(layout.Dir("cpu", strings.TrimPrefix(parent, "/")), "cpu.idle"); fileExists(idle) {
		if got := read(t, layout, "cpu", parent, "cpu.idle"); got != "1" {
			t.Errorf("pod cgroup cpu.idle %s right after RunPodSandbox, want 1", got)
		}
	}
	reclaimedPool := cpus(t, layout, root+"/tidal-reclaimed")
	id := critest.CreateContainer(t, rs, podID, nil, "burner", burnerImage, []string{"--threads", "1"},
		&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: all.String()}, nil)
	critest.StartContainer(t, rs, id)
	cg := parent + "/" + id
	reclaimedConfined(t, layout, rs, cg, id, reclaimedPool)

	// The kubelet tries to widen it: the proxy keeps the decision.
	critest.UpdateResources(t, rs, id, &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: all.String()})
	if got := cpus(t, layout, cg); !got.IsSubsetOf(reclaimedPool) || got.Equals(all) {
		t.Errorf("after UpdateContainerResources widening it: cpuset %s", got)
	}
	if got := read(t, layout, "cpu", cg, "cpu.shares"); got != "2" {
		t.Errorf("after UpdateContainerResources: cpu.shares %s, want 2", got)
	}

	// Dedicated: one whole core of its own (the pod-level resources say 1 CPU).
	duid := "7e11aa00-0002"
	dparent := "/" + filepath.Join(root, "kubepods", "pod"+duid)
	makePodCgroup(t, layout, dparent)
	dcfg := critest.PodConfig("db", "default", duid, dparent, map[string]string{"tidalqos.io/qos-level": "dedicated"})
	dcfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuQuota: 100000, CpuPeriod: 100000, CpuShares: 1024}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	resp, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: dcfg})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	did := critest.CreateContainer(t, rs, resp.PodSandboxId, dcfg, "db", burnerImage, []string{"--threads", "1"},
		&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, CpusetCpus: all.String()}, nil)
	critest.StartContainer(t, rs, did)
	dcpus := cpus(t, layout, dparent+"/"+did)
	if dcpus.Size() != 1 {
		t.Fatalf("dedicated container cpuset %s, want one whole core", dcpus)
	}
	eventually(t, 10*time.Second, "the dedicated core leaves every other pool", func() error {
		if got := cpus(t, layout, cg); !got.Intersection(dcpus).IsEmpty() {
			return fmt.Errorf("reclaimed container cpuset %s shares the dedicated core %s", got, dcpus)
		}
		if got := cpus(t, layout, root+"/tidal/shared"); !got.Intersection(dcpus).IsEmpty() {
			return fmt.Errorf("shared pool %s includes the dedicated core %s", got, dcpus)
		}
		return nil
	})

	// Removal: the runtime removes the containers, the kubelet the pod cgroups; the agent
	// forgets the pods and nothing is left.
	critest.Cleanup(t, rs)
	for _, p := range []string{parent, dparent} {
		critest.RemoveCgroup(t, p)
	}
	eventually(t, 20*time.Second, "the agent forgets removed pods", func() error {
		s, err := client.Status()
		if err != nil {
			return err
		}
		if len(s.Workloads) != 0 {
			return fmt.Errorf("workloads %+v", s.Workloads)
		}
		return nil
	})
	for _, p := range []string{parent, dparent} {
		if dirs := critest.CgroupDirs(p); len(dirs) != 0 {
			t.Errorf("left behind: %v", dirs)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

type failingDecider struct{}

func (failingDecider) Sandbox(context.Context, isolation.Pod) error {
	return errors.New("decider down")
}
func (failingDecider) Container(context.Context, isolation.Pod, string) (plugins.Decision, error) {
	return plugins.Decision{}, errors.New("decider down")
}

// Fail-open against a real runtime: with tidal's logic failing, the proxy forwards the calls
// unchanged and the container is created as the kubelet asked.
func TestCRIProxyFailsOpen(t *testing.T) {
	layout, root := critest.CgroupRoot(t)
	if layout.Version != cgroupfs.V1 {
		t.Skip("checks cgroup v1 files")
	}
	rt := critest.StartContainerd16(t)
	rt.ImportImage(t, burnerImage, critest.BuildStatic(t, critest.BurnerPackage))
	sock := filepath.Join(t.TempDir(), "cri.sock")
	p, err := cri.New(cri.Options{Socket: sock, RuntimeSocket: rt.Socket(), Timeout: 100 * time.Millisecond,
		Decider: failingDecider{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	rs := dialCRI(t, sock)
	t.Cleanup(func() { critest.Cleanup(t, rs) })

	uid := "7e11aa00-0003"
	parent := critest.PodCgroupParent(root, uid)
	podID := critest.RunPod(t, rs, "batch", "default", uid, parent, map[string]string{"tidalqos.io/qos-level": "reclaimed"})
	id := critest.CreateContainer(t, rs, podID, nil, "burner", burnerImage, []string{"--threads", "1"},
		&runtimeapi.LinuxContainerResources{CpuShares: 512}, nil)
	critest.StartContainer(t, rs, id)
	if got := read(t, layout, "cpu", parent+"/"+id, "cpu.shares"); got != "512" {
		t.Errorf("cpu.shares %s, want the kubelet's 512 (forwarded unchanged)", got)
	}
}

// The NRI plugin inside containerd 2: a container created after the plugin connected is
// adjusted at creation; one already running when it connects is brought to its tier's
// settings by Synchronize.
func TestNRIPluginAdjustsAndSynchronizes(t *testing.T) {
	layout, root := critest.CgroupRoot(t)
	if layout.Version != cgroupfs.V1 {
		t.Skip("checks cgroup v1 files")
	}
	all := cpus(t, layout, "")
	nriSock := filepath.Join(t.TempDir(), "nri.sock")
	rt := critest.StartContainerd2(t, nriSock)
	rt.ImportImage(t, burnerImage, critest.BuildStatic(t, critest.BurnerPackage))
	rs, _ := rt.CRI(t)
	t.Cleanup(func() { critest.Cleanup(t, rs) })

	// Running before tidal connects.
	early := "7e11aa00-0010"
	eparent := critest.PodCgroupParent(root, early)
	makePodCgroup(t, layout, eparent)
	epod := critest.RunPod(t, rs, "early", "default", early, eparent, map[string]string{"tidalqos.io/qos-level": "reclaimed"})
	eid := critest.CreateContainer(t, rs, epod, nil, "burner", burnerImage, []string{"--threads", "1"},
		&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: all.String()}, nil)
	critest.StartContainer(t, rs, eid)
	if got := read(t, layout, "cpu", eparent+"/"+eid, "cpu.shares"); got != "1024" {
		t.Fatalf("before tidal: cpu.shares %s", got)
	}

	startAgent(t, root, fmt.Sprintf("hooks:\n  nri: true\n  nriSocket: %s\n", rt.NRISocket))
	eventually(t, 20*time.Second, "Synchronize brings the running container to its tier", func() error {
		if got := read(t, layout, "cpu", eparent+"/"+eid, "cpu.shares"); got != "2" {
			return fmt.Errorf("cpu.shares %s", got)
		}
		return nil
	})

	late := "7e11aa00-0011"
	lparent := critest.PodCgroupParent(root, late)
	makePodCgroup(t, layout, lparent)
	lpod := critest.RunPod(t, rs, "late", "default", late, lparent, map[string]string{"tidalqos.io/qos-level": "reclaimed"})
	reclaimedPool := cpus(t, layout, root+"/tidal-reclaimed")
	lid := critest.CreateContainer(t, rs, lpod, nil, "burner", burnerImage, []string{"--threads", "1"},
		&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: all.String()}, nil)
	critest.StartContainer(t, rs, lid)
	reclaimedConfined(t, layout, rs, lparent+"/"+lid, lid, reclaimedPool)
}

// Shared helpers, under the names these tests use.
var eventually = testutil.Eventually

type syncBuffer = testutil.SyncBuffer

// The runtime peer hangs mid-call (containerd stopped with SIGSTOP) and comes back, and the
// kubelet side goes away mid-call: the proxy never holds a call past its caller's deadline,
// never crashes, the agent keeps answering, and the proxy serves again once the runtime does.
func TestCRIProxyPeerHangsAndDisconnects(t *testing.T) {
	_, root := critest.CgroupRoot(t)
	rt := critest.StartContainerd16(t)
	o := testutil.Record(t, "the CRI proxy's runtime hangs mid-call, and its caller goes away mid-call")
	proxySock := filepath.Join(t.TempDir(), "cri.sock")
	client := startAgent(t, root, fmt.Sprintf("hooks:\n  criProxy: true\n  criSocket: %s\n  runtimeSocket: %s\n", proxySock, rt.Socket()))
	rs := dialCRI(t, proxySock)
	version := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}
	eventually(t, 10*time.Second, "the proxy serves", func() error { return version(2 * time.Second) })

	if err := rt.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Signal(syscall.SIGCONT) })
	start := time.Now()
	err := version(time.Second)
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Errorf("a call to a hung runtime: %v, want DeadlineExceeded", err)
	}
	took := time.Since(start)
	if took > 3*time.Second {
		t.Errorf("a call to a hung runtime took %v, past its caller's 1s deadline", took)
	}
	// The kubelet side disconnects mid-call.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: critest.PodConfig("gone", "default", "7e11aa00-00ff", "", nil)})
	if code := status.Code(err); code != codes.Canceled {
		t.Errorf("a call whose caller went away: %v, want Canceled", err)
	}
	if _, err := client.Status(); err != nil {
		t.Fatalf("the agent stopped answering while the runtime hung: %v", err)
	}

	if err := rt.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually(t, 10*time.Second, "the proxy serves again", func() error { return version(2 * time.Second) })
	if _, err := client.Status(); err != nil {
		t.Fatalf("agent after the runtime came back: %v", err)
	}
	o.Add(t, "a call to the hung runtime ended after %v (caller's deadline 1s, DeadlineExceeded); a call whose caller went away after 200ms: Canceled; the agent answered throughout; the proxy served again %v after SIGCONT",
		took.Round(10*time.Millisecond), time.Since(resumed).Round(time.Millisecond))
}
