#!/bin/bash
# cgroup-shape-check.sh: does nesting reclaimed work beside online work, under one parent
# cgroup, cost the online service's wakeups on this machine? No agent runs: the same Redis and
# the same CPU burner are moved between two cgroup v1 shapes, interleaved, each measured under
# the same open-loop load (SINTER at 800/s, as the colocation benchmark's Redis day):
#
#   nested: P/{loadgen(10240), t/{on/db, be(LOW)/b(2)}}   tidal's layout until 2026-12-07
#   split:  P/{loadgen(10240), t/on/db, be(LOW)/b}        reclaimed work beside the online tiers'
#                                                         parent: tidal's layout since
#
# LOW is cpu.shares 2, or cpu.idle 1 with --idle. --loadgen-outside runs the load generator in
# the machine's root cgroup instead of beside t (no busy sibling of the online tiers' parent).
# It prints, per run, Redis's run-queue wait per unit of CPU run (/proc/PID/task/PID/schedstat,
# the agent's indicator) and the load's p99. Measured on the AMD EPYC (docs/benchmark.md#cgroup-shape):
# nested 0.14-0.29, split 0.05-0.09; with the load generator outside, 0.05-0.23 both.
# Needs root, cgroup v1 (hybrid), redis-server, redis-cli and a tidal binary.
#
#   scripts/cgroup-shape-check.sh [--idle] [--loadgen-outside] [--rounds N] [--seconds S] [--tidal PATH]
set -euo pipefail

low=shares rounds=3 seconds=15 tidal=${TIDAL:-} loadgen=beside
while [ $# -gt 0 ]; do
	case $1 in
	--idle) low=idle ;;
	--loadgen-outside) loadgen=outside ;;
	--rounds) rounds=$2; shift ;;
	--seconds) seconds=$2; shift ;;
	--tidal) tidal=$2; shift ;;
	*) echo "usage: $0 [--idle] [--loadgen-outside] [--rounds N] [--seconds S] [--tidal PATH]" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "cgroup-shape-check: needs root" >&2; exit 1; }
for c in cpu cpuacct cpuset; do
	[ -d /sys/fs/cgroup/$c ] || { echo "cgroup-shape-check: needs cgroup v1's $c hierarchy at /sys/fs/cgroup/$c" >&2; exit 1; }
done
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
	{ echo "cgroup-shape-check: needs redis-server and redis-cli (scripts/bench-tools.sh)" >&2; exit 1; }
if [ -z "$tidal" ]; then
	tidal=$(mktemp -d)/tidal
	go build -o "$tidal" ./cmd/tidal
fi

P=tidal-shape-check-$$
work=$(mktemp -d)
port=$((20000 + $$ % 20000))
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for c in cpu cpuacct cpuset; do
		[ -d /sys/fs/cgroup/$c/$P ] && find /sys/fs/cgroup/$c/$P -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

mk() { # mk PATH SHARES
	for c in cpu cpuacct cpuset; do mkdir -p /sys/fs/cgroup/$c/$P/$1; done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$P/$1/cpuset.cpus
	cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$P/$1/cpuset.mems
	echo "$2" >/sys/fs/cgroup/cpu/$P/$1/cpu.shares
}
move() { # move PATH PID
	for c in cpu cpuacct cpuset; do echo "$2" >/sys/fs/cgroup/$c/$P/$1/cgroup.procs; done
}
mk . 1024
mk lg 10240
mk t 1024; mk t/on 1024; mk t/be 2; mk t/be/b 2
mk be 2; mk be/b 1024
if [ $low = idle ]; then
	echo 1 >/sys/fs/cgroup/cpu/$P/t/be/cpu.idle
	echo 1 >/sys/fs/cgroup/cpu/$P/be/cpu.idle
fi

redis-server --port $port --save "" --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p $port PING >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $port SADD followers:a $(seq 0 3999 | sed 's/^/user:/') >/dev/null
redis-cli -p $port SADD followers:b $(seq 2000 5999 | sed 's/^/user:/') >/dev/null
redis=$(pgrep -x -n redis-server)
"$tidal" workload burner --threads "$(nproc)" >"$work/burner.log" 2>&1 &
burner=$!
pids+=($burner)

measure() { # measure SHAPE
	sleep 2
	local r0 w0 r1 w1 rest
	read -r r0 w0 rest </proc/$redis/task/$redis/schedstat
	sh -c "for c in cpu cpuacct cpuset; do echo \$\$ >/sys/fs/cgroup/\$c/$lgdir/cgroup.procs; done
		exec '$tidal' workload loadgen --url redis://127.0.0.1:$port/SINTER/followers:a/followers:b --phases m:${seconds}s@800" >"$work/lg.txt" 2>&1
	read -r r1 w1 rest </proc/$redis/task/$redis/schedstat
	local p99
	p99=$(tail -1 "$work/lg.txt" | grep -o '"p99_ms":[0-9.]*' | head -1 | cut -d: -f2)
	awk -v s="$1" -v w=$((w1 - w0)) -v r=$((r1 - r0)) -v p="$p99" -v low=$low -v lg=$loadgen \
		'BEGIN { printf "%-7s %-6s loadgen %-7s  run-queue wait %.3f per unit run  p99 %s ms\n", s, low, lg, w / r, p }'
}
lgdir=$P/lg
[ $loadgen = outside ] && lgdir=.
for round in $(seq "$rounds"); do
	move t/on "$redis"; move t/be/b "$burner"; measure nested
	move t/on "$redis"; move be/b "$burner"; measure split
done
