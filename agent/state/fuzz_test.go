package state

// FuzzCheckpoint sits in a file of its own so it moves with the code it exercises;
// scripts/fuzz.sh runs it for a bounded time.

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// FuzzCheckpoint: any bytes in the state folder's checkpoint either load or give an error
// naming the file; what loads saves and loads back the same.
func FuzzCheckpoint(f *testing.F) {
	seedDir := f.TempDir()
	ws := []plugins.Workload{
		{Name: "db", Tier: qos.Dedicated, Cgroup: "tidal/dedicated/db", DedicatedCPUs: cpuset.New(2, 3), NUMABinding: true, Started: time.Unix(100, 0).UTC()},
		{Name: "batch", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/batch", DedicatedCPUs: cpuset.New(), ReclaimPriority: -3,
			MemoryLimit: 1 << 30, MilliCPU: 500, Started: time.Unix(200, 0).UTC(), GPUs: []string{"GPU-1"}, Queue: "team-a"},
		{Name: "default/web", Tier: qos.Shared, Cgroup: "kubepods/burstable/pod1", DedicatedCPUs: cpuset.New(), Owner: plugins.OwnerKubeletCPUManager},
	}
	if err := saveCheckpoint(seedDir, ws); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(seedDir, checkpointName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2]) // torn
	f.Add(bytes.Replace(good, []byte(`"2-3"`), []byte(`"0-3"`), 1))
	f.Add([]byte(`{"version":1,"workloads":[],"checksum":"4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, checkpointName)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := loadCheckpoint(dir)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error does not name the file: %v", err)
			}
			if got != nil {
				t.Fatalf("error %v with workloads %v", err, got)
			}
			return
		}
		for _, w := range got {
			// A loaded workload's cpus are a valid set (String parses back to the same).
			back, err := cpuset.Parse(w.DedicatedCPUs.String())
			if err != nil || !back.Equals(w.DedicatedCPUs) {
				t.Fatalf("workload %q: cpus %q do not parse back: %v", w.Name, w.DedicatedCPUs, err)
			}
		}
		dir2 := t.TempDir()
		if err := saveCheckpoint(dir2, got); err != nil {
			t.Fatalf("save what loaded: %v", err)
		}
		again, err := loadCheckpoint(dir2)
		if err != nil {
			t.Fatalf("load what was saved: %v", err)
		}
		if !sameWorkloads(got, again) {
			t.Fatalf("round trip changed the workloads:\n got %+v\nwant %+v", again, got)
		}
	})
}

func sameWorkloads(a, b []plugins.Workload) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Started.Equal(y.Started) || !x.DedicatedCPUs.Equals(y.DedicatedCPUs) {
			return false
		}
		x.Started, y.Started = time.Time{}, time.Time{}
		x.DedicatedCPUs, y.DedicatedCPUs = cpuset.New(), cpuset.New()
		if len(x.GPUs) == 0 && len(y.GPUs) == 0 {
			x.GPUs, y.GPUs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
