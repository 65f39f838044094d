#!/usr/bin/env bash
# kube-tools.sh: build a real kube-apiserver, kubectl and etcd for the integration tests
# (tests/kube/kubetest) from the versions pinned in tools/kube/go.mod, into
# .cache/kube-tools/bin. Idempotent: it does nothing when the binaries are newer than the
# pins and this script; otherwise go's build cache makes a rebuild quick. The first build
# downloads the modules and compiles Kubernetes: several minutes on a small machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO="${GO:-go}"
bin="$root/.cache/kube-tools/bin"
kube_version=v1.37.2 # keep in step with k8s.io/kubernetes in tools/kube/go.mod

inputs=(tools/kube/go.mod tools/kube/go.sum tools/kube/etcd/main.go scripts/kube-tools.sh)
fresh=1
for b in kube-apiserver kubectl etcd; do
	for f in "${inputs[@]}"; do
		[[ -x "$bin/$b" && "$bin/$b" -nt "$f" ]] || fresh=0
	done
done
if [[ $fresh == 1 ]]; then
	echo "kube-tools: up to date in $bin"
	exit 0
fi

# The version variables the release build sets (hack/lib/version.sh), so that the
# apiserver and kubectl report $kube_version instead of v0.0.0-master.
major=${kube_version#v}
major=${major%%.*}
minor=${kube_version#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

mkdir -p "$bin"
echo "kube-tools: building kube-apiserver, kubectl and etcd $kube_version (first time: minutes)"
start=$SECONDS
(
	cd tools/kube
	# A separate module: keep any go.work and the caller's GOFLAGS out of it.
	GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 "$GO" build -buildvcs=false -ldflags "$ldflags" \
		-o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ./etcd
)
# go build leaves an unchanged binary's mtime alone; mark them as built from these inputs.
touch "$bin/kube-apiserver" "$bin/kubectl" "$bin/etcd"
echo "kube-tools: built in $((SECONDS - start))s: $bin/{kube-apiserver,kubectl,etcd}"
