#!/usr/bin/env bash
# cri-tools.sh: the container runtimes the CRI integration tests (tests/cri/critest) drive.
#  - containerd 1.6 and runc from Debian (apt), only when containerd 1.6 is not installed yet.
#  - containerd v2.4.2 (containerd, containerd-shim-runc-v2, ctr), built from the version pinned
#    in tools/cri/go.mod into .cache/cri-tools/bin: Debian's 1.6 has only NRI v0.1, NRI v2
#    needs containerd >= 1.7.
# Idempotent: skips apt when containerd 1.6 is there and the build when the binaries are newer
# than the pins and this script. The first build downloads and compiles containerd: minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO="${GO:-go}"
bin="$root/.cache/cri-tools/bin"

# containerd 1.6 (and the runc both containerds use) from Debian.
if command -v containerd >/dev/null 2>&1 && containerd --version 2>/dev/null | grep -q ' v\?1\.6\.'; then
	echo "cri-tools: $(containerd --version | awk '{print $1, $3}') already installed"
else
	if [[ $(id -u) != 0 ]]; then
		echo "cri-tools: containerd 1.6 missing and not root: run as root to apt-get install containerd runc" >&2
		exit 1
	fi
	echo "cri-tools: installing containerd and runc from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y containerd runc >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y containerd runc >/dev/null; }
	# The package's service is never started here (no systemd as PID 1); tests start their own.
	echo "cri-tools: installed $(containerd --version | awk '{print $1, $3}'), $(runc --version | head -1)"
fi
if ! command -v runc >/dev/null 2>&1; then
	echo "cri-tools: runc missing: apt-get install -y runc" >&2
	exit 1
fi

inputs=(tools/cri/go.mod tools/cri/go.sum scripts/cri-tools.sh)
cmds=(containerd containerd-shim-runc-v2 ctr)
fresh=1
for b in "${cmds[@]}"; do
	for f in "${inputs[@]}"; do
		[[ -x "$bin/$b" && "$bin/$b" -nt "$f" ]] || fresh=0
	done
done
if [[ $fresh == 1 ]]; then
	echo "cri-tools: containerd v2 up to date in $bin"
	exit 0
fi

# The pinned version, from a one-line or a block require.
version=$(awk '{ for (i = 1; i < NF; i++) if ($i == "github.com/containerd/containerd/v2") print $(i + 1) }' tools/cri/go.mod)
pkg=github.com/containerd/containerd/v2
mkdir -p "$bin"
echo "cri-tools: building containerd $version (first time: minutes)"
start=$SECONDS
(
	cd tools/cri
	# A separate module: keep any go.work and the caller's GOFLAGS out of it. The version
	# variable makes `containerd --version` report the pinned version instead of a dev one.
	GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 "$GO" build -buildvcs=false \
		-ldflags "-s -w -X $pkg/version.Version=$version" \
		-o "$bin/" "$pkg/cmd/containerd" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr"
)
# go build leaves an unchanged binary's mtime alone; mark them as built from these inputs.
for b in "${cmds[@]}"; do touch "$bin/$b"; done
echo "cri-tools: built in $((SECONDS - start))s: $bin/{containerd,containerd-shim-runc-v2,ctr}"
