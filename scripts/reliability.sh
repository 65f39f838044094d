#!/usr/bin/env bash
# reliability.sh [SOAK_DURATION] [FUZZTIME]: regenerate docs/reliability.md on this machine, as
# root: the fault-injection suite and the soak (tests/faults, SOAK_DURATION, default 5m), every
# fuzz target for FUZZTIME (default 30s), then tests/faults/reliabilitydoc writes the doc.
# Measures this machine: run it on a quiet one (other CPU load moves the soak's and fuzzing's
# figures, not its pass/fail).
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
soak="${1:-5m}"
fuzztime="${2:-30s}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
echo "reliability: fault suite and a ${soak} soak"
TIDAL_RELIABILITY_OUT="$out" TIDAL_SOAK_DURATION="$soak" \
	"$GO" test -count=1 -v -timeout 0 ./tests/faults 2>&1 | grep -E '^(=== RUN|--- |\s+helpers_test|PASS|FAIL|ok)' || status=1
echo "reliability: fuzzing, ${fuzztime} per target"
FUZZTIME="$fuzztime" FUZZ_SUMMARY="$out/fuzz.tsv" ./scripts/fuzz.sh || status=1
"$GO" run ./tests/faults/reliabilitydoc -in "$out" -out docs/reliability.md -cmd "make reliability RELIABILITY_SOAK=$soak RELIABILITY_FUZZTIME=$fuzztime"
echo "reliability: wrote docs/reliability.md"
exit $status
