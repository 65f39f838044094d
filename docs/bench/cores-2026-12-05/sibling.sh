#!/bin/bash
# How much does work on CPU 1 slow a loop on CPU 0? (vCPUs that share a host core, or a
# shared cache, slow each other; separate cores with private caches do not.)
count(){ taskset -c 0 bash -c 's=$(date +%s%N); for ((i=0;i<2000000;i++)); do :; done; echo $(( ($(date +%s%N)-s)/1000000 ))ms'; }
for rep in 1 2 3; do
  for what in none spin burner antagonist-1Mi antagonist-520Mi; do
    pid=
    case $what in
      spin) taskset -c 1 bash -c 'while :; do :; done' & pid=$!;;
      burner) taskset -c 1 /tmp/tidal-bin workload burner --threads 1 >/dev/null & pid=$!;;
      antagonist-1Mi) taskset -c 1 /tmp/tidal-bin workload antagonist --threads 1 --size 1Mi >/dev/null & pid=$!;;
      antagonist-520Mi) taskset -c 1 /tmp/tidal-bin workload antagonist --threads 1 --size 520Mi >/dev/null & pid=$!;;
    esac
    sleep 1
    echo "$rep $what $(count)"
    [ -n "$pid" ] && kill $pid && wait $pid 2>/dev/null
  done
done
