#!/bin/bash
# The Go server alone, beside nothing, a 1 Hz reader of 200 cpuacct cgroups, or of 200 memory cgroups.
# As root, from the repository: go build -o /tmp/colo-bin ./tests/colocation && go build -o /tmp/tidal-bin ./cmd/tidal
mkdir -p "${OUT:-/tmp/memread}"
for r in 1 2 3; do
  for mode in plain cpu memory; do
    out=${OUT:-/tmp/memread}/b-$mode-$r
    RP=
    case $mode in
      cpu) python3 "$(dirname "$0")/reader.py" cpu /sys/fs/cgroup/cpuacct/tidal-memread-cpu 200 1 & RP=$! ;;
      memory) python3 "$(dirname "$0")/reader.py" memory /sys/fs/cgroup/memory/tidal-memread-mem 200 1 & RP=$! ;;
    esac
    /tmp/colo-bin -tidal /tmp/tidal-bin -out $out -rounds 1 -day 40s -warmup 6s -overhead-duration 0 -servers go -scenarios online-alone > $out.log 2>&1
    if [ -n "$RP" ]; then kill $RP; wait $RP; fi
  done
done
touch ${OUT:-/tmp/memread}/done2
