package cgroupv2

import (
	"os"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
)

// On v2 the reclaimed tier's IO throttle is one io.max line per disk (brd's /dev/ram0 in the
// VM), the online tier holds none, re-reading finds no drift, and lending nothing clears it.
func TestV2IOMax(t *testing.T) {
	l := unified(t)
	data, err := os.ReadFile("/sys/block/ram0/dev")
	if err != nil {
		t.Skipf("no brd disk: %v", err)
	}
	dev := strings.TrimSpace(string(data))
	root := isolationtest.RootName(t, l)
	w := newWriter(t, l)
	tree := func(lim plugins.IOLimit) []plugins.Cgroup {
		return []plugins.Cgroup{
			{Path: root},
			{Path: root + "/shared", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{{Device: dev}}}},
			{Path: root + "/reclaimed", Settings: plugins.Settings{IOLimits: []plugins.IOLimit{lim}}},
		}
	}
	apply(t, w, tree(plugins.IOLimit{Device: dev, WriteBps: 4 << 20, ReadIOPS: 100})...)
	wantFiles(t, l, map[string]string{
		root + "/reclaimed/io.max": dev + " rbps=max wbps=4194304 riops=100 wiops=max",
		root + "/shared/io.max":    "",
	})
	w.Forget()
	before := totalWrites(w)
	apply(t, w, tree(plugins.IOLimit{Device: dev, WriteBps: 4 << 20, ReadIOPS: 100})...)
	if after := totalWrites(w); after != before {
		t.Errorf("re-reading io.max found drift: %d writes", after-before)
	}
	apply(t, w, tree(plugins.IOLimit{Device: dev})...)
	wantFiles(t, l, map[string]string{root + "/reclaimed/io.max": ""})
}
