#!/usr/bin/env bash
# bench-tools.sh: the real third-party online server the colocation benchmark drives beside its
# own Go server (tests/colocation -servers nginx): nginx from Debian's nginx-light package. The
# package's service is never used: the benchmark starts nginx with its own config per run.
# Idempotent: does nothing when nginx is on PATH.
set -euo pipefail
if command -v nginx >/dev/null 2>&1; then
	echo "bench-tools: $(nginx -v 2>&1) already installed"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "bench-tools: nginx missing and not root: run as root to apt-get install nginx-light" >&2
	exit 1
fi
echo "bench-tools: installing nginx-light from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends nginx-light >/dev/null ||
	{ apt-get update >/dev/null && apt-get install -y --no-install-recommends nginx-light >/dev/null; }
# Debian's postinst may start the packaged service where an init system runs: stop it, so it
# holds no port and no CPU during the benchmark.
if command -v service >/dev/null 2>&1; then service nginx stop >/dev/null 2>&1 || true; fi
echo "bench-tools: installed $(nginx -v 2>&1)"
