import os, sys, time, signal
root = sys.argv[1]
n = int(sys.argv[2]); rate = float(sys.argv[3])  # reads of every cgroup per second
dirs = []
for i in range(n):
    d = os.path.join(root, "w%03d" % i)
    os.makedirs(d, exist_ok=True)
    dirs.append(d)
def stop(*_):
    for d in dirs:
        try: os.rmdir(d)
        except OSError: pass
    try: os.rmdir(root)
    except OSError: pass
    sys.exit(0)
signal.signal(signal.SIGTERM, stop); signal.signal(signal.SIGINT, stop)
reads = 0
while True:
    t0 = time.monotonic()
    for d in dirs:
        with open(d + "/memory.stat", "rb") as f: f.read()
        with open(d + "/memory.usage_in_bytes", "rb") as f: f.read()
        reads += 1
    with open("/sys/fs/cgroup/memory/memory.stat", "rb") as f: f.read()
    time.sleep(max(0, 1.0/rate - (time.monotonic() - t0)))
