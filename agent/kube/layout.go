// Package kube is tidal's Kubernetes workload source and reporter: it watches the pods bound to
// this node, finds their cgroups under the kubelet's layout, reads the kubelet CPU manager's
// exclusive CPUs and the tier policy, publishes what the node lends on its Node object, and
// evicts pods through the Eviction API. It decides nothing: the agent does.
package kube

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidalqos/tidal/agent/config"
)

// CgroupLayout is where the kubelet puts pod cgroups, relative to each hierarchy's root.
type CgroupLayout struct {
	// Driver is config.DriverCgroupfs or config.DriverSystemd.
	Driver string
	// Root is the kubelet's --cgroup-root without slashes around it ("" for the top).
	Root string
}

// DetectLayout resolves the kubelet's cgroup driver. want "auto" looks for the systemd
// slice, then the cgroupfs folder, under root; exists tells whether a relative cgroup exists.
func DetectLayout(want, root string, exists func(string) bool) (CgroupLayout, error) {
	l := CgroupLayout{Driver: want, Root: strings.Trim(root, "/")}
	if want != config.DriverAuto {
		return l, nil
	}
	for _, d := range []string{config.DriverSystemd, config.DriverCgroupfs} {
		l.Driver = d
		if exists(l.Kubepods()) {
			return l, nil
		}
	}
	return CgroupLayout{}, fmt.Errorf("no kubelet cgroups under %q (neither kubepods.slice nor kubepods): is the kubelet running, and is kubernetes.cgroupRoot its --cgroup-root?", "/"+l.Root)
}

// Kubepods is the cgroup that holds every pod.
func (l CgroupLayout) Kubepods() string {
	if l.Driver == config.DriverSystemd {
		return path.Join(l.Root, "kubepods.slice")
	}
	return path.Join(l.Root, "kubepods")
}

// Pod is a pod's cgroup: kubepods[/<class>]/pod<uid> with cgroupfs,
// kubepods.slice[/kubepods-<class>.slice]/kubepods[-<class>]-pod<uid>.slice with systemd
// (dashes in the UID become underscores, as systemd unit names need).
func (l CgroupLayout) Pod(class corev1.PodQOSClass, uid types.UID) string {
	cls := ""
	if class != corev1.PodQOSGuaranteed {
		cls = strings.ToLower(string(class))
	}
	if l.Driver == config.DriverSystemd {
		p, prefix := l.Kubepods(), "kubepods"
		if cls != "" {
			prefix += "-" + cls
			p = path.Join(p, prefix+".slice")
		}
		return path.Join(p, prefix+"-pod"+strings.ReplaceAll(string(uid), "-", "_")+".slice")
	}
	return path.Join(l.Kubepods(), cls, "pod"+string(uid))
}
