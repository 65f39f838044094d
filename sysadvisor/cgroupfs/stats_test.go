package cgroupfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCPUCounterRereadsTheOpenFile(t *testing.T) {
	v2 := t.TempDir()
	if err := os.MkdirAll(filepath.Join(v2, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := filepath.Join(v2, "t", "cpu.stat")
	if err := os.WriteFile(stat, []byte("usage_usec 1500\nuser_usec 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewV2(v2).OpenCPUCounter("t")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Read(); err != nil || got != 1500*time.Microsecond {
		t.Fatalf("Read = %v, %v", got, err)
	}
	// A regular file rewritten in place stands in for the kernel's changing counter.
	f, _ := os.OpenFile(stat, os.O_WRONLY, 0)
	_, _ = f.WriteAt([]byte("usage_usec 2500\n"), 0)
	f.Close()
	if got, err := c.Read(); err != nil || got != 2500*time.Microsecond {
		t.Fatalf("second Read = %v, %v", got, err)
	}

	v1 := t.TempDir()
	for _, c := range v1Controllers {
		_ = os.MkdirAll(filepath.Join(v1, c, "t"), 0o755)
	}
	_ = os.WriteFile(filepath.Join(v1, "cpuacct", "t", "cpuacct.usage"), []byte("123456789\n"), 0o644)
	l, err := NewV1(map[string]string{"cpu": filepath.Join(v1, "cpu"), "cpuacct": filepath.Join(v1, "cpuacct"), "cpuset": filepath.Join(v1, "cpuset"), "memory": filepath.Join(v1, "memory")})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := l.OpenCPUCounter("t")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if got, err := c1.Read(); err != nil || got != 123456789 {
		t.Fatalf("v1 Read = %v, %v", got, err)
	}
	if _, err := l.OpenCPUCounter("missing"); err == nil {
		t.Error("a missing cgroup opened")
	}
}
