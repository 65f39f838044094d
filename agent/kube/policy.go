package kube

import (
	"bytes"
	"fmt"
	"io"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/tidalqos/tidal/qos"
)

// PolicyKey is the ConfigMap key that holds the tier policy.
const PolicyKey = "policy.yaml"

type tierPolicyFile struct {
	SystemNamespaces    []string `yaml:"systemNamespaces"`
	DedicatedNamespaces []string `yaml:"dedicatedNamespaces"`
}

var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParsePolicy reads the tier policy:
//
//	systemNamespaces: [kube-system]
//	dedicatedNamespaces: [prod]
//
// Unknown keys and names that cannot be namespaces are errors naming the line. The policy is
// always restricted: only the namespaces listed may claim system or dedicated.
func ParsePolicy(data string) (qos.Policy, error) {
	var f tierPolicyFile
	dec := yaml.NewDecoder(bytes.NewReader([]byte(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && err != io.EOF {
		return qos.Policy{}, fmt.Errorf("%s: %v (want keys systemNamespaces and dedicatedNamespaces, each a list of namespaces)", PolicyKey, err)
	}
	for _, list := range []struct {
		key   string
		names []string
	}{{"systemNamespaces", f.SystemNamespaces}, {"dedicatedNamespaces", f.DedicatedNamespaces}} {
		for _, ns := range list.names {
			if !namespaceName.MatchString(ns) {
				return qos.Policy{}, fmt.Errorf("%s: %s: %q is not a namespace name", PolicyKey, list.key, ns)
			}
		}
	}
	return qos.Policy{Restricted: true, SystemNamespaces: f.SystemNamespaces, DedicatedNamespaces: f.DedicatedNamespaces}, nil
}
