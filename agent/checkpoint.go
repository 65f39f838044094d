package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// The checkpoint keeps what cannot be read back from cgroups after a restart: which cores a
// dedicated workload owns, its priority and limits. Like kubelet's cpumanager state file it
// carries a checksum, so a torn or edited file is detected instead of trusted.
const checkpointName = "agent_state.json"

type checkpointWorkload struct {
	Name            string    `json:"name"`
	Tier            qos.Tier  `json:"tier"`
	Cgroup          string    `json:"cgroup"`
	DedicatedCPUs   string    `json:"dedicatedCPUs,omitempty"`
	NUMABinding     bool      `json:"numaBinding,omitempty"`
	MilliCPU        int64     `json:"milliCPU,omitempty"`
	MemoryLimit     int64     `json:"memoryLimit,omitempty"`
	ReclaimPriority int32     `json:"reclaimPriority"`
	Started         time.Time `json:"started"`
	GPUs            []string  `json:"gpus,omitempty"`
	Queue           string    `json:"queue,omitempty"`
	KubeletOwned    bool      `json:"kubeletOwned,omitempty"`
	KubeletCPUs     bool      `json:"kubeletCPUs,omitempty"`
}

type checkpointFile struct {
	Version   int                  `json:"version"`
	Workloads []checkpointWorkload `json:"workloads"`
	Checksum  string               `json:"checksum"`
}

func checksum(ws []checkpointWorkload) (string, error) {
	data, err := json.Marshal(ws)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// saveCheckpoint writes the workloads atomically: a temp file, fsync, rename.
func saveCheckpoint(dir string, ws []plugins.Workload) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f := checkpointFile{Version: 1, Workloads: []checkpointWorkload{}}
	for _, w := range ws {
		f.Workloads = append(f.Workloads, checkpointWorkload{
			Name: w.Name, Tier: w.Tier, Cgroup: w.Cgroup, DedicatedCPUs: w.DedicatedCPUs.String(),
			NUMABinding: w.NUMABinding, MilliCPU: w.MilliCPU, MemoryLimit: w.MemoryLimit,
			ReclaimPriority: w.ReclaimPriority, Started: w.Started, GPUs: w.GPUs, Queue: w.Queue,
			KubeletOwned: w.KubeletOwned, KubeletCPUs: w.KubeletCPUs,
		})
	}
	sum, err := checksum(f.Workloads)
	if err != nil {
		return err
	}
	f.Checksum = sum
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, checkpointName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, checkpointName))
}

// loadCheckpoint reads the workloads; a missing file is an empty state.
func loadCheckpoint(dir string) ([]plugins.Workload, error) {
	path := filepath.Join(dir, checkpointName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("checkpoint %s: version %d, want 1", path, f.Version)
	}
	if sum, err := checksum(f.Workloads); err != nil || sum != f.Checksum {
		return nil, fmt.Errorf("checkpoint %s: checksum mismatch (file torn or edited)", path)
	}
	var out []plugins.Workload
	for _, c := range f.Workloads {
		cpus, err := cpuset.Parse(c.DedicatedCPUs)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: workload %s: dedicatedCPUs %q: %w", path, c.Name, c.DedicatedCPUs, err)
		}
		out = append(out, plugins.Workload{
			Name: c.Name, Tier: c.Tier, Cgroup: c.Cgroup, DedicatedCPUs: cpus, NUMABinding: c.NUMABinding,
			MilliCPU: c.MilliCPU, MemoryLimit: c.MemoryLimit, ReclaimPriority: c.ReclaimPriority, Started: c.Started,
			GPUs: c.GPUs, Queue: c.Queue, KubeletOwned: c.KubeletOwned, KubeletCPUs: c.KubeletCPUs,
		})
	}
	return out, nil
}
