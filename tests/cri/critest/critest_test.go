package critest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

const burnerImage = "tidal.test/critest/burner:1"

var burnerArgs = []string{"--threads", "1"}

// TestContainerd16 runs a pod and a CPU burner with cpu shares and a cpuset through Debian's
// containerd 1.6 and checks the real cgroup files runc wrote, a live update and that removal
// leaves no cgroup and no process behind.
func TestContainerd16(t *testing.T) {
	layout, root := CgroupRoot(t)
	if layout.Version != cgroupfs.V1 {
		t.Skip("checks cgroup v1 files (cpu.shares, cpuset.cpus)")
	}
	rt := StartContainerd16(t)
	rs, is := rt.CRI(t)
	version(t, rs)
	rt.ImportImage(t, burnerImage, BuildStatic(t, BurnerPackage))
	for _, ref := range []string{PauseImage, burnerImage} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		cancel()
		if err != nil || resp.GetImage() == nil {
			t.Fatalf("image %s not listed over CRI: %v", ref, err)
		}
	}

	uid := "0b1e4a2c-16"
	parent := PodCgroupParent(root, uid)
	podID := RunPod(t, rs, "burner", "default", uid, parent, map[string]string{"tidal.io/test": "critest"})
	id := CreateContainer(t, rs, podID, nil, "burner", burnerImage, burnerArgs,
		&runtimeapi.LinuxContainerResources{CpuShares: 512, CpusetCpus: "0"}, nil)
	StartContainer(t, rs, id)

	cg := parent + "/" + id
	if got := readCgroup(t, layout, "cpu", cg, "cpu.shares"); got != "512" {
		t.Errorf("cpu.shares = %q, want 512", got)
	}
	if got := readCgroup(t, layout, "cpuset", cg, "cpuset.cpus"); got != "0" {
		t.Errorf("cpuset.cpus = %q, want 0", got)
	}
	pid := ContainerPID(t, rs, id)
	procs, err := layout.Procs(strings.TrimPrefix(cg, "/"), false)
	if err != nil || !contains(procs, pid) {
		t.Errorf("container process %d not in cgroup %s (procs %v, %v)", pid, cg, procs, err)
	}
	if self := procCgroup(t, pid, "cpu"); self != cg {
		t.Errorf("/proc/%d/cgroup: cpu %q, want %q", pid, self, cg)
	}
	waitBurning(t, pid)
	t.Logf("container %.12s: pid %d in %s: cpu.shares 512, cpuset.cpus 0", id, pid, cg)

	UpdateResources(t, rs, id, &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpusetCpus: "0"})
	if got := readCgroup(t, layout, "cpu", cg, "cpu.shares"); got != "1024" {
		t.Errorf("after update: cpu.shares = %q, want 1024", got)
	} else {
		t.Logf("UpdateContainerResources: cpu.shares 1024 live")
	}

	sandboxPID := sandboxProcesses(t, layout, parent, podID)
	Cleanup(t, rs)
	checkGone(t, rs, parent, append(sandboxPID, pid))
}

// TestContainerd2 is the same pod smoke test through the containerd v2 build, with NRI v2
// enabled: run, start, check the cgroup, remove, nothing left.
func TestContainerd2(t *testing.T) {
	layout, root := CgroupRoot(t)
	rt := StartContainerd2(t, "")
	rs, _ := rt.CRI(t)
	version(t, rs)
	if _, err := os.Stat(rt.NRISocket); err != nil {
		t.Errorf("NRI socket %s: %v", rt.NRISocket, err)
	}
	rt.ImportImage(t, burnerImage, BuildStatic(t, BurnerPackage))

	uid := "0b1e4a2c-20"
	parent := PodCgroupParent(root, uid)
	podID := RunPod(t, rs, "burner", "default", uid, parent, nil)
	id := CreateContainer(t, rs, podID, nil, "burner", burnerImage, burnerArgs,
		&runtimeapi.LinuxContainerResources{CpuShares: 256}, nil)
	StartContainer(t, rs, id)
	cg := parent + "/" + id
	pid := ContainerPID(t, rs, id)
	if layout.Version == cgroupfs.V1 {
		if got := readCgroup(t, layout, "cpu", cg, "cpu.shares"); got != "256" {
			t.Errorf("cpu.shares = %q, want 256", got)
		}
	}
	if self := procCgroup(t, pid, "cpu"); self != cg {
		t.Errorf("/proc/%d/cgroup: cpu %q, want %q", pid, self, cg)
	}
	t.Logf("container %.12s: pid %d in %s", id, pid, cg)

	sandboxPID := sandboxProcesses(t, layout, parent, podID)
	StopContainer(t, rs, id, 5)
	RemoveContainer(t, rs, id)
	RemovePod(t, rs, podID)
	// RemovePodSandbox leaves the pod's cgroup_parent, as with a kubelet.
	t.Logf("after RemovePodSandbox, pod cgroup %s is left in %d hierarchies", parent, len(CgroupDirs(parent)))
	Cleanup(t, rs) // no pods left: nothing to do on the runtime's side
	RemoveCgroup(t, parent)
	checkGone(t, rs, parent, append(sandboxPID, pid))
}

func version(t *testing.T, rs runtimeapi.RuntimeServiceClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	t.Logf("CRI: %s %s (CRI %s)", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
}

func readCgroup(t *testing.T, layout *cgroupfs.Layout, controller, cg, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layout.Dir(controller, cg), file))
	if err != nil {
		t.Fatalf("read %s of %s: %v", file, cg, err)
	}
	return strings.TrimSpace(string(b))
}

// procCgroup returns process pid's cgroup path in the v1 hierarchy of controller (or the
// unified one on v2).
func procCgroup(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return parts[2]
			}
		}
		if parts[1] == "" {
			unified = parts[2]
		}
	}
	return unified
}

// waitBurning waits until the burner process has used CPU time: it really runs.
func waitBurning(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("burner %d: %v", pid, err)
		}
		// Fields after the command's closing parenthesis: utime is the 12th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 11 && f[11] != "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("burner %d used no CPU in 20 s", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sandboxProcesses returns the processes of the pod's sandbox (pause) cgroup.
func sandboxProcesses(t *testing.T, layout *cgroupfs.Layout, parent, podID string) []int {
	t.Helper()
	procs, err := layout.Procs(strings.TrimPrefix(parent+"/"+podID, "/"), false)
	if err != nil || len(procs) == 0 {
		t.Errorf("sandbox cgroup %s/%s: procs %v, %v", parent, podID, procs, err)
	}
	return procs
}

// checkGone checks that the runtime lists no pod or container, that the pod's cgroup is gone
// from every hierarchy and that none of pids runs any more.
func checkGone(t *testing.T, rs runtimeapi.RuntimeServiceClient, parent string, pids []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left: %v (%v)", pods.GetItems(), err)
	}
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(ctrs.Containers) != 0 {
		t.Errorf("containers left: %v (%v)", ctrs.GetContainers(), err)
	}
	if dirs := CgroupDirs(parent); len(dirs) != 0 {
		t.Errorf("pod cgroup left: %v", dirs)
	}
	for _, pid := range pids {
		// A zombie would still answer signal 0; the runtime reaps its children.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still runs", pid)
		}
	}
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
