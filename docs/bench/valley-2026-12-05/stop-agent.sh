#!/bin/bash
# One flat 40 s day of the Go server; the agent stopped (SIGSTOP) for the day's second half.
out=$1
rm -rf $out
HACK_NOPOLL=1 /tmp/colo-hack -tidal /tmp/tidal-bin -out $out -rounds 1 -day 40s -warmup 6s -overhead-duration 0s -servers go -valley-rps 150 -peak-rps 150 -spike-rps 150 -agent-config /tmp/nowait.yaml -scenarios idle,tidal > $out.log 2>&1 &
B=$!
# wait for the tidal run's loadgen
while ! pgrep -f "tidal-bin agent" >/dev/null; do sleep 0.2; done
while ! pgrep -f "workload loadgen" >/dev/null; do sleep 0.1; done
AG=$(pgrep -f "tidal-bin agent" | head -1)
sleep 20; kill -STOP $AG; echo "stopped $AG at $(date +%T.%N)"
sleep 18; kill -CONT $AG; echo "continued at $(date +%T.%N)"
wait $B
python3 - $out <<'PY'
import json,sys,statistics as st
d=json.load(open(sys.argv[1]+'/results.json'))
for r in d['runs']:
    y=r['series']['p99Ms']['y']
    print(r['scenario'], 'first half p99s median %.1f' % st.median(y[1:20]), 'second half %.1f' % st.median(y[21:39]), ' '.join('%.1f'%v for v in y))
PY
