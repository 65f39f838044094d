//go:build tools

// Package tools pins the containerd v2 commands that scripts/cri-tools.sh builds for the CRI
// integration tests (tests/cri/critest): containerd 1.6 from Debian has only NRI v0.1, NRI v2
// needs containerd >= 1.7. This module is never imported by github.com/tidalqos/tidal.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
