#!/usr/bin/env bash
# prom-tools.sh: the Prometheus server and promtool the metrics tests (tests/prom) drive, from
# Debian's `prometheus` package (it ships promtool). The package's service is never started here
# (no systemd as PID 1): tests start their own Prometheus with their own config and storage.
# Idempotent: does nothing when both binaries are on PATH.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
	echo "prom-tools: $(prometheus --version 2>&1 | head -1) already installed"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "prom-tools: prometheus missing and not root: run as root to apt-get install prometheus" >&2
	exit 1
fi
echo "prom-tools: installing prometheus (with promtool) from Debian"
export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends: the package recommends node-exporter and friends, not needed here.
apt-get install -y --no-install-recommends prometheus >/dev/null ||
	{ apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; }
# Debian's postinst may try to start the service; nothing runs without systemd, but stop any
# instance the package started so it does not hold :9090.
if command -v service >/dev/null 2>&1; then service prometheus stop >/dev/null 2>&1 || true; fi
echo "prom-tools: installed $(prometheus --version 2>&1 | head -1)"
