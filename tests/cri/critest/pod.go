package critest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// pods remembers the config of every pod RunPod started, by pod ID (unique across runtimes):
// CreateContainer needs it, and Cleanup removes its cgroup_parent.
var pods sync.Map // pod ID -> *runtimeapi.PodSandboxConfig

// CgroupRoot returns the machine's cgroup layout and a fresh test cgroup root
// ("tidal-test-<random>", isolationtest.RootName) for pods' cgroup parents. When the test ends
// the root is removed from every cgroup hierarchy, not only those tidal uses: runc's cgroupfs
// driver creates the path in all of them (blkio, pids, devices, freezer, name=systemd, ...).
// Call it before starting a Runtime, so that the runtime stops before the root is removed.
func CgroupRoot(t testing.TB) (*cgroupfs.Layout, string) {
	t.Helper()
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	// Registered after RootName's cleanup, so it runs first.
	t.Cleanup(func() { RemoveCgroup(t, root) })
	return layout, root
}

// PodCgroupParent is a kubelet-style (cgroupfs driver) pod cgroup under root:
// /<root>/kubepods/besteffort/pod<uid>.
func PodCgroupParent(root, uid string) string {
	return "/" + filepath.Join(root, "kubepods", "besteffort", "pod"+uid)
}

// PodConfig is the sandbox config RunPod uses: host network (hostname left empty, which host
// network sandboxes require), kubelet's labels, cgroupParent (cgroupfs driver) and annotations.
func PodConfig(name, namespace, uid, cgroupParent string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": namespace,
			"io.kubernetes.pod.uid":       uid,
		},
		Annotations: annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_NODE,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// RunPod starts a host-network pod sandbox (PodConfig) and returns its ID.
func RunPod(t testing.TB, rs runtimeapi.RuntimeServiceClient, name, namespace, uid string, cgroupParent string, annotations map[string]string) string {
	t.Helper()
	cfg := PodConfig(name, namespace, uid, cgroupParent, annotations)
	ctx, cancel := callContext()
	defer cancel()
	resp, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("critest: RunPodSandbox %s/%s: %v", namespace, name, err)
	}
	pods.Store(resp.PodSandboxId, cfg)
	return resp.PodSandboxId
}

// CreateContainer creates (does not start) container name from image in pod podID, with args
// for the image's entrypoint and resources, and returns its ID. podConfig may be nil for a pod
// RunPod started.
func CreateContainer(t testing.TB, rs runtimeapi.RuntimeServiceClient, podID string, podConfig *runtimeapi.PodSandboxConfig,
	name, image string, args []string, resources *runtimeapi.LinuxContainerResources, annotations map[string]string) string {
	t.Helper()
	if podConfig == nil {
		c, ok := pods.Load(podID)
		if !ok {
			t.Fatalf("critest: CreateContainer: pod %s was not started by RunPod: pass its config", podID)
		}
		podConfig = c.(*runtimeapi.PodSandboxConfig)
	}
	labels := map[string]string{"io.kubernetes.container.name": name}
	for _, k := range []string{"io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"} {
		if v, ok := podConfig.GetLabels()[k]; ok {
			labels[k] = v
		}
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: image},
		Args:        args,
		Labels:      labels,
		Annotations: annotations,
		Linux:       &runtimeapi.LinuxContainerConfig{Resources: resources},
	}
	ctx, cancel := callContext()
	defer cancel()
	resp, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: cfg, SandboxConfig: podConfig})
	if err != nil {
		t.Fatalf("critest: CreateContainer %s in pod %s: %v", name, podID, err)
	}
	return resp.ContainerId
}

// StartContainer starts a created container.
func StartContainer(t testing.TB, rs runtimeapi.RuntimeServiceClient, id string) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("critest: StartContainer %s: %v", id, err)
	}
}

// StopContainer stops a container, SIGKILL after timeout seconds.
func StopContainer(t testing.TB, rs runtimeapi.RuntimeServiceClient, id string, timeout int64) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		t.Fatalf("critest: StopContainer %s: %v", id, err)
	}
}

// RemoveContainer removes a container (stopping it first if it runs).
func RemoveContainer(t testing.TB, rs runtimeapi.RuntimeServiceClient, id string) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("critest: RemoveContainer %s: %v", id, err)
	}
}

// StopPod stops a pod sandbox and its containers.
func StopPod(t testing.TB, rs runtimeapi.RuntimeServiceClient, podID string) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("critest: StopPodSandbox %s: %v", podID, err)
	}
}

// RemovePod removes a pod sandbox and its containers (stopping them first). The pod's
// cgroup_parent stays behind, as with a kubelet (which removes it itself): Cleanup removes it.
func RemovePod(t testing.TB, rs runtimeapi.RuntimeServiceClient, podID string) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("critest: RemovePodSandbox %s: %v", podID, err)
	}
}

// UpdateResources changes a container's resources live (UpdateContainerResources).
func UpdateResources(t testing.TB, rs runtimeapi.RuntimeServiceClient, id string, resources *runtimeapi.LinuxContainerResources) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if _, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id, Linux: resources}); err != nil {
		t.Fatalf("critest: UpdateContainerResources %s: %v", id, err)
	}
}

// ContainerPID returns the host PID of a running container's main process, from the
// runtime's verbose ContainerStatus ("pid" in its "info").
func ContainerPID(t testing.TB, rs runtimeapi.RuntimeServiceClient, id string) int {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	resp, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("critest: ContainerStatus %s: %v", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("critest: ContainerStatus %s: no pid in verbose info (%v): %v", id, err, resp.GetInfo())
	}
	return info.Pid
}

// Cleanup stops and removes every pod of the runtime behind rs (their containers with them),
// then removes the cgroup_parent of each pod RunPod started, in every cgroup hierarchy. The
// test root itself stays for CgroupRoot's cleanup. Runtimes call it when they stop; tests call
// it to check that nothing is left.
func Cleanup(t testing.TB, rs runtimeapi.RuntimeServiceClient) {
	t.Helper()
	ctx, cancel := callContext()
	resp, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		t.Errorf("critest: cleanup: ListPodSandbox: %v", err)
		return
	}
	for _, p := range resp.Items {
		ctx, cancel := callContext()
		_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
		cancel()
		if err != nil {
			t.Errorf("critest: cleanup: StopPodSandbox %s: %v", p.Id, err)
		}
		ctx, cancel = callContext()
		_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
		cancel()
		if err != nil {
			t.Errorf("critest: cleanup: RemovePodSandbox %s: %v", p.Id, err)
			continue
		}
		if c, ok := pods.LoadAndDelete(p.Id); ok {
			RemoveCgroup(t, c.(*runtimeapi.PodSandboxConfig).GetLinux().GetCgroupParent())
		}
	}
}

// RemoveCgroup kills every process in cgroup rel (a path from the hierarchy root, like a
// cgroup_parent) and its descendants and removes them, deepest first, in every cgroup
// hierarchy mounted on the machine (v1 and v2). Missing ones are fine.
func RemoveCgroup(t testing.TB, rel string) {
	t.Helper()
	rel = strings.Trim(filepath.Clean("/"+rel), "/")
	if rel == "" {
		t.Errorf("critest: refusing to remove a hierarchy's root cgroup")
		return
	}
	var dirs []string
	for _, mount := range cgroupMounts() {
		top := filepath.Join(mount, rel)
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		var err error
		for try := 0; try < 100; try++ {
			if err = os.Remove(d); err == nil || os.IsNotExist(err) {
				err = nil
				break
			}
			killProcs(d) // a process still in it (or a child) keeps it busy
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("critest: cannot remove cgroup %s: %v", d, err)
		}
	}
}

// killProcs SIGKILLs the processes in cgroup folder dir and below.
func killProcs(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// CgroupDirs lists where cgroup rel exists, one folder per cgroup hierarchy mounted on the
// machine: empty once it is gone everywhere.
func CgroupDirs(rel string) []string {
	var out []string
	for _, m := range cgroupMounts() {
		d := filepath.Join(m, strings.Trim(rel, "/"))
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// cgroupMounts lists every cgroup (v1) and cgroup2 mount point of this mount namespace.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && i >= 5 {
				if fs := fields[i+1]; (fs == "cgroup" || fs == "cgroup2") && !seen[fields[4]] {
					seen[fields[4]] = true
					out = append(out, unescapeMount(fields[4]))
				}
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}
