#!/usr/bin/env bash
# gpu-check.sh: check tidal's GPU support on this machine.
#
#   scripts/gpu-check.sh            build, print what NVML sees and what tidal would
#                                   lend, then run the GPU tests
#   scripts/gpu-check.sh build DIR  only build the check and the test binaries into DIR
#   scripts/gpu-check.sh run DIR    run binaries built earlier (for a GPU machine that
#                                   has no Go toolchain or no network)
#
# When NVML loads (an NVIDIA GPU and its driver), the tests also run against the real
# library (TIDAL_GPU_REAL=1). Without NVML it prints "no GPU / no NVML", runs the tests
# that need no GPU, and exits 0. Exit status is non-zero only when a build or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

# go-nvml's nvml.h marks many calls deprecated; keep cgo's warnings out of the output.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
GO="${GO:-go}"

build() {
	local dir=$1
	mkdir -p "$dir"
	"$GO" build -o "$dir/gpucheck" ./sysadvisor/gpu/cmd/gpucheck
	"$GO" test -c -o "$dir/sysadvisor-gpu.test" ./sysadvisor/gpu
	"$GO" test -c -o "$dir/plugins-gpu.test" ./plugins/gpu
	# Not a GPU test: the device machines are where hardware perf counters can be found
	# (this project's CI VMs have none), so cycles per instruction is checked there too.
	"$GO" test -c -o "$dir/sysadvisor-perfcount.test" ./sysadvisor/perfcount
}

run() {
	local dir=$1 real=0 verbose=()
	echo "== what tidal sees through NVML"
	"$dir/gpucheck" | tee "$dir/gpucheck.out"
	if ! grep -q '^no GPU / no NVML' "$dir/gpucheck.out"; then
		real=1
		verbose=(-test.v)
		if command -v nvidia-smi >/dev/null; then
			echo "== nvidia-smi, to compare"
			nvidia-smi --query-gpu=index,uuid,pci.bus_id,utilization.gpu,memory.used,memory.total --format=csv || true
		fi
	fi
	echo "== GPU tests (TIDAL_GPU_REAL=$real)"
	local pkg status=0
	for pkg in sysadvisor-gpu plugins-gpu sysadvisor-perfcount; do
		# Test binaries run in their package directory, as go test does.
		local src=${pkg/-//}
		if (cd "$src" && TIDAL_GPU_REAL=$real "$dir/$pkg.test" -test.count=1 "${verbose[@]}"); then
			echo "ok   $src"
		else
			echo "FAIL $src"
			status=1
		fi
	done
	return $status
}

case "${1:-}" in
build)
	build "$(realpath -m "${2:?usage: $0 build DIR}")"
	;;
run)
	run "$(realpath "${2:?usage: $0 run DIR}")"
	;;
"")
	if ! command -v "$GO" >/dev/null; then
		echo "gpu-check: no Go toolchain here; build elsewhere with '$0 build DIR' and run '$0 run DIR'" >&2
		exit 1
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	build "$tmp"
	run "$tmp"
	;;
*)
	echo "usage: $0 [build DIR | run DIR]" >&2
	exit 2
	;;
esac
