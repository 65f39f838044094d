import os, sys, time, signal
# mode memory: memory.stat + memory.usage_in_bytes of n memory cgroups; memory+root: the root's
# memory.stat too (run A); cpu: cpuacct.stat + cpuacct.usage of n cpuacct cgroups (the same shape
# of work, no memcg). Usage: reader.py MODE ROOT N READS_PER_SECOND
mode, root, n, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
files = ("cpuacct.stat", "cpuacct.usage") if mode == "cpu" else ("memory.stat", "memory.usage_in_bytes")
dirs = []
for i in range(n):
    d = os.path.join(root, "w%03d" % i); os.makedirs(d, exist_ok=True); dirs.append(d)
def stop(*_):
    for d in dirs:
        try: os.rmdir(d)
        except OSError: pass
    try: os.rmdir(root)
    except OSError: pass
    sys.exit(0)
signal.signal(signal.SIGTERM, stop); signal.signal(signal.SIGINT, stop)
while True:
    t0 = time.monotonic()
    for d in dirs:
        for f in files:
            with open(d + "/" + f, "rb") as fh: fh.read()
    if mode == "memory+root":
        with open("/sys/fs/cgroup/memory/memory.stat", "rb") as fh: fh.read()
    time.sleep(max(0, 1.0/rate - (time.monotonic() - t0)))
