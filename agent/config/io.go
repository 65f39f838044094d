package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// IO configures disk IO isolation of reclaimed work (issue 12; docs/config.md).
type IO struct {
	// Enabled throttles reclaimed work's disk IO to what is lent.
	Enabled bool `yaml:"enabled"`
	// NodeDisks includes the node's real whole disks from /sys/block (not loop, RAM, zram,
	// device-mapper or md devices); Devices adds or describes disks explicitly.
	NodeDisks bool       `yaml:"nodeDisks"`
	Devices   []IODevice `yaml:"devices"`
	// FloorBps and FloorIOPS are the least lent per disk and direction.
	FloorBps  int64 `yaml:"floorBps"`
	FloorIOPS int64 `yaml:"floorIOPS"`
	// MarginRatio is added to online work's peak IO before the rest of a disk is lent.
	MarginRatio float64 `yaml:"marginRatio"`
	// GrowStepRatio is the most lending grows per slow-loop pass, as a share of capacity.
	GrowStepRatio float64 `yaml:"growStepRatio"`
	// PeakWindow: online IO is predicted as its peak over this window.
	PeakWindow time.Duration `yaml:"peakWindow"`
	// PressureThreshold (IO PSI some avg10, percent) and LatencyThreshold (a disk's mean time
	// per IO) cut lending to the floor at once; 0 turns one off.
	PressureThreshold float64       `yaml:"pressureThreshold"`
	LatencyThreshold  time.Duration `yaml:"latencyThreshold"`
	// HoldAfterCut is how long lending may not grow after a cut.
	HoldAfterCut time.Duration `yaml:"holdAfterCut"`
	// Interval is how often the IO figures are read (the fast path of IO).
	Interval time.Duration `yaml:"interval"`
}

// IODevice is a disk and, where known, its capacity; a rate left 0 is unknown, and is lent
// its floor only.
type IODevice struct {
	// Device is a block device path ("/dev/vdb") or its number ("254:16").
	Device    string `yaml:"device"`
	ReadBps   int64  `yaml:"readBps"`
	WriteBps  int64  `yaml:"writeBps"`
	ReadIOPS  int64  `yaml:"readIOPS"`
	WriteIOPS int64  `yaml:"writeIOPS"`
}

func defaultIO() IO {
	return IO{
		// Node disks of unknown capacity would be lent only the floor (8 MiB/s): no
		// agent should do that to batch IO unasked. Disks are managed once listed with
		// their capacity in io.devices, or all of them at the floor with nodeDisks.
		Enabled: true, NodeDisks: false,
		FloorBps: 8 << 20, FloorIOPS: 64,
		MarginRatio: 0.25, GrowStepRatio: 0.1, PeakWindow: 30 * time.Second,
		PressureThreshold: 20, LatencyThreshold: 50 * time.Millisecond,
		HoldAfterCut: 10 * time.Second, Interval: 500 * time.Millisecond,
	}
}

// DeviceNumber resolves an io.devices entry ("/dev/vdb" or "MAJ:MIN") to "MAJ:MIN".
func DeviceNumber(dev string) (string, error) {
	if !strings.HasPrefix(dev, "/") {
		var ma, mi uint32
		if n, err := fmt.Sscanf(dev, "%d:%d", &ma, &mi); err != nil || n != 2 || fmt.Sprintf("%d:%d", ma, mi) != dev {
			return "", fmt.Errorf("%q is neither a device path nor MAJ:MIN", dev)
		}
		return dev, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", fmt.Errorf("%s: %w", dev, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("%s is not a block device", dev)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

var ioDeviceKeys = []string{"device", "readBps", "writeBps", "readIOPS", "writeIOPS"}

// ioDevices decodes io.devices: a list of mappings, each with a device and capacities.
// A device path must exist when the file is read: a typo found at start beats a disk
// silently left unmanaged.
func (d *decoder) ioDevices(v *yaml.Node, line int, key string, c *Config) {
	if yamlconf.IsNull(v) {
		c.IO.Devices = nil
		return
	}
	if v.Kind != yaml.SequenceNode {
		d.errorf(line, key, "got %s: want a list of mappings with keys %s", yamlconf.DescribeNode(v), strings.Join(ioDeviceKeys, ", "))
		return
	}
	c.IO.Devices = nil
	for i, item := range v.Content {
		item = yamlconf.ResolveAlias(item)
		p := fmt.Sprintf("%s[%d]", key, i)
		if item.Kind != yaml.MappingNode {
			d.errorf(item.Line, p, "got %s: want a mapping with keys %s", yamlconf.DescribeNode(item), strings.Join(ioDeviceKeys, ", "))
			continue
		}
		var dev IODevice
		seen := map[string]bool{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], yamlconf.ResolveAlias(item.Content[j+1])
			name := yamlconf.KeyName(k)
			kp := p + "." + name
			if seen[name] {
				d.errorf(k.Line, kp, "duplicate key")
				continue
			}
			seen[name] = true
			if name == "device" {
				if val.Kind != yaml.ScalarNode || yamlconf.IsNull(val) {
					d.errorf(k.Line, kp, "got %s: want a block device path or MAJ:MIN", yamlconf.DescribeNode(val))
					continue
				}
				if _, err := DeviceNumber(val.Value); err != nil {
					d.errorf(k.Line, kp, "%v: want a block device path or MAJ:MIN", err)
					continue
				}
				dev.Device = val.Value
				continue
			}
			var dst *int64
			switch name {
			case "readBps":
				dst = &dev.ReadBps
			case "writeBps":
				dst = &dev.WriteBps
			case "readIOPS":
				dst = &dev.ReadIOPS
			case "writeIOPS":
				dst = &dev.WriteIOPS
			default:
				d.errorf(k.Line, kp, "unknown key: want one of %s", strings.Join(ioDeviceKeys, ", "))
				continue
			}
			want := "an integer >= 0 (0: unknown)"
			if strings.HasSuffix(name, "Bps") {
				want = sizeWant(">= 0 (bytes per second; 0: unknown)", "200Mi")
			}
			e := &entry{key: name, kind: kindSize, want: want, ptr: func(*Config) any { return dst }}
			if !strings.HasSuffix(name, "Bps") {
				e.kind = kindInt
			}
			d.leaf(val, k.Line, kp, e, c)
			if *dst < 0 {
				d.errorf(k.Line, kp, "%d is out of range: want %s", *dst, want)
			}
		}
		if !seen["device"] {
			d.errorf(item.Line, p+".device", "missing: want a block device path or MAJ:MIN")
			continue
		}
		c.IO.Devices = append(c.IO.Devices, dev)
	}
}

// ioDevicesNode writes io.devices for MarshalYAML.
func ioDevicesNode(c *Config) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, dev := range c.IO.Devices {
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		add := func(k, v, tag string) {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v})
		}
		add("device", dev.Device, "!!str")
		add("readBps", fmt.Sprint(dev.ReadBps), "!!int")
		add("writeBps", fmt.Sprint(dev.WriteBps), "!!int")
		add("readIOPS", fmt.Sprint(dev.ReadIOPS), "!!int")
		add("writeIOPS", fmt.Sprint(dev.WriteIOPS), "!!int")
		seq.Content = append(seq.Content, m)
	}
	return seq
}
