package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/ioadvisor"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// Online IO is the disk's less reclaimed work's own; latency is time per completed IO.
func TestIOFiguresBetween(t *testing.T) {
	disks := []ioDisk{{Disk: ioadvisor.Disk{Device: "254:0", Name: "vda"}}}
	t0 := time.Unix(1000, 0)
	prev := ioReading{at: t0,
		disks:     map[string]metrics.DiskStat{"254:0": {Writes: 100, WriteBytes: 100 << 20, WriteTicks: 1000}},
		reclaimed: map[string]cgroupfs.IOCounters{"254:0": {Writes: 50, WriteBytes: 80 << 20}}}
	cur := ioReading{at: t0.Add(2 * time.Second),
		disks:     map[string]metrics.DiskStat{"254:0": {Writes: 300, WriteBytes: 300 << 20, WriteTicks: 3000}},
		reclaimed: map[string]cgroupfs.IOCounters{"254:0": {Writes: 150, WriteBytes: 230 << 20}}}
	f := ioFiguresBetween(prev, cur, disks)
	s := f.samples["254:0"]
	// Disk 100 MiB/s and 100 IO/s, reclaimed 75 MiB/s and 50 IO/s.
	if s.Online[1] != 25<<20 || s.Online[3] != 50 {
		t.Errorf("online %v, want write 25MiB/s and 50 IO/s", s.Online)
	}
	if s.Latency != 10*time.Millisecond {
		t.Errorf("latency %v, want 10ms (2000ms over 200 IOs)", s.Latency)
	}
	// A reclaimed counter that went back (a workload's cgroup removed on v1) is no IO, not
	// a huge one.
	cur.reclaimed["254:0"] = cgroupfs.IOCounters{}
	if f := ioFiguresBetween(prev, cur, disks); f.reclaimed["254:0"] != (ioadvisor.Rates{}) {
		t.Errorf("reclaimed after a reset: %v", f.reclaimed["254:0"])
	}
	// A disk missing from a reading has no sample: the advisor lends it the floor.
	if f := ioFiguresBetween(prev, ioReading{at: cur.at}, disks); len(f.samples) != 0 {
		t.Errorf("samples without a reading: %v", f.samples)
	}
}

func TestResolveIODisks(t *testing.T) {
	sys := t.TempDir()
	for name, dev := range map[string]string{"vda": "254:0", "loop3": "7:3"} {
		if err := os.MkdirAll(filepath.Join(sys, "block", name, "queue"), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(sys, "block", name, "dev"), []byte(dev+"\n"), 0o600)
		_ = os.WriteFile(filepath.Join(sys, "block", name, "queue", "scheduler"), []byte("[mq-deadline] bfq\n"), 0o600)
	}
	disks, err := resolveIODisks(config.IO{NodeDisks: true, Devices: []config.IODevice{{Device: "7:3", WriteBps: 64 << 20}, {Device: "254:0", ReadIOPS: 900}}}, sys)
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 2 || disks[0].Name != "vda" || disks[0].Capacity != (ioadvisor.Rates{0, 0, 900, 0}) ||
		disks[1].Name != "loop3" || disks[1].Capacity != (ioadvisor.Rates{0, 64 << 20, 0, 0}) {
		t.Errorf("disks %+v", disks)
	}
	if _, err := resolveIODisks(config.IO{Devices: []config.IODevice{{Device: "9:9"}}}, sys); err == nil {
		t.Error("a configured disk that does not exist was accepted")
	}
	// No /sys/block (a test's folders): no disk, no error.
	if d, err := resolveIODisks(config.IO{NodeDisks: true}, t.TempDir()); err != nil || len(d) != 0 {
		t.Errorf("without /sys/block: %v %v", d, err)
	}
}

func TestIOShrunk(t *testing.T) {
	a := []plugins.IOLimit{{Device: "1:1", WriteBps: 10}}
	if ioShrunk(a, []plugins.IOLimit{{Device: "1:1", WriteBps: 20}}) || !ioShrunk(a, []plugins.IOLimit{{Device: "1:1", WriteBps: 5}}) {
		t.Error("ioShrunk")
	}
}
