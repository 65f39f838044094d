// Package gpu reads the node's NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml):
// for each device its index, UUID, model, device minor number, PCI address, NUMA node,
// memory, utilization and the processes using it.
//
// A Source is one handle on NVML. Open loads the real library; on a node without the
// NVIDIA driver (no libnvidia-ml) it logs one line and returns a Source that always
// reports zero GPUs, so the rest of the agent carries on. NewSource takes any
// nvml.Interface, which is how the tests drive it with go-nvml's own mock package.
//
// The package only reads. Deciding which GPUs to lend and to whom is plugins/gpu.
package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one GPU as NVML saw it in one read.
type Device struct {
	Index int    // NVML enumeration index (0..count-1)
	UUID  string // "GPU-..."; what NVIDIA_VISIBLE_DEVICES names
	Model string // product name, e.g. "NVIDIA H200"; "" if NVML did not say
	// Minor is N in /dev/nvidiaN (char device 195:N); -1 if unknown.
	Minor int
	// PCIBusID is the PCI address in sysfs form (lower case, "0000:3b:00.0"); "" if unknown.
	PCIBusID string
	// NUMANode is the NUMA node of the PCI device from sysfs; -1 if unknown or the
	// machine has no NUMA.
	NUMANode    int
	MemoryTotal uint64 // bytes; 0 if unknown
	MemoryUsed  uint64 // bytes
	// UtilizationGPU is the percent of the last sample period in which a kernel ran;
	// -1 if NVML does not support it on this device (for example in MIG mode).
	UtilizationGPU int
	// Processes are the compute and graphics processes on the device, by host PID.
	Processes []Process
}

// Process is one process using a GPU.
type Process struct {
	PID        int    // in the PID namespace NVML runs in (the host's, for a hostPID agent)
	UsedMemory uint64 // bytes; 0 if NVML does not know (containers without permission)
}

// Source reads every GPU of the node.
type Source interface {
	// Devices reads every GPU once, in index order. A device is left out when its
	// UUID or its processes could not be read (it cannot be judged); fields NVML
	// does not support get their "unknown" value. err names each failed read
	// (device index and call) and may come with the devices that were read.
	Devices() ([]Device, error)
	// Close releases NVML. Devices fails after Close. Close is safe to call twice.
	Close() error
}

// Option adjusts Open and NewSource.
type Option func(*options)

type options struct {
	sysfsRoot   string
	libraryPath string
}

// WithSysfsRoot reads PCI NUMA nodes under root instead of /sys (tests use a temp dir).
func WithSysfsRoot(root string) Option { return func(o *options) { o.sysfsRoot = root } }

// WithLibraryPath makes Open load NVML from path instead of libnvidia-ml.so.1 through
// the dynamic linker's search path. NewSource ignores it.
func WithLibraryPath(path string) Option { return func(o *options) { o.libraryPath = path } }

func buildOptions(opts []Option) options {
	o := options{sysfsRoot: "/sys"}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Open loads the real NVML. When that fails (no driver, no libnvidia-ml, no device
// access) it logs one line saying why and returns a Source with zero GPUs whose Devices
// returns nil, nil: GPU support is then off and nothing else is affected.
func Open(log *slog.Logger, opts ...Option) Source {
	o := buildOptions(opts)
	var libOpts []nvml.LibraryOption
	if o.libraryPath != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(o.libraryPath))
	}
	lib := nvml.New(libOpts...)
	src, err := NewSource(lib, opts...)
	if err != nil {
		library := o.libraryPath
		if library == "" {
			library = "libnvidia-ml.so.1"
		}
		log.Info("no NVIDIA GPUs: NVML is not available, GPU support reports zero GPUs",
			"library", library, "err", err)
		return NoGPUs{}
	}
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		version = "unknown (" + ret.Error() + ")"
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		log.Info("NVML loaded but cannot count GPUs", "driver", version, "err", ret.Error())
	} else {
		log.Info("NVML loaded", "driver", version, "gpus", count)
	}
	return src
}

// NewSource initializes lib (lib.Init) and reads through it. It fails when Init fails.
func NewSource(lib nvml.Interface, opts ...Option) (Source, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %s", errorString(ret))
	}
	return &nvmlSource{lib: lib, sysfsRoot: buildOptions(opts).sysfsRoot}, nil
}

// NoGPUs is the Source of a node without NVML: zero devices, never an error.
type NoGPUs struct{}

// Devices returns nil, nil.
func (NoGPUs) Devices() ([]Device, error) { return nil, nil }

// Close does nothing.
func (NoGPUs) Close() error { return nil }

type nvmlSource struct {
	lib       nvml.Interface
	sysfsRoot string

	// mu keeps Close from shutting NVML down under a read in progress.
	mu     sync.Mutex
	closed bool
}

func (s *nvmlSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", errorString(ret))
	}
	return nil
}

func (s *nvmlSource) Devices() ([]Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("nvml: read after Close")
	}
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml DeviceGetCount: %s", errorString(ret))
	}
	var devices []Device
	var errs []error
	for i := 0; i < count; i++ {
		d, ok, err := s.readDevice(i)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			devices = append(devices, d)
		}
	}
	return devices, errors.Join(errs...)
}

// readDevice reads device i. ok is false when the device cannot be used at all; err
// lists every failed call, including those of fields that fell back to "unknown".
func (s *nvmlSource) readDevice(i int) (d Device, ok bool, err error) {
	var errs []error
	fail := func(call string, ret nvml.Return) {
		errs = append(errs, fmt.Errorf("nvml device %d: %s: %s", i, call, errorString(ret)))
	}
	d = Device{Index: i, Minor: -1, NUMANode: -1, UtilizationGPU: -1}

	h, ret := s.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		fail("DeviceGetHandleByIndex", ret)
		return d, false, errors.Join(errs...)
	}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		fail("GetUUID", ret)
		return d, false, errors.Join(errs...)
	}
	procs, err := readProcesses(h)
	if err != nil {
		errs = append(errs, fmt.Errorf("nvml device %d (%s): %w", i, d.UUID, err))
		return d, false, errors.Join(errs...)
	}
	d.Processes = procs

	if name, ret := h.GetName(); ret == nvml.SUCCESS {
		d.Model = name
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("GetName", ret)
	}
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		d.Minor = minor
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("GetMinorNumber", ret)
	}
	if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		d.MemoryTotal, d.MemoryUsed = mem.Total, mem.Used
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("GetMemoryInfo", ret)
	}
	if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
		d.UtilizationGPU = int(u.Gpu)
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("GetUtilizationRates", ret)
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		busID, perr := NormalizeBusID(cString(pci.BusId[:]))
		if perr != nil {
			errs = append(errs, fmt.Errorf("nvml device %d: %w", i, perr))
		} else {
			d.PCIBusID = busID
			node, nerr := NUMANodeOf(s.sysfsRoot, busID)
			if nerr != nil {
				errs = append(errs, fmt.Errorf("nvml device %d: %w", i, nerr))
			}
			d.NUMANode = node
		}
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("GetPciInfo", ret)
	}
	return d, true, errors.Join(errs...)
}

// readProcesses merges the compute and graphics processes of a device by PID. Compute
// processes must be readable; graphics ones are often not supported on data-center GPUs.
func readProcesses(h nvml.Device) ([]Process, error) {
	compute, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GetComputeRunningProcesses: %s", errorString(ret))
	}
	graphics, ret := h.GetGraphicsRunningProcesses()
	if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("GetGraphicsRunningProcesses: %s", errorString(ret))
	}
	byPID := map[int]uint64{}
	for _, p := range append(compute, graphics...) {
		used := p.UsedGpuMemory
		if used == ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE
			used = 0
		}
		pid := int(p.Pid)
		byPID[pid] = max(byPID[pid], used)
	}
	if len(byPID) == 0 {
		return nil, nil
	}
	out := make([]Process, 0, len(byPID))
	for pid, used := range byPID {
		out = append(out, Process{PID: pid, UsedMemory: used})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// errorString names an NVML return code. Return.Error works with or without the
// library loaded (go-nvml falls back to a built-in table).
func errorString(ret nvml.Return) string {
	return fmt.Sprintf("%s (%d)", ret.Error(), int32(ret))
}

// cString converts NVML's NUL-terminated char array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
