package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidalqos/tidal/qos"
)

// FuzzExclusiveCPUs: any bytes in the kubelet's CPU manager state file give the pods' CPUs or
// an error naming the file; never a panic, never an empty set for a pod.
func FuzzExclusiveCPUs(f *testing.F) {
	for _, s := range []string{
		`{"policyName":"static","defaultCpuSet":"0,3","entries":{"uid-a":{"app":"1","side":"2"}},"checksum":1}`,
		`{"policyName":"none","defaultCpuSet":"","checksum":1}`,
		`{"policyName":"static","defaultCpuSet":"0-1","entries":{"6f1c":{"main":"2-3,6-7"},"77aa":{"db":""}},"checksum":3016420036}`,
		`{"policyName":"static","entries":{"uid-a":{"app":"x-1"}}}`,
		`{"policyName":"static","entries":{"uid-a":null}}`,
		`{not json`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "cpu_manager_state")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ExclusiveCPUs(p)
		if err != nil {
			if got != nil || !strings.Contains(err.Error(), p) {
				t.Fatalf("ExclusiveCPUs = %v, %v: want no CPUs and an error naming the file", got, err)
			}
			return
		}
		for uid, set := range got {
			if set.IsEmpty() {
				t.Fatalf("pod %s with an empty set", uid)
			}
		}
	})
}

// FuzzTierPolicy: the tier policy ConfigMap's YAML parses to a restricted policy whose
// namespaces are all valid names, or gives an error naming the key.
func FuzzTierPolicy(f *testing.F) {
	for _, s := range []string{
		"systemNamespaces: [kube-system]\ndedicatedNamespaces:\n  - prod\n", "", "other: 1\n",
		"systemNamespaces: [Kube_System]\n", "systemNamespaces: kube-system\n", "- a\n", "systemNamespaces: [&a x, *a]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		p, err := ParsePolicy(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), PolicyKey+": ") {
				t.Fatalf("error does not name %s: %v", PolicyKey, err)
			}
			return
		}
		if !p.Restricted {
			t.Fatal("policy not restricted")
		}
		for _, ns := range append(append([]string{}, p.SystemNamespaces...), p.DedicatedNamespaces...) {
			if !namespaceName.MatchString(ns) {
				t.Fatalf("accepted namespace %q", ns)
			}
		}
		// Only the namespaces listed may claim system or dedicated.
		const other = "not-a-valid-namespace_"
		if p.Allows(other, qos.System) || p.Allows(other, qos.Dedicated) {
			t.Fatal("an unlisted namespace may claim system or dedicated")
		}
	})
}
