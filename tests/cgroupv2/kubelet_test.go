package cgroupv2

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/agent/kube"
	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/policy"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// kubeletMkdir makes cgroup rel as the kubelet (or systemd for it) would on v2: the directory,
// with every controller its parent offers enabled in the parent's subtree_control first.
func kubeletMkdir(t *testing.T, l *cgroupfs.Layout, rel string) {
	t.Helper()
	parts := strings.Split(rel, "/")
	for i := range parts {
		dir := filepath.Join(l.Unified, filepath.Join(parts[:i+1]...))
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		parent := filepath.Dir(dir)
		if parent != l.Unified {
			for _, c := range strings.Fields(readFile(t, filepath.Join(parent, "cgroup.controllers"))) {
				if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
					t.Fatalf("enable %s in %s: %v", c, parent, err)
				}
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// The kubelet's pod cgroups on v2, for both its drivers: tidal finds the layout (kubepods,
// kubepods.slice) under the kubelet's cgroup root, names each pod's cgroup as the kubelet
// does, and writes what its tier decides into pod and container cgroups it did not make
// (a reclaimed BestEffort pod: cpu.idle, the lent quota and memory, the reclaimed pool; a
// Guaranteed online pod: the shared pool only, its limits left the kubelet's), while the
// containers' processes stay where they are. A pod whose cgroup is gone is skipped.
func TestV2KubeletLayouts(t *testing.T) {
	l := unified(t)
	for _, driver := range []string{config.DriverCgroupfs, config.DriverSystemd} {
		t.Run(driver, func(t *testing.T) {
			root := isolationtest.RootName(t, l) // the kubelet's --cgroup-root
			beUID, gUID := types.UID("0d5c4a2e-1111-4c1e-9f00-be0000000001"), types.UID("7a1b2c3d-2222-4c1e-9f00-9a0000000002")
			want := kube.CgroupLayout{Driver: driver, Root: root}
			bePod, gPod := want.Pod(corev1.PodQOSBestEffort, beUID), want.Pod(corev1.PodQOSGuaranteed, gUID)
			var beCtr, gCtr string
			if driver == config.DriverSystemd {
				if bePod != root+"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0d5c4a2e_1111_4c1e_9f00_be0000000001.slice" {
					t.Errorf("systemd BestEffort pod cgroup %s", bePod)
				}
				beCtr, gCtr = bePod+"/cri-containerd-aaaa.scope", gPod+"/cri-containerd-bbbb.scope"
			} else {
				if bePod != root+"/kubepods/besteffort/pod"+string(beUID) {
					t.Errorf("cgroupfs BestEffort pod cgroup %s", bePod)
				}
				beCtr, gCtr = bePod+"/aaaa", gPod+"/bbbb"
			}
			kubeletMkdir(t, l, beCtr)
			kubeletMkdir(t, l, gCtr)
			// The kubelet's own limits on the Guaranteed pod (1 CPU, 128 MiB).
			for f, v := range map[string]string{"cpu.max": "100000 100000", "memory.max": strconv.Itoa(128 << 20)} {
				if err := os.WriteFile(filepath.Join(l.Unified, gPod, f), []byte(v), 0); err != nil {
					t.Fatal(err)
				}
			}
			be, g := sleeper(t), sleeper(t)
			for ctr, pid := range map[string]int{beCtr: be.Process.Pid, gCtr: g.Process.Pid} {
				if err := os.WriteFile(filepath.Join(l.Unified, ctr, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
					t.Fatal(err)
				}
			}

			got, err := kube.DetectLayout(config.DriverAuto, "/"+root+"/", l.Exists)
			if err != nil || got != want {
				t.Fatalf("DetectLayout = %+v, %v; want %+v", got, err, want)
			}

			w := newWriter(t, l)
			pools := plugins.Pools{{Node: 0, Shared: cpuset.New(0, 1), Reclaimed: cpuset.New(1)}}
			// The quota mechanism, so a reclaimed pod's cpu.max carries what is lent.
			node := plugins.Node{CPUs: cpuset.New(0, 1), Pools: pools, LentMilliCPU: 700, LentMemory: 256 << 20, Idle: w.SupportsIdle(),
				ReclaimedCPU: plugins.MechanismQuota}
			if !node.Idle {
				t.Fatal("the writer says the v2 kernel has no cpu.idle")
			}
			reclaimed := policy.Default().Decide(plugins.Workload{Tier: qos.Reclaimed, Cgroup: bePod, Owner: plugins.OwnerKubelet}, node)
			online := policy.Default().Decide(plugins.Workload{Tier: qos.Shared, Cgroup: gPod, Owner: plugins.OwnerKubelet}, node)
			ctrOf := func(s plugins.Settings) plugins.Settings { return plugins.Settings{CPUs: s.CPUs, Mems: s.Mems} }
			gone := want.Pod(corev1.PodQOSBestEffort, "99999999-0000-0000-0000-000000000000")
			apply(t, w,
				plugins.Cgroup{Path: bePod, Settings: reclaimed.Settings, Foreign: true},
				plugins.Cgroup{Path: beCtr, Settings: ctrOf(reclaimed.Settings), Foreign: true},
				plugins.Cgroup{Path: gPod, Settings: online.Settings, Foreign: true},
				plugins.Cgroup{Path: gCtr, Settings: ctrOf(online.Settings), Foreign: true},
				plugins.Cgroup{Path: gone, Settings: reclaimed.Settings, Foreign: true},
			)
			wantFiles(t, l, map[string]string{
				bePod + "/cpu.idle":              "1",
				bePod + "/cpu.max":               "70000 100000",
				bePod + "/memory.max":            strconv.Itoa(256 << 20),
				bePod + "/cpuset.cpus":           "1",
				beCtr + "/cpuset.cpus.effective": "1",
				gPod + "/cpuset.cpus":            "0-1",
				gPod + "/cpu.max":                "100000 100000", // the kubelet's
				gPod + "/memory.max":             strconv.Itoa(128 << 20),
				gPod + "/cpu.idle":               "0",
				gCtr + "/cpuset.cpus.effective":  "0-1",
			})
			for ctr, pid := range map[string]int{beCtr: be.Process.Pid, gCtr: g.Process.Pid} {
				if got := readFile(t, fmt.Sprintf("/proc/%d/cgroup", pid)); got != "0::/"+ctr {
					t.Errorf("pid %d is in %s, want %s", pid, got, ctr)
				}
			}
			if l.Exists(gone) {
				t.Errorf("tidal created the cgroup of a pod that does not exist: %s", gone)
			}
			pids, err := l.Procs(want.Kubepods(), true)
			if err != nil || len(pids) != 2 {
				t.Errorf("Procs(%s) = %v, %v; want the two containers' processes", want.Kubepods(), pids, err)
			}
		})
	}
}
