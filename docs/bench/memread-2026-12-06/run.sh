#!/bin/bash
# A/B: the Go server beside offline work under the idle class (no agent), with and without a
# reader of 200 memory cgroups' memory.stat (each 1x a second: 10x the agent's rate).
# As root, from the repository: go build -o /tmp/colo-bin ./tests/colocation && go build -o /tmp/tidal-bin ./cmd/tidal
mkdir -p "${OUT:-/tmp/memread}"
for r in 1 2 3; do
  for mode in plain reader; do
    out=${OUT:-/tmp/memread}/$mode-$r
    if [ $mode = reader ]; then
      python3 "$(dirname "$0")/reader.py" memory+root /sys/fs/cgroup/memory/tidal-memread-test 200 1 &
      RP=$!
    fi
    /tmp/colo-bin -tidal /tmp/tidal-bin -out $out -rounds 1 -day 40s -warmup 6s -overhead-duration 0 -servers go -scenarios online-alone,idle > $out.log 2>&1
    if [ $mode = reader ]; then kill $RP; wait $RP; fi
  done
done
touch ${OUT:-/tmp/memread}/done
