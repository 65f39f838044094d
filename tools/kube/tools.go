//go:build tools

// Package tools pins the Kubernetes and etcd commands that scripts/kube-tools.sh builds for
// the integration tests. This module is never imported by github.com/tidalqos/tidal.
package tools

import (
	_ "github.com/tidalqos/tidal/tools/kube/etcd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
