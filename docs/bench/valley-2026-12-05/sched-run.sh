#!/bin/bash
out=$1; sc=${2:-tidal}   # scenario: idle or tidal
rm -rf $out; mkdir -p $out.perf
/tmp/colo-bin -tidal /tmp/tidal-bin -out $out -rounds 1 -day 30s -warmup 6s -overhead-duration 0s -servers go -valley-rps 150 -peak-rps 150 -spike-rps 150 -agent-config /tmp/nowait.yaml -scenarios $sc > $out.log 2>&1 &
B=$!
while ! pgrep -f "workload loadgen" >/dev/null; do sleep 0.1; done
sleep 10
pgrep -af "tidal-bin" > $out.perf/procs.txt
perf sched record -o $out.perf/sched.data -- sleep 8 >/dev/null 2>&1
wait $B
grep -E "p99" $out.log
