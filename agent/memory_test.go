package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

// The online figure counts online work's active page cache (which MemAvailable calls free)
// and not reclaimed work's page cache, which its own limit makes the kernel reclaim first.
func TestOnlineMemoryCountsOnlineHotPageCache(t *testing.T) {
	const gi = int64(1) << 30
	node := metrics.Memory{TotalBytes: 24 * gi, AvailableBytes: 20 * gi, ActiveFileBytes: 7 * gi}
	// Reclaimed: 2Gi working set, of which 1Gi is its active page cache.
	rec := reclaimedMemory{cgroupfs.MemoryStat{WorkingSet: 2 * gi, ActiveFile: 1 * gi}}
	online, cache := onlineMemory(node, rec, true)
	// Not available 4Gi, less reclaimed's 1Gi non-file = 3Gi; plus online cache 7-1 = 6Gi.
	if online != 9*gi || cache != 6*gi {
		t.Errorf("online = %dMiB (cache %dMiB), want 9216MiB with 6144MiB of page cache", online>>20, cache>>20)
	}
	online, cache = onlineMemory(node, rec, false)
	if online != 3*gi || cache != 0 {
		t.Errorf("without page cache: online = %dMiB (cache %dMiB), want 3072MiB", online>>20, cache>>20)
	}
	// Figures that do not add up (reclaimed's cache above the node's, read at another
	// moment) never go negative nor above the node.
	online, cache = onlineMemory(metrics.Memory{TotalBytes: gi, AvailableBytes: 0, ActiveFileBytes: 4 * gi},
		reclaimedMemory{cgroupfs.MemoryStat{WorkingSet: 0, ActiveFile: 8 * gi}}, true)
	if online != gi || cache != 0 {
		t.Errorf("inconsistent figures: online = %d, cache = %d; want the node's %d and 0", online, cache, gi)
	}
}

// Reclaimed work waiting at its limit is evicted only after it has waited the configured
// time while what is lent did not grow.
func TestMemoryStallEvictsOnlyWhenLendingCannotGrow(t *testing.T) {
	var s memoryStall
	t0 := time.Unix(1000, 0)
	const after = 10 * time.Second
	step := func(sec int, underOOM bool, lent int64) string {
		return s.observe(t0.Add(time.Duration(sec)*time.Second), underOOM, lent, after)
	}
	// Waiting while lending grows each pass: never a reason.
	for i := range 20 {
		if r := step(i, true, int64(i+1)<<30); r != "" {
			t.Fatalf("pass %d: evicts while lending grows: %s", i, r)
		}
	}
	// Lending stops growing at 20Gi: evicted after 10s of waiting, not before.
	for i := 20; i < 30; i++ {
		if r := step(i, true, 20<<30); r != "" {
			t.Fatalf("pass %d: evicts after %ds", i, i-20)
		}
	}
	r := step(30, true, 20<<30)
	if !strings.Contains(r, "waited 10s") || !strings.Contains(r, "20480MiB") {
		t.Fatalf("after 10s: reason %q, want the wait and the limit named", r)
	}
	// Not waiting any more resets the clock.
	step(31, false, 20<<30)
	if r := step(32, true, 20<<30); r != "" {
		t.Errorf("a new wait evicts at once: %s", r)
	}
}

// The lent memory is split over NUMA nodes by their share of the memory, for the Node's
// topology annotation; a node tidal does not know gets nothing.
func TestLentOnNUMA(t *testing.T) {
	topo := &topology.Topology{NUMANodes: []topology.NUMANode{{ID: 0, MemoryBytes: 3 << 30}, {ID: 1, MemoryBytes: 1 << 30}}}
	if got := lentOnNUMA(topo, 0, 8<<30); got != 6<<30 {
		t.Errorf("node 0: %d, want 6Gi", got)
	}
	if got := lentOnNUMA(topo, 1, 8<<30); got != 2<<30 {
		t.Errorf("node 1: %d, want 2Gi", got)
	}
	if got := lentOnNUMA(topo, 7, 8<<30); got != 0 {
		t.Errorf("unknown node: %d, want 0", got)
	}
}
