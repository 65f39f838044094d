package config

import (
	"strings"
	"testing"
)

// Malformed io.devices entries name the file, the line and the entry's key.
func TestIODeviceErrors(t *testing.T) {
	cases := map[string]string{
		"io:\n  devices: /dev/vda\n":                                     `tidal.yaml:2: io.devices: got "/dev/vda": want a list of mappings`,
		"io:\n  devices:\n    - writeBps: 1Mi\n":                         `tidal.yaml:3: io.devices[0].device: missing`,
		"io:\n  devices:\n    - device: sda\n":                           `tidal.yaml:3: io.devices[0].device: "sda" is neither a device path nor MAJ:MIN`,
		"io:\n  devices:\n    - device: /nonexistent/disk\n":             `tidal.yaml:3: io.devices[0].device: /nonexistent/disk:`,
		"io:\n  devices:\n    - device: /dev/null\n":                     `tidal.yaml:3: io.devices[0].device: /dev/null is not a block device`,
		"io:\n  devices:\n    - device: \"8:0\"\n      writeBps: fast\n": `tidal.yaml:4: io.devices[0].writeBps: "fast" is not a valid size`,
		"io:\n  devices:\n    - device: \"8:0\"\n      readIOPS: -5\n":   `tidal.yaml:4: io.devices[0].readIOPS: -5 is out of range`,
		"io:\n  devices:\n    - device: \"8:0\"\n      iops: 5\n":        `tidal.yaml:4: io.devices[0].iops: unknown key: want one of device, readBps`,
		"io:\n  floorBps: 0\n":                                           `io.floorBps: 0 is out of range`,
		"io:\n  latencyThreshold: 5\n":                                   `tidal.yaml:2: io.latencyThreshold: 5 is not a duration (a unit is required)`,
	}
	for in, want := range cases {
		_, err := Parse("tidal.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q):\n got %v\nwant %s", in, err, want)
		}
	}
}

func TestIODevicesParse(t *testing.T) {
	c, err := Parse("tidal.yaml", []byte("io:\n  devices:\n    - device: \"254:0\"\n      readBps: 200Mi\n      writeIOPS: 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.IO.Devices) != 1 || c.IO.Devices[0] != (IODevice{Device: "254:0", ReadBps: 200 << 20, WriteIOPS: 1000}) {
		t.Errorf("devices %+v", c.IO.Devices)
	}
	if n, err := DeviceNumber("254:0"); err != nil || n != "254:0" {
		t.Errorf("DeviceNumber: %q %v", n, err)
	}
}
