#!/usr/bin/env python3
"""Charge the Go server's run-queue waits to what ran on its CPU meanwhile.

Usage: perf sched timehist -i OUT.perf/sched.data > th.txt
       sched-blame.py th.txt OUT.perf/procs.txt [min-wait-ms]

procs.txt is `pgrep -af tidal-bin` taken during the run (sched-run.sh writes it): it names
the benchmark's workloads (server, burner, antagonist, loadgen) and the agent by pid.
"""
import collections
import re
import sys

ROW = re.compile(r'^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.+?)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)')
TASK = re.compile(r'(.*)\[(\d+)(?:/(\d+))?\]')


def roles(procs_path):
    """pid -> role: the workload's kind (server, burner, ...), agent, or the program's name."""
    out = {}
    for line in open(procs_path):
        fields = line.split()
        if len(fields) < 2:
            continue
        pid, argv = fields[0], fields[1:]
        if argv[0].endswith('tidal-bin') and len(argv) > 2 and argv[1] == 'workload':
            out[pid] = argv[2]
        elif argv[0].endswith('tidal-bin') and len(argv) > 1 and argv[1] == 'agent':
            out[pid] = 'agent'
        elif not argv[0].endswith('tidal-bin'):
            out[pid] = argv[0].split('/')[-1]
    return out


def rows(timehist_path, role):
    """(switch-out ms, cpu, who, sched delay ms, run ms) per timehist line."""
    for line in open(timehist_path):
        m = ROW.match(line)
        if not m:
            continue
        t, cpu, task, _wait, delay, run = m.groups()
        tm = TASK.match(task.strip())
        pid = (tm.group(3) or tm.group(2)) if tm else ''
        who = role.get(pid) or (tm.group(1) if tm else task.strip())
        yield float(t) * 1000, int(cpu), who, float(delay), float(run)


def main():
    role = roles(sys.argv[2])
    min_wait = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    all_rows = list(rows(sys.argv[1], role))
    by_cpu = collections.defaultdict(list)
    for r in all_rows:
        by_cpu[r[1]].append(r)
    blame, count, total = collections.Counter(), 0, 0.0
    for end, cpu, who, delay, run in all_rows:
        if who != 'server' or delay < min_wait:
            continue
        count, total = count + 1, total + delay
        woke, started = end - run - delay, end - run
        for o_end, _, o_who, _, o_run in by_cpu[cpu]:
            overlap = min(o_end, started) - max(o_end - o_run, woke)
            if overlap > 0:
                blame[o_who] += overlap
    print(f'server waits of at least {min_wait} ms: {count}, {total:.1f} ms in all')
    for who, ms in blame.most_common(10):
        print(f'  {who:30s} {ms:8.1f} ms')


if __name__ == '__main__':
    main()
