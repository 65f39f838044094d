package gpu

import (
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
)

// TestRealLending runs the tracker on the real GPUs' reads. It is skipped unless
// TIDAL_GPU_REAL=1 (scripts/gpu-check.sh sets it on a machine with an NVIDIA GPU).
func TestRealLending(t *testing.T) {
	if os.Getenv("TIDAL_GPU_REAL") != "1" {
		t.Skip("set TIDAL_GPU_REAL=1 on a machine with an NVIDIA GPU (scripts/gpu-check.sh)")
	}
	src := sysgpu.Open(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer src.Close()
	tr, err := NewTracker(Config{IdleWindow: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// No workloads: every GPU process is of no known workload and blocks lending.
	owner := OwnerByCgroup(nil, func(pid int) (string, error) { return sysgpu.ProcessCgroup("/proc", pid) })
	var last []sysgpu.Device
	for i := 0; i < 3; i++ {
		devs, err := src.Devices()
		if err != nil {
			t.Errorf("read %d: %v", i, err)
		}
		if len(devs) == 0 {
			t.Fatal("no GPU read (TIDAL_GPU_REAL=1 needs an NVIDIA GPU)")
		}
		tr.Observe(time.Now(), devs, owner)
		last = devs
		time.Sleep(time.Second)
	}
	states := tr.States()
	if len(states) != len(last) {
		t.Fatalf("%d states for %d GPUs", len(states), len(last))
	}
	lendable := 0
	for i, s := range states {
		d := last[i]
		t.Logf("GPU %d %s NUMA %d util %d%% processes %d: lendable=%v (%s)",
			s.Index, s.UUID, s.NUMANode, d.UtilizationGPU, len(d.Processes), s.Lendable, s.Reason)
		if s.UUID != d.UUID || s.NUMANode != d.NUMANode {
			t.Errorf("state %+v does not match device %+v", s, d)
		}
		if len(d.Processes) > 0 && s.Lendable {
			t.Errorf("GPU %d has processes of no known workload but is lendable", s.Index)
		}
		if s.Lendable {
			lendable++
		}
	}
	if lendable != tr.Lendable() {
		t.Errorf("Lendable() = %d, states say %d", tr.Lendable(), lendable)
	}
	if lendable == 0 {
		t.Log("no GPU idle for the 2s window here; assignment not exercised")
		return
	}
	uuids, err := tr.Assign(Request{Workload: "check", GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	env, minors := tr.Visibility("check")
	t.Logf("assigned %v: env %v minors %v", uuids, env, minors)
	if len(minors) != 1 {
		t.Fatalf("minors %v", minors)
	}
	if _, err := os.Stat("/dev/nvidia" + strconv.Itoa(minors[0])); err != nil {
		t.Errorf("device node of the lent GPU: %v", err)
	}
}
