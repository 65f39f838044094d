package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

func TestCheckpointRoundTripAndCorruption(t *testing.T) {
	dir := t.TempDir()
	ws := []plugins.Workload{
		{Name: "db", Tier: qos.Dedicated, Cgroup: "tidal/dedicated/db", DedicatedCPUs: cpuset.New(2, 3), NUMABinding: true, Started: time.Unix(100, 0).UTC()},
		{Name: "batch", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/batch", DedicatedCPUs: cpuset.New(), ReclaimPriority: -3, MemoryLimit: 1 << 30, MilliCPU: 500, Started: time.Unix(200, 0).UTC()},
	}
	if err := saveCheckpoint(dir, ws); err != nil {
		t.Fatal(err)
	}
	got, err := loadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].DedicatedCPUs.Equals(cpuset.New(2, 3)) || got[1].ReclaimPriority != -3 || got[1].MemoryLimit != 1<<30 || !got[0].Started.Equal(ws[0].Started) {
		t.Fatalf("round trip = %+v", got)
	}

	path := filepath.Join(dir, checkpointName)
	data, _ := os.ReadFile(path)
	edited := strings.Replace(string(data), `"2-3"`, `"0-3"`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("edited checkpoint: err = %v, want a checksum error", err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCheckpoint(dir); err == nil {
		t.Error("torn checkpoint loaded")
	}
	if got, err := loadCheckpoint(t.TempDir()); err != nil || got != nil {
		t.Errorf("missing checkpoint = %v, %v; want empty", got, err)
	}
}
