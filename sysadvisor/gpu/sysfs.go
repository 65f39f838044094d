package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NormalizeBusID turns NVML's PCI bus ID ("00000000:3B:00.0": 8-digit domain, upper
// case) into the name sysfs uses ("0000:3b:00.0": at least 4-digit domain, lower case).
func NormalizeBusID(nvmlBusID string) (string, error) {
	s := strings.TrimSpace(nvmlBusID)
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("PCI bus ID %q: want domain:bus:device.function", nvmlBusID)
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return "", fmt.Errorf("PCI bus ID %q: want device.function after the bus", nvmlBusID)
	}
	var n [4]uint64
	for i, field := range []string{parts[0], parts[1], devFn[0], devFn[1]} {
		v, err := strconv.ParseUint(field, 16, 32)
		if err != nil {
			return "", fmt.Errorf("PCI bus ID %q: field %q is not hex", nvmlBusID, field)
		}
		n[i] = v
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", n[0], n[1], n[2], n[3]), nil
}

// NUMANodeOf reads <sysfsRoot>/bus/pci/devices/<busID>/numa_node. It returns -1 when
// the kernel says -1 (no NUMA affinity), and -1 with an error when the file cannot
// be read or parsed.
func NUMANodeOf(sysfsRoot, busID string) (int, error) {
	p := filepath.Join(sysfsRoot, "bus", "pci", "devices", busID, "numa_node")
	b, err := os.ReadFile(p)
	if err != nil {
		return -1, fmt.Errorf("NUMA node of PCI device %s: %w", busID, err)
	}
	node, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return -1, fmt.Errorf("NUMA node of PCI device %s: %s: %q is not a number", busID, p, bytes.TrimSpace(b))
	}
	if node < 0 {
		return -1, nil
	}
	return node, nil
}

// ProcessCgroup returns the cgroup path of pid from <procRoot>/<pid>/cgroup, without a
// leading slash ("tidal-reclaimed/job-1"), so it compares with plugins.Workload.Cgroup.
// It takes the cgroup v1 cpu controller's entry where there is one, else the cgroup v2 entry
// ("0::/path"): on a hybrid host tidal's cgroups are v1, and the v2 entry is systemd's.
// The agent must see the host's PID and cgroup namespaces for the paths to match.
func ProcessCgroup(procRoot string, pid int) (string, error) {
	p := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	var v1CPU, v2 string
	var hasV2 bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		fields := strings.SplitN(sc.Text(), ":", 3)
		if len(fields) != 3 {
			continue
		}
		if fields[0] == "0" && fields[1] == "" {
			v2, hasV2 = strings.Trim(fields[2], "/"), true
			continue
		}
		for _, c := range strings.Split(fields[1], ",") {
			if c == "cpu" {
				v1CPU = strings.Trim(fields[2], "/")
			}
		}
	}
	switch {
	case v1CPU != "":
		return v1CPU, nil
	case hasV2:
		return v2, nil
	}
	return "", errors.New("cgroup of pid " + strconv.Itoa(pid) + ": " + p + " has no cgroup v2 or v1 cpu entry")
}
