#!/usr/bin/env bash
# reliability.sh [SOAK_DURATION] [FUZZTIME]: regenerate docs/reliability.md on this machine, as
# root: the fault-injection suite and the soak (tests/faults, SOAK_DURATION, default 5m), the
# fault cases of the other suites (tests/kube: the kube-apiserver killed mid-pass; tests/cri:
# the runtime hook peers hanging and disconnecting; tests/cgroupv2: the clock stepped across a
# lending window, in the VM), every fuzz target for FUZZTIME (default 30s), then
# tests/faults/reliabilitydoc writes the doc.
# SOAK_JSON=FILE reuses the soak.json of an earlier soak (TIDAL_RELIABILITY_OUT=DIR make soak)
# instead of running one; RELIABILITY_NOTE and SOAK_NOTE add a sentence to the header and a
# paragraph after the soak's result.
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
export TIDAL_RELIABILITY_OUT="$out"
summary() { grep -E '^(=== RUN|--- |\s+[a-z_]+_test\.go:[0-9]+:|PASS|FAIL|ok)' || true; }
cmd="make reliability RELIABILITY_SOAK=$soak RELIABILITY_FUZZTIME=$fuzztime"
note=""
skip=()
if [[ -n "${SOAK_JSON:-}" ]]; then
	cp "$SOAK_JSON" "$out/soak.json"
	# The soak's pass or fail, recorded beside its soak.json by the same run.
	if [[ -f "$(dirname "$SOAK_JSON")/faults.jsonl" ]]; then
		grep '"test":"TestSoak"' "$(dirname "$SOAK_JSON")/faults.jsonl" >>"$out/faults.jsonl" || true
	fi
	skip=(-skip '^TestSoak$')
	cmd="SOAK_JSON=... make reliability RELIABILITY_FUZZTIME=$fuzztime"
	note="The soak figures are those of an earlier \`make soak\` on the same machine and commit (SOAK_JSON)."
	echo "reliability: fault suite; the soak from $SOAK_JSON"
else
	echo "reliability: fault suite and a ${soak} soak"
fi
TIDAL_SOAK_DURATION="$soak" "$GO" test -count=1 -v -timeout 0 "${skip[@]}" ./tests/faults 2>&1 | summary
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "reliability: fault cases of the other suites"
"$GO" test -count=1 -v -timeout 20m -run '^TestAPIServerKilledMidPass$' ./tests/kube 2>&1 | summary
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
"$GO" test -count=1 -v -timeout 20m -run '^(TestCRIProxyPeerHangsAndDisconnects|TestNRIPluginPeerHangsAndDisconnects)$' ./tests/cri 2>&1 | summary
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
TIDAL_V2_RUN='^TestV2ClockJumpsAcrossLendingWindow$' "$GO" test -count=1 -v -timeout 10m -run '^TestInVM$' ./tests/cgroupv2 2>&1 | summary
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "reliability: fuzzing, ${fuzztime} per target"
FUZZTIME="$fuzztime" FUZZ_SUMMARY="$out/fuzz.tsv" ./scripts/fuzz.sh || status=1
"$GO" run ./tests/faults/reliabilitydoc -in "$out" -out docs/reliability.md -cmd "$cmd" -note "${RELIABILITY_NOTE:-$note}" -soak-note "${SOAK_NOTE:-}"
echo "reliability: wrote docs/reliability.md"
exit $status
