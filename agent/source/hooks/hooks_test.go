package hooks

import "testing"

func TestCgroupOfParent(t *testing.T) {
	for parent, want := range map[string]string{
		"/kubepods/besteffort/pod1234":         "kubepods/besteffort/pod1234",
		"kubepods-besteffort-pod12_34.slice":   "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice",
		"kubepods-pod12_34.slice":              "kubepods.slice/kubepods-pod12_34.slice",
		"/tidal-test-ab/kubepods/burstable/p1": "tidal-test-ab/kubepods/burstable/p1",
	} {
		if got := CgroupOfParent(parent); got != want {
			t.Errorf("cgroupOfParent(%q) = %q, want %q", parent, got, want)
		}
	}
}
