#!/usr/bin/env bash
# fuzz.sh: run every Go fuzz target of tidal's parsers of outside input for a bounded time.
#   FUZZTIME      per target (default 3s; `make fuzz` uses 2m)
#   FUZZ_PARALLEL fuzzing workers per target (default 1: these machines are shared)
#   FUZZ_SUMMARY  if set, a TSV file to write: package, target, seconds, executions,
#                 new interesting inputs, result (docs/reliability.md is made from it)
#   FUZZ_ONLY     if set, a regular expression: only targets whose name matches
#   FUZZ_MINIMIZE time to minimize each new input (default 2s; go's own default, 60s, spends
#                 a short run minimizing: a target whose every input writes and fsyncs files
#                 made no other progress for 30 s)
#   FUZZ_TMPDIR   where targets make their files (default /dev/shm when writable: fsync is
#                 free there, so file-parsing targets run at parser speed)
# Every target runs even when one fails; the script fails if any did. A failing input is
# kept by `go test` in the package's testdata/fuzz/<target>/: commit it with the fix, so it
# stays a regression test (every plain `go test` replays testdata/fuzz).
# A run that fails with a bare "context deadline exceeded" at the end of its FUZZTIME and
# writes no failing input is Go's own coordinator racing its deadline (go.dev/issue/75804,
# fixed in Go 1.27, not in 1.26): it is reported as "deadline" and does not fail the script.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
fuzztime="${FUZZTIME:-3s}"
parallel="${FUZZ_PARALLEL:-1}"
minimize="${FUZZ_MINIMIZE:-2s}"
tmp="${FUZZ_TMPDIR:-/dev/shm}"
if [[ -d $tmp && -w $tmp ]]; then export TMPDIR="$tmp"; fi

targets=(
	./agent/state:FuzzCheckpoint
	./agent/source/hooks:FuzzCgroupOfParent
	./agent:FuzzAdmitRequest
	./agent/config:FuzzParse
	./internal/yamlconf:FuzzParseSize
	./internal/promhist:FuzzRead
	./agent/config:FuzzParseCPUList
	./agent/kube:FuzzExclusiveCPUs
	./agent/kube:FuzzTierPolicy
	./arbiter:FuzzDecodeReport
	./arbiter:FuzzParsePolicy
	./arbiter:FuzzParseConfig
	./arbiter:FuzzStateFile
	./isolation/translate:FuzzMilliCPU
	./isolation/cri:FuzzCreateContainer
	./isolation/nri:FuzzCreateContainer
	./qos:FuzzClassify
)

summary="${FUZZ_SUMMARY:-}"
[[ -n $summary ]] && printf 'package\ttarget\tseconds\texecs\tnew_interesting\tresult\n' >"$summary"
module=$("$GO" list -m)
cache="$("$GO" env GOCACHE)/fuzz"
bindir=$(mktemp -d)
log="$bindir/log"
trap 'rm -rf "$bindir"' EXIT
failed=0
declare -A built

# deadline_race LOG BEFORE AFTER: whether a failed run is go.dev/issue/75804 and nothing else:
# the only failure line is the coordinator's "context deadline exceeded", and the target's
# testdata/fuzz folder (listed BEFORE and AFTER the run) gained no failing input.
deadline_race() {
	[[ $2 == "$3" ]] || return 1
	grep -q -- '^--- FAIL: ' "$1" || return 1
	# Everything after the FAIL line, less go's own trailers, must be that one message.
	local rest
	rest=$(sed -n '/^--- FAIL: /,$p' "$1" | sed '1d' | grep -v '^=== NAME\|^FAIL$\|^exit status\|^ *$')
	[[ $(sed 's/^ *//' <<<"$rest") == "context deadline exceeded" ]]
}
for t in "${targets[@]}"; do
	pkg=${t%%:*} name=${t##*:}
	if [[ -n ${FUZZ_ONLY:-} ]] && ! [[ $name =~ $FUZZ_ONLY ]]; then continue; fi
	# One instrumented test binary per package, run once per target: linking it is most of
	# what `go test -fuzz` costs per call.
	bin="$bindir/$(tr / _ <<<"$pkg").test"
	if [[ -z ${built[$pkg]:-} ]]; then
		if ! "$GO" test -c -fuzz=. -o "$bin" "$pkg" >"$log" 2>&1; then
			grep -v '^cgo-gcc-prolog\|nvml\|^ *|\|^[0-9]* |' "$log" | tail -30
			echo "fuzz: cannot build $pkg" >&2
			exit 1
		fi
		built[$pkg]=1
	fi
	start=$SECONDS
	corpus="$pkg/testdata/fuzz/$name"
	before=$(ls "$corpus" 2>/dev/null | sort)
	# Run where go test would (the package's folder): a failing input lands in its testdata/fuzz.
	(cd "$pkg" && "$bin" -test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$fuzztime" -test.fuzzminimizetime="$minimize" -test.parallel="$parallel" \
		-test.fuzzcachedir="$cache/$module/${pkg#./}/" -test.v >"$log" 2>&1)
	rc=$?
	result=ok
	if grep -q -- '--- SKIP' "$log"; then result=skipped; fi
	if [[ $rc != 0 ]] && deadline_race "$log" "$before" "$(ls "$corpus" 2>/dev/null | sort)"; then
		result=deadline
		echo "fuzz: $name ended with Go's own \"context deadline exceeded\" and no failing input (go.dev/issue/75804): not a failure"
	elif [[ $rc != 0 ]]; then
		result=FAIL
		failed=1
		grep -v '^cgo-gcc-prolog\|nvml\|^ *|\|^[0-9]* |' "$log" | tail -30
	fi
	# The last progress line: "fuzz: elapsed: 3s, execs: 12345 (4115/sec), new interesting: 3 (total: 20)"
	line=$(grep 'fuzz: elapsed:.*execs' "$log" | tail -1)
	execs=$(sed -n 's/.*execs: \([0-9]*\).*/\1/p' <<<"$line")
	newi=$(sed -n 's/.*new interesting: \([0-9]*\).*/\1/p' <<<"$line")
	printf 'fuzz %-16s %-22s %-7s %4ss execs=%s new=%s\n' "$pkg" "$name" "$result" $((SECONDS - start)) "${execs:-0}" "${newi:-0}"
	[[ -n $summary ]] && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$name" $((SECONDS - start)) "${execs:-0}" "${newi:-0}" "$result" >>"$summary"
done
exit $failed
