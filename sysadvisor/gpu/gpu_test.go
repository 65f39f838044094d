package gpu

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU describes one GPU for go-nvml's mock. A field's *Ret, when set, is what the
// matching NVML call returns instead of SUCCESS.
type fakeGPU struct {
	uuid, name  string
	minor       int
	busID       string // NVML form: "00000000:3B:00.0"
	total, used uint64
	util        uint32
	compute     []nvml.ProcessInfo
	graphics    []nvml.ProcessInfo

	minorRet, utilRet, computeRet, graphicsRet nvml.Return
}

func ok(r nvml.Return) nvml.Return {
	if r == 0 {
		return nvml.SUCCESS
	}
	return r
}

func (f fakeGPU) device() *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return f.uuid, nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return f.name, nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return f.minor, ok(f.minorRet) },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.total, Used: f.used, Free: f.total - f.used}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: f.util}, ok(f.utilRet)
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var info nvml.PciInfo
			for i, c := range []byte(f.busID) {
				info.BusId[i] = int8(c)
			}
			return info, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return f.compute, ok(f.computeRet)
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return f.graphics, ok(f.graphicsRet)
		},
	}
}

// fakeLib is an NVML with the given GPUs. shutdowns counts Shutdown calls.
func fakeLib(shutdowns *int, gpus ...fakeGPU) *mock.Interface {
	return &mock.Interface{
		InitFunc: func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return {
			if shutdowns != nil {
				*shutdowns++
			}
			return nvml.SUCCESS
		},
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(gpus) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return gpus[i].device(), nvml.SUCCESS
		},
	}
}

// fakeSysfs writes numa_node files: PCI address (sysfs form) -> content.
func fakeSysfs(t *testing.T, nodes map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for addr, content := range nodes {
		dir := filepath.Join(root, "bus", "pci", "devices", addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const gib = 1 << 30

func TestDevicesReadsInventory(t *testing.T) {
	sysfs := fakeSysfs(t, map[string]string{"0000:3b:00.0": "1\n", "0000:86:00.0": "-1\n"})
	lib := fakeLib(nil,
		fakeGPU{
			uuid: "GPU-aaa", name: "NVIDIA H200", minor: 0, busID: "00000000:3B:00.0",
			total: 141 * gib, used: 3 * gib, util: 42,
			// pid 10 is in both lists (keep the larger use); pid 20's use is not available.
			compute:  []nvml.ProcessInfo{{Pid: 20, UsedGpuMemory: ^uint64(0)}, {Pid: 10, UsedGpuMemory: 2 * gib}},
			graphics: []nvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 1 * gib}},
		},
		fakeGPU{
			uuid: "GPU-bbb", name: "NVIDIA H200", minor: 3, busID: "00000000:86:00.0",
			total: 141 * gib, util: 0, graphicsRet: nvml.ERROR_NOT_SUPPORTED,
		},
	)
	src, err := NewSource(lib, WithSysfsRoot(sysfs))
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	want := []Device{
		{
			Index: 0, UUID: "GPU-aaa", Model: "NVIDIA H200", Minor: 0, PCIBusID: "0000:3b:00.0", NUMANode: 1,
			MemoryTotal: 141 * gib, MemoryUsed: 3 * gib, UtilizationGPU: 42,
			Processes: []Process{{PID: 10, UsedMemory: 2 * gib}, {PID: 20, UsedMemory: 0}},
		},
		{
			Index: 1, UUID: "GPU-bbb", Model: "NVIDIA H200", Minor: 3, PCIBusID: "0000:86:00.0", NUMANode: -1,
			MemoryTotal: 141 * gib, MemoryUsed: 0, UtilizationGPU: 0,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("devices:\n got %+v\nwant %+v", got, want)
	}
}

func TestDevicesUnsupportedFieldsAreUnknown(t *testing.T) {
	sysfs := fakeSysfs(t, map[string]string{"0000:3b:00.0": "0"})
	lib := fakeLib(nil, fakeGPU{
		uuid: "GPU-mig", busID: "00000000:3B:00.0",
		minorRet: nvml.ERROR_NOT_SUPPORTED, utilRet: nvml.ERROR_NOT_SUPPORTED,
	})
	src, err := NewSource(lib, WithSysfsRoot(sysfs))
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Devices()
	if err != nil {
		t.Fatalf("NOT_SUPPORTED is not an error: %v", err)
	}
	if len(got) != 1 || got[0].Minor != -1 || got[0].UtilizationGPU != -1 || got[0].NUMANode != 0 {
		t.Fatalf("want minor -1, utilization -1, NUMA 0; got %+v", got)
	}
}

func TestDevicesReportsFailuresAndKeepsTheRest(t *testing.T) {
	// Device 0 has no numa_node file: kept, NUMA -1, error names the device.
	// Device 1 cannot list its processes: left out (it cannot be judged).
	// Device 2 fails its utilization read: kept with -1, error names the call.
	sysfs := fakeSysfs(t, map[string]string{"0000:86:00.0": "1", "0000:af:00.0": "1"})
	lib := fakeLib(nil,
		fakeGPU{uuid: "GPU-0", busID: "00000000:3B:00.0"},
		fakeGPU{uuid: "GPU-1", busID: "00000000:86:00.0", computeRet: nvml.ERROR_GPU_IS_LOST},
		fakeGPU{uuid: "GPU-2", busID: "00000000:AF:00.0", utilRet: nvml.ERROR_UNKNOWN},
	)
	src, err := NewSource(lib, WithSysfsRoot(sysfs))
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Devices()
	if err == nil {
		t.Fatal("want an error naming the failed reads")
	}
	for _, want := range []string{
		"nvml device 0: NUMA node of PCI device 0000:3b:00.0",
		"nvml device 1 (GPU-1): GetComputeRunningProcesses: ERROR_GPU_IS_LOST",
		"nvml device 2: GetUtilizationRates: ERROR_UNKNOWN",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if len(got) != 2 || got[0].UUID != "GPU-0" || got[1].UUID != "GPU-2" {
		t.Fatalf("want GPU-0 and GPU-2, got %+v", got)
	}
	if got[0].NUMANode != -1 || got[1].UtilizationGPU != -1 || got[1].NUMANode != 1 {
		t.Fatalf("unknown fields: got %+v", got)
	}
}

func TestNewSourceFailsWhenInitFails(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	_, err := NewSource(lib)
	if err == nil || !strings.Contains(err.Error(), "nvml init: ERROR_DRIVER_NOT_LOADED") {
		t.Fatalf("want nvml init error, got %v", err)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	var shutdowns int
	src, err := NewSource(fakeLib(&shutdowns))
	if err != nil {
		t.Fatal(err)
	}
	if devs, err := src.Devices(); err != nil || len(devs) != 0 {
		t.Fatalf("zero GPUs: got %v, %v", devs, err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if shutdowns != 1 {
		t.Fatalf("Shutdown called %d times, want 1", shutdowns)
	}
	if _, err := src.Devices(); err == nil {
		t.Fatal("Devices after Close: want an error")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"00010000:C1:1F.7": "10000:c1:1f.7", // VMD domains are wider than 4 digits
	} {
		got, err := NormalizeBusID(in)
		if err != nil || got != want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "3b:00.0", "0000:3b:00", "0000:zz:00.0"} {
		if _, err := NormalizeBusID(bad); err == nil {
			t.Errorf("NormalizeBusID(%q): want an error", bad)
		}
	}
}

func TestProcessCgroup(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, content string) {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "0::/tidal/reclaimed/job-1\n")
	write("20", "12:memory:/tidal/shared/web\n4:cpu,cpuacct:/tidal/shared/web\n1:name=systemd:/x\n")
	write("30", "1:name=systemd:/x\n")
	// A hybrid host: tidal's cgroups are v1, the v2 entry is systemd's unit.
	write("50", "4:cpu,cpuacct:/tidal/reclaimed/job-2\n1:name=systemd:/system.slice/tidal.service\n0::/system.slice/tidal.service\n")
	write("60", "0::/\n")

	for pid, want := range map[int]string{10: "tidal/reclaimed/job-1", 20: "tidal/shared/web", 50: "tidal/reclaimed/job-2", 60: ""} {
		got, err := ProcessCgroup(proc, pid)
		if err != nil || got != want {
			t.Errorf("pid %d: got %q, %v; want %q", pid, got, err, want)
		}
	}
	if _, err := ProcessCgroup(proc, 30); err == nil {
		t.Error("pid 30 has no usable entry: want an error")
	}
	if _, err := ProcessCgroup(proc, 40); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone pid: want fs.ErrNotExist, got %v", err)
	}
}
