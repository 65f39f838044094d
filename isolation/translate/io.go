package translate

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tidalqos/tidal/plugins"
)

// IO weights, in the units both v1's blkio.bfq.weight and v2's io.weight take near the
// default (v1 1..1000, v2 1..10000, default 100 in both).
const (
	MinIOWeight = 1
	MaxIOWeight = 1000
)

// IOMax is the canonical text of a cgroup's IO throttles, as v2's io.max lists them: one
// "MAJ:MIN rbps=N wbps=N riops=N wiops=N" per throttled device ("max" for no limit), sorted
// by device and joined by ";". Devices with no limit are left out, as the kernel does.
func IOMax(limits []plugins.IOLimit) string {
	var lines []string
	seen := map[string]bool{}
	for _, l := range limits {
		if l.Unlimited() || seen[l.Device] {
			continue
		}
		seen[l.Device] = true
		lines = append(lines, IOMaxLine(l))
	}
	sort.Strings(lines)
	return strings.Join(lines, ";")
}

// IOMaxLine is one device's io.max line.
func IOMaxLine(l plugins.IOLimit) string {
	f := func(n uint64) string {
		if n == 0 {
			return "max"
		}
		return strconv.FormatUint(n, 10)
	}
	return fmt.Sprintf("%s rbps=%s wbps=%s riops=%s wiops=%s", l.Device, f(l.ReadBps), f(l.WriteBps), f(l.ReadIOPS), f(l.WriteIOPS))
}

var deviceNumber = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

// ValidDevice says whether s is a "MAJ:MIN" device number.
func ValidDevice(s string) bool { return deviceNumber.MatchString(s) }

// ParseIOMax reads io.max text (lines or IOMax's canonical form) back into limits, one per
// device; fields it does not know are ignored.
func ParseIOMax(text string) ([]plugins.IOLimit, error) {
	var out []plugins.IOLimit
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == '\n' }) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !ValidDevice(f[0]) {
			return nil, fmt.Errorf("io.max line %q: want MAJ:MIN first", line)
		}
		l := plugins.IOLimit{Device: f[0]}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var n uint64
			if v != "max" {
				var err error
				if n, err = strconv.ParseUint(v, 10, 64); err != nil {
					return nil, fmt.Errorf("io.max line %q: %s: %w", line, kv, err)
				}
			}
			switch k {
			case "rbps":
				l.ReadBps = n
			case "wbps":
				l.WriteBps = n
			case "riops":
				l.ReadIOPS = n
			case "wiops":
				l.WriteIOPS = n
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// IOWeight clamps a weight to what the kernel takes; 0 stays 0 (leave).
func IOWeight(w uint16) uint64 {
	if w == 0 {
		return 0
	}
	return min(max(uint64(w), MinIOWeight), MaxIOWeight)
}
