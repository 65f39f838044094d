package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"
)

// cpuManagerCheckpoint is the kubelet CPU manager's state file (its checkpoint v2 format).
type cpuManagerCheckpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
}

// ExclusiveCPUs reads the kubelet CPU manager's state file and returns, per pod UID, the CPUs
// its static policy gave exclusively to that pod's containers. A missing file (or "") means
// no CPU manager: no exclusive CPUs.
func ExclusiveCPUs(path string) (map[types.UID]cpuset.CPUSet, error) {
	out := map[types.UID]cpuset.CPUSet{}
	if path == "" {
		return out, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var cp cpuManagerCheckpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("kubelet CPU manager state %s: %w", path, err)
	}
	if cp.PolicyName != "static" {
		return out, nil // the none policy gives nothing exclusively
	}
	for uid, containers := range cp.Entries {
		set := cpuset.New()
		for name, text := range containers {
			cpus, err := cpuset.Parse(text)
			if err != nil {
				return nil, fmt.Errorf("kubelet CPU manager state %s: pod %s container %s: cpuset %q: %w", path, uid, name, text, err)
			}
			set = set.Union(cpus)
		}
		if !set.IsEmpty() {
			out[types.UID(uid)] = set
		}
	}
	return out, nil
}
