package standalone

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParentOf(t *testing.T) {
	if got := parentOf("/proc", os.Getpid()); got != os.Getppid() {
		t.Errorf("parentOf(self) = %d, want %d", got, os.Getppid())
	}
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "42"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "42", "stat"), []byte("42 (a b) c) S 7 42 42 0"), 0o644)
	if got := parentOf(dir, 42); got != 7 {
		t.Errorf("comm with spaces and parens: parent = %d, want 7", got)
	}
}

// A request tidal run could not have meant is refused in tidal run's terms: its flags, not the
// annotations they become, and without the fallback a pod would get (the request is refused).
func TestRefusalsNameTheFlags(t *testing.T) {
	s := &Source{opts: Options{Root: "tidal", CPUs: 2}}
	burst, fifty, none, priority, probe := int32(200), int32(50), int32(0), int32(3), "http://127.0.0.1:8080/"
	for _, c := range []struct {
		req  AdmitRequest
		want string
	}{
		{AdmitRequest{Tier: "shared", CPUs: 1, CPUBurstPercent: &burst}, "--cpu-burst-percent 200: not a decimal integer in 0..100"},
		{AdmitRequest{Tier: "reclaimed", SLOProbe: probe, SLOLatency: "10ms"}, "--slo-probe " + probe + ": an SLO signal protects online work"},
		{AdmitRequest{Tier: "shared", SLOLatency: "10"}, "--slo-latency 10: needs --slo-probe or --slo-metric too"},
		{AdmitRequest{Tier: "shared", SLOMetric: "http://127.0.0.1:8080/metrics", SLOLatency: "10ms"}, "--slo-metric http://127.0.0.1:8080/metrics: names no histogram"},
		{AdmitRequest{Tier: "shared", SLOMetric: "http://127.0.0.1:8080/metrics#h", SLOQuantile: "1", SLOLatency: "10ms"}, "--slo-quantile 1: not a number between 0 and 1"},
		// Flags that would do nothing are refused, not taken silently.
		{AdmitRequest{Tier: "shared", CPUBurstPercent: &fifty}, "--cpu-burst-percent 50: a burst is a share of the CPU cap --cpus sets"},
		{AdmitRequest{Tier: "dedicated", CPUs: 1, CPUBurstPercent: &fifty}, "--cpu-burst-percent 50: a burst is a share of the CPU cap --cpus sets on shared and system work; dedicated work"},
		{AdmitRequest{Tier: "shared", ReclaimPriority: &priority}, "--reclaim-priority 3: it orders only tier reclaimed for eviction, this workload is shared"},
	} {
		c.req.Name, c.req.PID = "job", 1
		_, err := s.spec(c.req, 0)
		var re *RequestError
		if !errors.As(err, &re) || re.Status != 400 || !strings.HasPrefix(re.Msg, c.want) {
			t.Errorf("%+v: %v, want a 400 starting %q", c.req, err, c.want)
			continue
		}
		for _, fallback := range []string{"ignored", "using", "no SLO signal", "tidalqos.io"} {
			if strings.Contains(re.Msg, fallback) {
				t.Errorf("%+v: %q says %q, which a refused request does not do", c.req, re.Msg, fallback)
			}
		}
	}
	for _, ok := range []AdmitRequest{
		{Tier: "shared", CPUs: 1, CPUBurstPercent: &fifty},
		{Tier: "system", CPUs: 1, CPUBurstPercent: &fifty},
		{Tier: "reclaimed", ReclaimPriority: &priority},
		{Tier: "shared", CPUBurstPercent: &none}, // no burst: what it gets without a cap anyway
	} {
		ok.Name, ok.PID = "job", 1
		if _, err := s.spec(ok, 0); err != nil {
			t.Errorf("%+v: refused: %v", ok, err)
		}
	}
}

// Names of the files every cgroup folder holds are refused before anything is made; names
// that only look alike (a dash, as tidal run's default names have) are not.
func TestCgroupFileNames(t *testing.T) {
	for name, want := range map[string]bool{
		"tasks": true, "cpu.shares": true, "cgroup.procs": true, "memory.kmem.limit_in_bytes": true, "hugetlb.2MB.usage_in_bytes": true,
		"cpu.sh-1234": false, "web": false, "web.v2": false, "cpuburner": false, "io-heavy.job": false,
	} {
		if got := cgroupFileName(name); got != want {
			t.Errorf("cgroupFileName(%q) = %v, want %v", name, got, want)
		}
	}
}
