package metrics

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadDiskStats(t *testing.T) {
	dir := t.TempDir()
	text := " 254       0 vda 100 0 2048 50 200 0 4096 300 0 120 350 0 0 0 0 10 5\n   7       0 loop0 1 2 bad\n"
	if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDiskStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := DiskStat{Name: "vda", Reads: 100, ReadBytes: 2048 * 512, ReadTicks: 50, Writes: 200, WriteBytes: 4096 * 512, WriteTicks: 300, BusyMillis: 120, TimeInQueue: 350}
	if len(got) != 1 || got["254:0"] != want {
		t.Errorf("got %+v", got)
	}
}

func TestWholeDisksSkipsVirtualOnes(t *testing.T) {
	dir := t.TempDir()
	for name, dev := range map[string]string{"vda": "254:0", "loop0": "7:0", "zram0": "253:0", "dm-1": "252:1"} {
		q := filepath.Join(dir, "block", name, "queue")
		if err := os.MkdirAll(q, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, "block", name, "dev"), []byte(dev+"\n"), 0o600)
		_ = os.WriteFile(filepath.Join(q, "scheduler"), []byte("none mq-deadline kyber [bfq]\n"), 0o600)
	}
	disks, err := WholeDisks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 1 || disks[0] != (Disk{Name: "vda", Device: "254:0", Scheduler: "bfq"}) {
		t.Errorf("disks %+v", disks)
	}
	if d, err := DiskByDevice(dir, "7:0"); err != nil || d.Name != "loop0" {
		t.Errorf("loop0 by number: %+v %v", d, err)
	}
}
