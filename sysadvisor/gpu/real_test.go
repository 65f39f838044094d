package gpu

// Tests against the real go-nvml library (no mock): the no-NVML path runs everywhere;
// TestRealNVML needs an NVIDIA GPU and TIDAL_GPU_REAL=1 (scripts/gpu-check.sh sets it).

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// captureLog returns a logger writing text lines into the returned buffer.
func captureLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func logLines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// assertNoGPUs checks the zero-GPU source and its one log line.
func assertNoGPUs(t *testing.T, src Source, buf *bytes.Buffer, library string) {
	t.Helper()
	devs, err := src.Devices()
	if err != nil || devs != nil {
		t.Fatalf("Devices() = %v, %v; want nil, nil", devs, err)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	lines := logLines(buf)
	if len(lines) != 1 {
		t.Fatalf("want exactly one log line, got %d:\n%s", len(lines), buf)
	}
	for _, want := range []string{"level=INFO", "no NVIDIA GPUs: NVML is not available", "library=" + library, "nvml init: ERROR_LIBRARY_NOT_FOUND"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q does not contain %q", lines[0], want)
		}
	}
	t.Logf("logged: %s", lines[0])
}

// TestOpenWithoutLibrary makes the real go-nvml dlopen a library that does not exist,
// on any machine.
func TestOpenWithoutLibrary(t *testing.T) {
	log, buf := captureLog()
	missing := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	assertNoGPUs(t, Open(log, WithLibraryPath(missing)), buf, missing)
}

// TestOpenOnThisMachine opens NVML the way the agent does. On a machine without the
// NVIDIA driver (as the CI machines) it must report zero GPUs and log one line.
func TestOpenOnThisMachine(t *testing.T) {
	log, buf := captureLog()
	src := Open(log)
	if _, none := src.(NoGPUs); !none {
		_ = src.Close()
		t.Skipf("NVML loads on this machine (%s); TestRealNVML with TIDAL_GPU_REAL=1 covers it", strings.TrimSpace(buf.String()))
	}
	assertNoGPUs(t, src, buf, "libnvidia-ml.so.1")
}

// TestRealNVML reads the real GPUs. It is skipped unless TIDAL_GPU_REAL=1.
func TestRealNVML(t *testing.T) {
	if os.Getenv("TIDAL_GPU_REAL") != "1" {
		t.Skip("set TIDAL_GPU_REAL=1 on a machine with an NVIDIA GPU (scripts/gpu-check.sh)")
	}
	log, buf := captureLog()
	src := Open(log)
	defer func() {
		if err := src.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	t.Logf("open: %s", strings.TrimSpace(buf.String()))
	if _, none := src.(NoGPUs); none {
		t.Fatalf("TIDAL_GPU_REAL=1 but NVML did not load: %s", buf)
	}
	devs, err := src.Devices()
	if err != nil {
		t.Errorf("Devices: %v", err)
	}
	if len(devs) == 0 {
		t.Fatal("NVML loaded but reports no GPU")
	}
	for i, d := range devs {
		t.Logf("GPU %d: %+v", d.Index, d)
		if d.Index != i {
			t.Errorf("device %d has index %d", i, d.Index)
		}
		if !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("GPU %d: UUID %q does not start with GPU-", i, d.UUID)
		}
		if d.Model == "" || d.MemoryTotal == 0 || d.MemoryUsed > d.MemoryTotal {
			t.Errorf("GPU %d: model %q, memory %d of %d", i, d.Model, d.MemoryUsed, d.MemoryTotal)
		}
		if d.Minor < 0 {
			t.Errorf("GPU %d: no minor number", i)
		} else if _, err := os.Stat("/dev/nvidia" + strconv.Itoa(d.Minor)); err != nil {
			t.Errorf("GPU %d: minor %d: %v", i, d.Minor, err)
		}
		if d.UtilizationGPU < -1 || d.UtilizationGPU > 100 {
			t.Errorf("GPU %d: utilization %d%%", i, d.UtilizationGPU)
		}
		if d.PCIBusID == "" {
			t.Errorf("GPU %d: no PCI bus ID", i)
			continue
		}
		// The NUMA node must be the kernel's, read independently here.
		b, err := os.ReadFile("/sys/bus/pci/devices/" + d.PCIBusID + "/numa_node")
		if err != nil {
			t.Errorf("GPU %d: %v", i, err)
			continue
		}
		want := strings.TrimSpace(string(b))
		if want == "-1" && d.NUMANode != -1 || want != "-1" && strconv.Itoa(d.NUMANode) != want {
			t.Errorf("GPU %d: NUMA node %d, sysfs says %s", i, d.NUMANode, want)
		}
	}
}
