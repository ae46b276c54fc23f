"""What benchmarks/run_datapath.py and run_multihost.py share: waiting for a
quiet machine, and reading a contender's output (datapath_bench,
mpi_allreduce and gloo_allreduce print the same columns, then "cpu S_MiB
MS" and "link S_MiB RANK RX TX" lines; benchmarks/bench_probe.h)."""
import re
import time

ROW = re.compile(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)"
                 r"(?:\s+(\d+)\s+(\d+))?(?:\s+push ([0-9.]+) wait ([0-9.]+) pull ([0-9.]+))?"
                 r"(?:\s+update ([0-9.]+))?\s*$")

CPU = re.compile(r"^cpu (\d+) ([0-9.]+)\s*$")
LINK = re.compile(r"^link (\d+) (\d+) (-?[0-9.]+) (-?[0-9.]+)\s*$")


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v), v[3] + v[4]  # total, idle + iowait


def wait_quiet(max_s, need=3):
    """Blocks until `need` consecutive 1 s windows were >= 90 % idle; returns
    (quiet, idle % of the last window, seconds waited)."""
    start, ok, idle = time.time(), 0, 0
    while True:
        t0, i0 = cpu_times()
        time.sleep(1)
        t1, i1 = cpu_times()
        idle = 100 * (i1 - i0) // max(1, t1 - t0)
        ok = ok + 1 if idle >= 90 else 0
        if ok >= need:
            return True, idle, time.time() - start
        if time.time() - start >= max_s:
            return False, idle, time.time() - start


def parse(out, calls=None, phases=None, cpu=None, link=None):
    """{size_mib: median step ms} from a contender's table; datapath_bench's
    control-RPC counts (shard, registry) and phases (push, wait, pull ms) per
    size go into `calls` and `phases`; every contender's CPU per step (ms,
    all its processes) into `cpu`, and its per-rank device bytes per step
    into `link` ({size: {rank: (rx, tx)}})."""
    rows = {}
    for line in out.splitlines():
        c = CPU.match(line)
        if c and cpu is not None:
            cpu[int(c.group(1))] = float(c.group(2))
        k = LINK.match(line)
        if k and link is not None:
            link.setdefault(int(k.group(1)), {})[int(k.group(2))] = (float(k.group(3)),
                                                                   float(k.group(4)))
        m = ROW.match(line)
        if m:
            rows[int(m.group(1))] = float(m.group(2))
            if m.group(7) is not None and calls is not None:
                calls[int(m.group(1))] = (int(m.group(7)), int(m.group(8)))
            if m.group(9) is not None and phases is not None:
                update = float(m.group(12)) if m.group(12) is not None else float("nan")
                phases[int(m.group(1))] = tuple(float(m.group(k)) for k in (9, 10, 11)) + (update,)
    return rows
