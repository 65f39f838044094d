package cgroupv2

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memoryEvent is a counter of cgroup rel's memory.events ("high", "oom_kill").
func memoryEvent(t *testing.T, n *node, rel, key string) int64 {
	t.Helper()
	for _, line := range strings.Split(n.file(rel, "memory.events"), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			c, _ := strconv.ParseInt(v, 10, 64)
			return c
		}
	}
	t.Fatalf("%s/memory.events has no %q line", rel, key)
	return 0
}

// On v2 the reclaimed tier is throttled at memory.high below memory.max: a hog that asks for
// more than is lent at once, faster than lending grows, is held at memory.high (the kernel
// counts "high" events) and reaches its size as lending grows, never OOM-killed. The online
// tiers carry memory.low/min max and an online workload memory.low of its working set.
func TestV2MemoryHighSlowsAFastHog(t *testing.T) {
	n := newNode(t, "memory:\n  reservedSystemBytes: 256Mi\n  safetyMarginBytes: 128Mi\n  minReclaimedBytes: 128Mi\n  growStepBytes: 4Mi\n  throttleMarginBytes: 64Mi\n  evictPressureAbove: 100\n")
	n.start()
	n.run("--tier", "shared", "--name", "web", "--", tidalBin(t), "workload", "memhog", "--target", "64Mi")
	web := n.waitWorkload("web")
	hog, out := n.run("--tier", "reclaimed", "--name", "hog", "--", tidalBin(t), "workload", "memhog", "--target", "256Mi", "--rate", "0")
	n.waitWorkload("hog")
	tier := n.root + "-reclaimed"
	n.eventually(180*time.Second, "the hog reached its size", func() error {
		if hog.ProcessState != nil {
			return fmt.Errorf("hog exited: %s", out.String())
		}
		if !strings.Contains(out.String(), `"reached":true`) {
			return fmt.Errorf("not yet: lent %s, high %s, usage %s", n.file(tier, "memory.max"), n.file(tier, "memory.high"), n.file(tier, "memory.current"))
		}
		return nil
	})
	max, _ := strconv.ParseInt(n.file(tier, "memory.max"), 10, 64)
	high, _ := strconv.ParseInt(n.file(tier, "memory.high"), 10, 64)
	highs, kills := memoryEvent(t, n, tier, "high"), memoryEvent(t, n, tier, "oom_kill")
	t.Logf("reclaimed tier: memory.max %dMiB, memory.high %dMiB; high events %d, OOM kills %d", max>>20, high>>20, highs, kills)
	if high >= max || high < max-64<<20-4096 {
		t.Errorf("memory.high %d not 64Mi below memory.max %d", high, max)
	}
	if highs == 0 {
		t.Error("the hog never went over memory.high: it was not faster than lending, the test shows nothing")
	}
	if kills != 0 {
		t.Errorf("%d OOM kills in the reclaimed tier: the hog should have been throttled", kills)
	}
	for _, c := range []struct{ rel, file, want string }{
		{n.root, "memory.low", "max"},
		{n.root, "memory.min", "max"},
		{n.root + "/shared", "memory.low", "max"},
		{n.root + "/dedicated", "memory.min", "max"},
		{tier, "memory.low", "0"},
		{n.root + "-reclaimed/hog", "memory.high", "max"},
	} {
		if got := n.file(c.rel, c.file); got != c.want {
			t.Errorf("%s/%s = %s, want %s", c.rel, c.file, got, c.want)
		}
	}
	n.eventually(30*time.Second, "the online workload protected", func() error {
		if low, _ := strconv.ParseInt(n.file(web.Cgroup, "memory.low"), 10, 64); low < 48<<20 {
			return fmt.Errorf("web memory.low = %d, want its working set (about 64Mi)", low)
		}
		return nil
	})
}
