"""What the benchmark drivers share.

All of them (run_datapath.py, run_multihost.py, e2e_mlp.py, zoo_bench.py):
waiting for a quiet machine (wait_quiet). run_datapath.py and run_multihost.py:
reading a contender's output (datapath_bench, mpi_allreduce and gloo_allreduce
print the same columns, then "cpu S_MiB MS" and "link S_MiB RANK RX TX" lines;
benchmarks/bench_probe.h). e2e_mlp.py and zoo_bench.py, which time torch
training steps of tessel.torch against torch DDP: one BLAS thread per process,
the timed step loop, the slower rank's time over gloo or over a Tessel worker,
a free port, torch's banner line and a run's line of step times. torch is
imported only by the functions that use it (run_datapath and run_multihost do
not need it).
"""
import os
import re
import socket
import statistics
import time

ROW = re.compile(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)"
                 r"(?:\s+(\d+)\s+(\d+))?(?:\s+push ([0-9.]+) wait ([0-9.]+) pull ([0-9.]+))?"
                 r"(?:\s+update ([0-9.]+))?\s*$")

CPU = re.compile(r"^cpu (\d+) ([0-9.]+)\s*$")
# "p90 S MS": the 90th percentile of a run's step times, nearest rank (the step
# at index ceil(0.9 n) - 1 of the sorted n; with 10 steps the 9th fastest).
P90 = re.compile(r"^p90 (\d+) ([0-9.]+)\s*$")
LINK = re.compile(r"^link (\d+) (\d+) (-?[0-9.]+) (-?[0-9.]+)\s*$")


def build_gloo(src, out, ddp_update_lib=None):
    """Builds gloo_allreduce.cc (Gloo's C++ allreduce baseline) into `out`,
    installing Debian's libgloo-dev first if it is missing; with
    `ddp_update_lib` (bazel-bin/benchmarks/libtessel_ddp_update.so) it also gets the
    --update=sgd|adam modes (benchmarks/ddp_update.h)."""
    import subprocess
    if not os.path.exists("/usr/include/gloo/allreduce.h"):
        print("# installing libgloo-dev (Gloo's C++ library) for the gloo baseline", flush=True)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "libgloo-dev"],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(src)))
    cmd = ["g++", "-O2", "-std=c++17", "-I", root, "-o", out, src]
    if ddp_update_lib:
        lib = os.path.abspath(ddp_update_lib)
        cmd[1:1] = ["-DTESSEL_DDP_UPDATE"]
        cmd += [lib, "-Wl,-rpath," + os.path.dirname(lib)]
    subprocess.run(cmd + ["-lgloo", "-lpthread"], check=True)


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


def parse(out, calls=None, phases=None, cpu=None, link=None, p90=None):
    """{size_mib: median step ms} from a contender's table; datapath_bench's
    control-RPC counts (shard, registry) and phases (push, wait, pull ms) per
    size go into `calls` and `phases`; every contender's CPU per step (ms,
    all its processes) into `cpu`, and its per-rank device bytes per step
    into `link` ({size: {rank: (rx, tx)}}); the p90 of its step times (ms)
    into `p90`."""
    rows = {}
    for line in out.splitlines():
        c = CPU.match(line)
        if c and cpu is not None:
            cpu[int(c.group(1))] = float(c.group(2))
        q = P90.match(line)
        if q and p90 is not None:
            p90[int(q.group(1))] = float(q.group(2))
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


# --- torch training steps (e2e_mlp.py, zoo_bench.py) ---------------------------

def one_thread():
    """This process computes on one thread (torch's intra-op pool)."""
    import torch
    torch.set_num_threads(1)


def one_thread_env():
    """os.environ with one BLAS/OpenMP thread, for a contender's processes."""
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (gloo's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_steps(step, steps, warm, barrier=None, slowest=None, after=None):
    """Per-step seconds of `step()` after `warm` warm-up steps: barrier() (not
    timed), then the step; after() (not timed) once it is timed; with
    `slowest`, the slower rank's time (slowest(dt) is collective)."""
    out = []
    for i in range(warm + steps):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        if after:
            after()
        if slowest:
            dt = slowest(dt)
        if i >= warm:
            out.append(dt)
    return out


def gloo_slowest(dt):
    """The largest of the ranks' `dt` (torch.distributed's group; collective)."""
    import torch
    import torch.distributed as dist
    t = torch.tensor([dt], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def tessel_sync(worker, rank, world):
    """(barrier, slowest) over a tessel.Worker's job: barrier() returns once every
    rank called it; slowest(dt) is the largest of the ranks' dt."""
    import numpy as np
    one = np.zeros(1, dtype=np.float32)

    def barrier():
        worker.all_reduce_mean(one)

    def slowest(dt):
        v = np.zeros(world, dtype=np.float32)
        v[rank] = dt
        worker.all_reduce_mean(v)  # each rank's dt / world
        return float(v.max()) * world

    return barrier, slowest


def torch_banner(name):
    """Prints "NAME: torch VERSION, BLAS LIBRARIES" (the BLAS torch loaded)."""
    import torch
    blas = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if "blas" in line and ".so" in line})
    print(f"{name}: torch {torch.__version__}, BLAS {','.join(blas) or '?'}")


def times_line(ts, quiet, idle):
    """A run's step times (seconds) as "median M ms  min A  max B  (n=N)", and
    NOT-QUIET with the idle % when the machine was not quiet before it."""
    flag = "" if quiet else f"  NOT-QUIET (idle {idle:.0f}%)"
    return (f"median {statistics.median(ts) * 1e3:8.1f} ms  min {min(ts) * 1e3:8.1f}  "
            f"max {max(ts) * 1e3:8.1f}  (n={len(ts)}){flag}")
