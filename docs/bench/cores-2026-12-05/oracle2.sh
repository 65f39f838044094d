#!/bin/bash
cd /work/main
/tmp/colo-bin -tidal /tmp/tidal-bin2 -out OUT/oracle2 -rounds 2 -day 40s -warmup 6s -overhead-duration 0 \
  -servers go,nginx,apache -scenarios online-alone,offline-alone,tidal,split-oracle 2>&1 | grep --line-buffered -E "^\[|rror"
echo "== done $(date -u +%H:%M:%S)"
