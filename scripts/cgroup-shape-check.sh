#!/bin/bash
# cgroup-shape-check.sh: does nesting reclaimed work beside online work, under one parent
# cgroup, cost the online service's wakeups on this machine? No agent runs: the same Redis and
# the same CPU burner are moved between two cgroup v1 shapes, interleaved, each measured under
# the same open-loop load (SINTER at 800/s, as the colocation benchmark's Redis day):
#
#   nested: P/{loadgen(10240), t/{on/db, be(LOW)/b(2)}}   tidal's layout until 2026-12-07
#   split:  P/{loadgen(10240), t/on/db, be(LOW)/b}        reclaimed work beside the online tiers'
#                                                         parent: tidal's layout since
#   flat:   P/{loadgen(10240), on/db, be(LOW)/b}          the benchmark's besteffort and idle
#   tidal:  P/{loadgen(10240), t/{system(2048), dedicated, shared/db}, tr(LOW)/b(LOW)}
#                                                         tidal's layout in full, as the
#                                                         benchmark's agent writes it
#   sleepy: tidal, beside N sleeping processes in a cgroup each (--sleepers, 200 by default),
#           half under t/shared, half under tr (LOW), in the cpu, cpuacct, cpuset and memory
#           hierarchies, as the benchmark's agent manages its -day-workloads; made before the
#           measurement and removed after it
#   sleepy-cpu, sleepy-memory, sleepy-procs: as sleepy with the sleepers' cgroups in the cpu,
#           cpuacct and cpuset hierarchies only, in the memory one only, or in none (the
#           processes alone, where the script runs): which of them costs
#   sleepy-online, sleepy-reclaimed: as sleepy with every sleeper under t/shared, or under tr
#
# --shapes picks which, in that order each round (nested,split by default). --rps sets the load
# (800 SINTER/s, the benchmark's peak; its valleys are 150).
#
# LOW is cpu.shares 2, or cpu.idle 1 with --idle. --loadgen-outside runs the load generator in
# the machine's root cgroup instead of beside t (no busy sibling of the online tiers' parent).
# It prints, per run, Redis's run-queue wait per unit of CPU run (/proc/PID/task/PID/schedstat,
# the agent's indicator) and the load's p99. Measured on the AMD EPYC (docs/benchmark.md#cgroup-shape):
# nested 0.14-0.29, split 0.05-0.09; with the load generator outside, 0.05-0.23 both.
# Needs root, cgroup v1 (hybrid), redis-server, redis-cli and a tidal binary.
#
#   scripts/cgroup-shape-check.sh [--idle] [--loadgen-outside] [--shapes LIST] [--rps N] [--rounds N] [--seconds S] [--tidal PATH]
set -euo pipefail

low=shares rounds=3 seconds=15 tidal=${TIDAL:-} loadgen=beside shapes=nested,split rps=800 sleepers=200
usage="usage: $0 [--idle] [--loadgen-outside] [--shapes nested,split,flat,tidal,sleepy,sleepy-cpu,sleepy-memory,sleepy-procs,sleepy-online,sleepy-reclaimed] [--sleepers N] [--rps N] [--rounds N] [--seconds S] [--tidal PATH]"
while [ $# -gt 0 ]; do
	case $1 in
	--idle) low=idle ;;
	--loadgen-outside) loadgen=outside ;;
	--shapes) shapes=$2; shift ;;
	--rps) rps=$2; shift ;;
	--sleepers) sleepers=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--seconds) seconds=$2; shift ;;
	--tidal) tidal=$2; shift ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
	shift
done
for shape in ${shapes//,/ }; do
	case $shape in
	nested | split | flat | tidal | sleepy | sleepy-cpu | sleepy-memory | sleepy-procs | sleepy-online | sleepy-reclaimed) ;;
	*) echo "cgroup-shape-check: --shapes: unknown shape '$shape' (want some of nested, split, flat, tidal, sleepy, sleepy-cpu, sleepy-memory, sleepy-procs, sleepy-online, sleepy-reclaimed)" >&2; exit 2 ;;
	esac
done
[[ $sleepers =~ ^[0-9]+$ ]] || { echo "cgroup-shape-check: --sleepers '$sleepers': want a whole number" >&2; exit 2; }
[[ $rps =~ ^[1-9][0-9]*$ ]] || { echo "cgroup-shape-check: --rps '$rps': want a whole number of requests a second above 0" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "cgroup-shape-check: needs root" >&2; exit 1; }
for c in cpu cpuacct cpuset memory; do
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
pids=() sleeping=()
cleanup() {
	for p in "${pids[@]}" "${sleeping[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for c in cpu cpuacct cpuset memory; do
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
add_sleepers() { # add_sleepers CPU MEMORY [WHERE]: N sleeping processes, as the agent's
	# -day-workloads, each in a cgroup of its own in the cpu hierarchies (CPU yes) and the memory
	# one (MEMORY yes), every other one under t/shared and the rest under tr (WHERE both), or all
	# under t/shared (online) or tr (reclaimed)
	local i g
	for i in $(seq "$sleepers"); do
		case ${3:-both}.$((i % 2)) in
		online.* | both.0) g=t/shared/light-$i ;;
		*) g=tr/light-$i ;;
		esac
		sleep 3600 &
		sleeping+=($!)
		if [ "$1" = yes ]; then
			mk "$g" 1024
			if [ $low = idle ] && [ "${g%%/*}" = tr ]; then echo 1 >/sys/fs/cgroup/cpu/$P/$g/cpu.idle; fi
			move "$g" $!
		fi
		if [ "$2" = yes ]; then
			mkdir -p /sys/fs/cgroup/memory/$P/$g
			echo $! >/sys/fs/cgroup/memory/$P/$g/cgroup.procs
		fi
	done
}
remove_sleepers() {
	local p
	for p in "${sleeping[@]}"; do kill "$p" 2>/dev/null || true; done
	wait "${sleeping[@]}" 2>/dev/null || true
	sleeping=()
	for c in cpu cpuacct cpuset memory; do
		[ -d /sys/fs/cgroup/$c/$P ] || continue
		find /sys/fs/cgroup/$c/$P -depth -type d -name 'light-*' -exec rmdir {} \;
	done
}
mk . 1024
mk lg 10240
mk t 1024; mk t/on 1024; mk t/be 2; mk t/be/b 2
mk be 2; mk be/b 1024
mk on 1024
mk t/system 2048; mk t/dedicated 1024; mk t/shared 1024; mk t/shared/db 1024
mk tr 2; mk tr/b 2
if [ $low = idle ]; then
	for g in t/be be tr tr/b; do echo 1 >/sys/fs/cgroup/cpu/$P/$g/cpu.idle; done
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
		exec '$tidal' workload loadgen --url redis://127.0.0.1:$port/SINTER/followers:a/followers:b --phases m:${seconds}s@$rps" >"$work/lg.txt" 2>&1
	read -r r1 w1 rest </proc/$redis/task/$redis/schedstat
	local p99
	p99=$(tail -1 "$work/lg.txt" | grep -o '"p99_ms":[0-9.]*' | head -1 | cut -d: -f2)
	awk -v s="$1" -v w=$((w1 - w0)) -v r=$((r1 - r0)) -v p="$p99" -v low=$low -v lg=$loadgen \
		'BEGIN { printf "%-13s %-6s loadgen %-7s  run-queue wait %.3f per unit run  p99 %s ms\n", s, low, lg, w / r, p }'
}
lgdir=$P/lg
[ $loadgen = outside ] && lgdir=.
for round in $(seq "$rounds"); do
	for shape in ${shapes//,/ }; do
		case $shape in
		nested) move t/on "$redis"; move t/be/b "$burner" ;;
		split) move t/on "$redis"; move be/b "$burner" ;;
		flat) move on "$redis"; move be/b "$burner" ;;
		tidal) move t/shared/db "$redis"; move tr/b "$burner" ;;
		sleepy*)
			move t/shared/db "$redis"; move tr/b "$burner"
			case $shape in
			sleepy) add_sleepers yes yes ;;
			sleepy-cpu) add_sleepers yes no ;;
			sleepy-memory) add_sleepers no yes ;;
			sleepy-procs) add_sleepers no no ;;
			sleepy-online) add_sleepers yes yes online ;;
			sleepy-reclaimed) add_sleepers yes yes reclaimed ;;
			esac
			sleep 4
			;;
		esac
		measure "$shape"
		if [ "${shape%%-*}" = sleepy ]; then remove_sleepers; fi
	done
done
