#!/bin/bash
cd /work/main
/tmp/colo-bin -tidal /tmp/tidal-bin -out OUT/split -rounds 2 -day 20s -warmup 4s -overhead-duration 0 \
  -valley-rps 150 -peak-rps 150 -spike-rps 150 -servers go,nginx,apache \
  -scenarios online-alone,online-alone-lower,split,idle 2>&1 | grep --line-buffered -E "^\[|rror"
echo "== done $(date -u +%H:%M:%S)"
