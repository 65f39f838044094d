package config

import (
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// FuzzParseCPUList: a cpulist either parses to a set that cpuset.Parse agrees with and that
// writes back to an equal set, or is refused with a reason; ids stay under maxCPUID (no huge
// allocation from a typo).
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"", "0", "0-3", "0-3,8,10-11", " 1 ", "3-1", "0-8191", "0-8192", "1,,2", "-1", "a", "0-", "00-02", "1-1", "0,0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, reason := parseCPUList(s)
		if reason != "" {
			if !set.IsEmpty() {
				t.Fatalf("parseCPUList(%q) refused (%s) with a set %v", s, reason, set)
			}
			return
		}
		for _, c := range set.UnsortedList() {
			if c < 0 || c > maxCPUID {
				t.Fatalf("parseCPUList(%q) has CPU %d", s, c)
			}
		}
		ref, err := cpuset.Parse(strings.TrimSpace(s))
		if err != nil || !ref.Equals(set) {
			t.Fatalf("parseCPUList(%q) = %v; cpuset.Parse says %v, %v", s, set, ref, err)
		}
		back, reason := parseCPUList(set.String())
		if reason != "" || !back.Equals(set) {
			t.Fatalf("parseCPUList(%q).String() = %q parses to %v (%s)", s, set.String(), back, reason)
		}
	})
}
