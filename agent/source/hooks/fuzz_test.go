package hooks

import (
	"path"
	"strings"
	"testing"
)

// FuzzCgroupOfParent: whatever cgroup parent a runtime hook names, the path the agent makes of
// it is relative, clean and stays inside each hierarchy (no ".." climbing out of it).
func FuzzCgroupOfParent(f *testing.F) {
	for _, s := range []string{
		"/kubepods/besteffort/pod1234", "kubepods-besteffort-pod12_34.slice", "kubepods-pod12_34.slice",
		"/tidal-test-ab/kubepods/burstable/p1", "kubepods.slice/kubepods-burstable.slice", "", "/", "-.slice",
		"../../etc", "kubepods/../../x", "a--b.slice", "..slice", "/..", ".",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, parent string) {
		got := CgroupOfParent(parent)
		if got == "" {
			return
		}
		if strings.HasPrefix(got, "/") {
			t.Fatalf("CgroupOfParent(%q) = %q: absolute", parent, got)
		}
		if path.Clean(got) != got {
			t.Fatalf("CgroupOfParent(%q) = %q: not clean (%q)", parent, got, path.Clean(got))
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." || el == "." {
				t.Fatalf("CgroupOfParent(%q) = %q: climbs out of the hierarchy", parent, got)
			}
		}
	})
}
