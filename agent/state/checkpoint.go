package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	// The owner as two flags, as the file has always had it (an older agent reads it).
	KubeletOwned bool   `json:"kubeletOwned,omitempty"`
	KubeletCPUs  bool   `json:"kubeletCPUs,omitempty"`
	UID          string `json:"uid,omitempty"`
	// CPU burst (issue 12): tidal run's --cpu-burst-percent.
	CPUBurstPercent int32 `json:"cpuBurstPercent,omitempty"`
}

func ownerFlags(o plugins.Owner) (kubeletOwned, kubeletCPUs bool) {
	return o != plugins.OwnerTidal, o == plugins.OwnerKubeletCPUManager
}

func ownerOf(kubeletOwned, kubeletCPUs bool) plugins.Owner {
	switch {
	case kubeletCPUs:
		return plugins.OwnerKubeletCPUManager
	case kubeletOwned:
		return plugins.OwnerKubelet
	}
	return plugins.OwnerTidal
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
		owned, pinned := ownerFlags(w.Owner)
		f.Workloads = append(f.Workloads, checkpointWorkload{
			Name: w.Name, Tier: w.Tier, Cgroup: w.Cgroup, DedicatedCPUs: w.DedicatedCPUs.String(),
			NUMABinding: w.NUMABinding, MilliCPU: w.MilliCPU, MemoryLimit: w.MemoryLimit,
			ReclaimPriority: w.ReclaimPriority, Started: w.Started, GPUs: w.GPUs, Queue: w.Queue,
			KubeletOwned: owned, KubeletCPUs: pinned, UID: w.UID,
			CPUBurstPercent: w.CPUBurstPercent,
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
	if err := os.Rename(tmp.Name(), filepath.Join(dir, checkpointName)); err != nil {
		return err
	}
	// The rename is durable only once the folder is synced: an admitted workload's
	// checkpoint must survive a power loss, not only a crash.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// LoadCheckpoint reads the workloads saved in dir; a missing file is an empty state.
func LoadCheckpoint(dir string) ([]plugins.Workload, error) { return loadCheckpoint(dir) }

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
			GPUs: c.GPUs, Queue: c.Queue, Owner: ownerOf(c.KubeletOwned, c.KubeletCPUs), UID: c.UID,
			CPUBurstPercent: c.CPUBurstPercent,
		})
	}
	return out, nil
}

// checkpointer writes the newest state to the checkpoint file. Store hands it each new
// generation under the store's lock (a cheap copy); the file is written and fsynced
// outside that lock, by Run's goroutine or by a caller of Save that needs it durable now.
// Writes coalesce: a burst of pod events costs one write.
type checkpointer struct {
	dir string

	mu      sync.Mutex
	pending []plugins.Workload
	wantGen uint64
	doneGen uint64
	lastErr error
	wake    chan struct{}

	// writing serializes the file writes themselves (Run's goroutine and Save).
	writing sync.Mutex
}

func newCheckpointer(dir string) *checkpointer {
	return &checkpointer{dir: dir, wake: make(chan struct{}, 1)}
}

func (c *checkpointer) want(gen uint64, ws []plugins.Workload) {
	c.mu.Lock()
	c.pending, c.wantGen = ws, gen
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// save writes the newest wanted state unless it is written already.
func (c *checkpointer) save() error {
	c.writing.Lock()
	defer c.writing.Unlock()
	c.mu.Lock()
	gen, ws := c.wantGen, c.pending
	if gen == c.doneGen {
		err := c.lastErr
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	err := saveCheckpoint(c.dir, ws)
	c.mu.Lock()
	c.doneGen, c.lastErr = gen, err
	c.mu.Unlock()
	return err
}

// Save writes the state to the checkpoint now, in the caller's goroutine, unless it is
// written already: for a change the caller must not acknowledge before it is durable.
// Never call it with the store's lock held.
func (s *Store) Save() error { return s.saved.save() }

// RunCheckpoints writes every new state to the checkpoint until ctx is done, then once more
// so nothing is lost on a clean stop. Failures are passed to onError (the state folder full
// or read-only): the agent goes on, and the next change tries again.
func (s *Store) RunCheckpoints(ctx context.Context, onError func(error)) {
	report := func(err error) {
		if err != nil {
			onError(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			report(s.saved.save())
			return
		case <-s.saved.wake:
			report(s.saved.save())
		}
	}
}
