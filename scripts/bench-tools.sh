#!/usr/bin/env bash
# bench-tools.sh: the real third-party online servers the colocation benchmark drives beside its
# own Go server (tests/colocation -servers nginx,apache,redis): nginx from Debian's nginx-light
# package, Apache httpd from its apache2 package and Redis from its redis-server package. The
# packages' services are never used: the benchmark starts each server with its own config per
# run. make test runs it too: tests/integration runs a real redis-server under its SLO probe.
# Idempotent: does nothing when all three are there.
set -euo pipefail
missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v apache2 >/dev/null 2>&1 || [[ -x /usr/sbin/apache2 ]] || missing+=(apache2)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
versions() { echo "$(nginx -v 2>&1), $(/usr/sbin/apache2 -v | head -1), $(redis-server --version | cut -d' ' -f1-3)"; }
if [[ ${#missing[@]} == 0 ]]; then
	echo "bench-tools: $(versions) already installed"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "bench-tools: ${missing[*]} missing and not root: run as root to apt-get install them" >&2
	exit 1
fi
echo "bench-tools: installing ${missing[*]} from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
	{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
# Debian's postinst may start the packaged services where an init system runs: stop them, so
# they hold no port and no CPU during the benchmark.
if command -v service >/dev/null 2>&1; then
	service nginx stop >/dev/null 2>&1 || true
	service apache2 stop >/dev/null 2>&1 || true
	service redis-server stop >/dev/null 2>&1 || true
fi
echo "bench-tools: installed $(versions)"
