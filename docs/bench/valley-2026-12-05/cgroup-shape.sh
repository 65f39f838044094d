#!/bin/bash
# Which cgroup shape hurts the online server under the idle class? One variant per call.
# usage: run.sh VARIANT   (flat | tidal | tidal-nosleepers | tidal-flatchild)
set -u
V=$1; BIN=/tmp/tidal-bin; C=/sys/fs/cgroup/cpu; R=$C/hier-$V-$$
mk(){ mkdir -p "$R/$1"; }
case $V in
flat) mk online; mk offline; echo 1 > $R/offline/cpu.idle; mk offline/burner; mk offline/antagonist
      ON=online; BU=offline/burner; AN=offline/antagonist;;
tidal*) mk tidal/shared/server; mk tidal/reclaimed; echo 1 > $R/tidal/reclaimed/cpu.idle
      mk tidal/reclaimed/burner; mk tidal/reclaimed/antagonist
      if [ $V != tidal-flatchild ]; then echo 1 > $R/tidal/reclaimed/burner/cpu.idle; echo 1 > $R/tidal/reclaimed/antagonist/cpu.idle; fi
      if [ $V != tidal-nosleepers ]; then for i in $(seq 100); do mk tidal/shared/s$i; mk tidal/reclaimed/r$i; echo 1 > $R/tidal/reclaimed/r$i/cpu.idle; done; fi
      ON=tidal/shared/server; BU=tidal/reclaimed/burner; AN=tidal/reclaimed/antagonist;;
esac
mk loadgen; echo 10240 > $R/loadgen/cpu.shares
run_in(){ local cg=$1; shift; ( echo $BASHPID > $R/$cg/cgroup.procs; exec "$@" ) & }
PORT=$((20000 + $$ % 10000))
run_in $ON $BIN workload server --addr 127.0.0.1:$PORT --work 1.5ms >/dev/null 2>&1; S=$!
sleep 2
run_in $BU $BIN workload burner --threads 2 >/dev/null 2>&1; B=$!
run_in $AN $BIN workload antagonist --threads 1 --size 520Mi >/dev/null 2>&1; A=$!
sleep 3
( echo $BASHPID > $R/loadgen/cgroup.procs; exec $BIN workload loadgen --url http://127.0.0.1:$PORT/work --phases valley:20s@150 ) > /tmp/hier/$V.out 2>&1
kill $B $A $S 2>/dev/null; wait 2>/dev/null
sleep 0.5
find $R -depth -type d -exec rmdir {} \; 2>/dev/null
tail -3 /tmp/hier/$V.out
