#!/bin/bash
# Alternate the cache antagonist (520Mi, twice the L3) with a cache-light one (1Mi, inside L2).
cd /work/main
for r in 1 2; do
  for s in big small; do
    size=520Mi; [ $s = small ] && size=1Mi
    echo "== $s$r $(date -u +%H:%M:%S)"
    /tmp/colo-bin -tidal /tmp/tidal-bin -out OUT/$s$r -rounds 1 -day 40s -warmup 6s -overhead-duration 0 \
      -antagonist-size $size -servers go,nginx,apache -scenarios online-alone,offline-alone,naive,idle,tidal 2>&1 | grep -E "^\[|error|Error" 
  done
done
echo "== done $(date -u +%H:%M:%S)"
