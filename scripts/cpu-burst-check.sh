#!/bin/bash
# What CFS burst does, on this host (as root, cgroup v1, about 25 s): a bursty process (80 ms
# of CPU, then 120 ms asleep: 40% of a CPU on average) under a 50% quota is throttled on its
# spikes without a burst and not with a burst of half the quota (cpu.cfs_burst_us 50000), the
# value cpu.burstPercent 50 gives it. It makes and removes its own cgroup.
set -e
cg=/sys/fs/cgroup/cpu/tidal-burst-measure-$$
mkdir $cg; trap 'kill $pid 2>/dev/null; sleep 0.2; rmdir $cg' EXIT
echo 100000 > $cg/cpu.cfs_period_us; echo 20480 > $cg/cpu.shares; echo 50000 > $cg/cpu.cfs_quota_us
python3 -c '
import time
while True:
    t=time.process_time()
    while time.process_time()-t<0.08: pass
    time.sleep(0.12)' &
pid=$!; echo $pid > $cg/cgroup.procs
for b in 0 50000 0 50000; do
  echo $b > $cg/cpu.cfs_burst_us; sleep 1
  t0=$(awk '/^throttled_time/{print $2}' $cg/cpu.stat); n0=$(awk '/^nr_throttled/{print $2}' $cg/cpu.stat)
  sleep 5
  t1=$(awk '/^throttled_time/{print $2}' $cg/cpu.stat); n1=$(awk '/^nr_throttled/{print $2}' $cg/cpu.stat)
  echo "burst ${b}us: throttled $((n1-n0)) periods, $(( (t1-t0)/1000000 )) ms in 5 s"
done
