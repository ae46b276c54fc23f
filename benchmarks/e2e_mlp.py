#!/usr/bin/python3
"""End to end: one training step of a 25.2M-parameter MLP through Tessel and
through torch DDP (gloo), in the same run, and each one's exposed
communication.

The model, batch and update are docs/machine.md's torch DDP step: Linear(2048,
8192) -> ReLU -> Linear(8192, 1024), float32 (25,175,040 parameters, 100.7 MB
of gradients), MSE loss on a fixed random batch of 32 per worker, SGD
(lr 1e-3), one BLAS thread per process. A step is zero_grad + forward +
backward + the optimizer step (for Tessel: pushes overlapping backward from
autograd hooks, the update on the shard servers or, for ddp, on the workers,
and the pull into the model).

Contenders, each run after a quiet machine (>= 90 % idle for 3 one-second
windows, or --quiet_max_s: flagged NOT-QUIET), in an order rotated every
repeat:
  single        one process, the whole step with no communication: the
                compute a step costs (docs/machine.md's A).
  torch-ddp     torch DistributedDataParallel over gloo (TCP on lo), 2
                processes, default 25 MiB buckets (docs/machine.md's C).
  tessel-<s>    tessel.torch's DistributedOptimizer, strategy s (zero2, ddp,
                ...), 2 workers and 2 shard servers under tessel-launch (UCX
                shared memory).
Every side times a step the same way: a barrier (not timed), then the step;
the step's time is the slower rank's. A run reports its median over --steps
steps after 3 warm-up steps; the summary gives min / median / max of the
per-run medians, and exposed communication = a contender's median step -
single's median step. The last lines compare exposed communication:
  exposed  tessel-zero2   41.2 ms vs torch-ddp   88.0 ms  ratio 0.47
(ratio = Tessel's exposed / torch DDP's: below 1, Tessel exposes less; the
target of issue 14 is <= 0.50).

Usage: bazel run //benchmarks:e2e_mlp -- [--repeats=3] [--steps=15]
         [--strategies=zero2,ddp] [--quiet_max_s=120]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_common import (free_port, gloo_slowest, one_thread, one_thread_env, run_steps,
                          tessel_sync, times_line, torch_banner, wait_quiet)

D_IN, D_HID, D_OUT, BATCH, LR, WARM = 2048, 8192, 1024, 32, 1e-3, 3
WORKERS, SERVERS = 2, 2


# --- the step, shared by every contender ------------------------------------

def make_model():
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_IN, D_HID), nn.ReLU(), nn.Linear(D_HID, D_OUT))


def batch(rank):
    import torch
    g = torch.Generator().manual_seed(1 + rank)
    return torch.randn(BATCH, D_IN, generator=g), torch.randn(BATCH, D_OUT, generator=g)


def train(model, opt, x, y, steps, barrier=None, slowest=None):
    """Per-step seconds (after WARM warm-up steps) of zero_grad, forward,
    backward and the optimizer step (bench_common.run_steps)."""
    import torch.nn as nn
    lossf = nn.MSELoss()

    def step():
        opt.zero_grad()
        lossf(model(x), y).backward()
        opt.step()

    return run_steps(step, steps, WARM, barrier=barrier, slowest=slowest)


def child_single(args):
    import torch
    one_thread()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = batch(0)
    return train(model, opt, x, y, args.steps)


def ddp_rank(rank, port, steps, out_path):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    one_thread()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORKERS)
    model = nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = batch(rank)
    ts = train(model, opt, x, y, steps, barrier=dist.barrier, slowest=gloo_slowest)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(ts, f)
    dist.barrier()
    dist.destroy_process_group()


def child_torch_ddp(args):
    import torch.multiprocessing as mp
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ts.json")
        mp.start_processes(ddp_rank, args=(port, args.steps, out), nprocs=WORKERS, join=True,
                           start_method="spawn")
        with open(out) as f:
            return json.load(f)


def child_tessel_worker(args):
    """One rank under tessel-launch; rank 0 writes the step times to args.out."""
    import torch
    import tessel.torch as tt
    one_thread()
    tt.init()
    model = make_model()
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model=model,
                                  strategy=args.strategy)
    worker = opt._groups[0].worker  # the job's worker: barrier and max over ranks
    rank, world = tt.rank(), tt.size()
    x, y = batch(rank)
    barrier, slowest = tessel_sync(worker, rank, world)
    ts = train(model, opt, x, y, args.steps, barrier=barrier, slowest=slowest)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(ts, f)
    opt.close()
    tt.shutdown()
    return None


# --- the driver ---------------------------------------------------------------

def run_contender(args, name, run_dir):
    """Runs one contender; returns its per-step seconds."""
    here = os.path.abspath(__file__)
    env = one_thread_env()
    out = os.path.join(run_dir, f"{name}.json")
    if name.startswith("tessel-"):
        strategy = name[len("tessel-"):]
        if args.python_root:  # tessel-launch puts its own first anyway
            env["PYTHONPATH"] = args.python_root + (":" + env["PYTHONPATH"]
                                                    if env.get("PYTHONPATH") else "")
        logs = os.path.join(run_dir, f"{name}-logs")
        cmd = [args.launch, f"--nproc_per_node={WORKERS}", f"--servers={SERVERS}",
               f"--job=e2e-{strategy}", "--timeout_s=600", f"--run_dir={logs}", "--",
               "/usr/bin/python3", here, "--child=tessel-worker", f"--strategy={strategy}",
               f"--steps={args.steps}", f"--out={out}"]
    else:
        cmd = ["/usr/bin/python3", here, f"--child={name}", f"--steps={args.steps}",
               f"--out={out}"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if run.returncode != 0 or not os.path.exists(out):
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        raise SystemExit(f"e2e_mlp: {name} failed (exit {run.returncode}); command: "
                         + " ".join(cmd))
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", default="zero2", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--launch", default="", help="tessel-launch (the Bazel target sets it)")
    ap.add_argument("--python_root", default="",
                    help="folder holding the tessel package (default: tessel-launch's own)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15, help="timed steps per run (after 3 warm-up)")
    ap.add_argument("--strategies", default="zero2,ddp",
                    help="Tessel strategies to run (zero1, zero2, ddp, fsdp)")
    ap.add_argument("--quiet_max_s", type=float, default=120)
    args = ap.parse_args()

    if args.child:
        ts = {"single": child_single, "torch-ddp": child_torch_ddp,
              "tessel-worker": child_tessel_worker}[args.child](args)
        if ts is not None:
            with open(args.out, "w") as f:
                json.dump(ts, f)
        return

    if not args.launch or not os.path.exists(args.launch):
        raise SystemExit("e2e_mlp: --launch=PATH to tessel-launch is required "
                         "(bazel run //benchmarks:e2e_mlp sets it)")
    torch_banner("e2e_mlp")
    contenders = ["single", "torch-ddp"] + [f"tessel-{s}" for s in args.strategies.split(",") if s]
    print(f"e2e_mlp: {D_IN}-{D_HID}-{D_OUT} MLP (25,175,040 params, 100.7 MB fp32), batch "
          f"{BATCH} per worker, SGD lr {LR}, {WORKERS} workers, {SERVERS} shard servers, 1 BLAS "
          f"thread each; {args.repeats} repeats x {args.steps} steps (+{WARM} warm-up); "
          f"{os.cpu_count()} cores", flush=True)
    medians = {c: [] for c in contenders}
    not_quiet = 0
    with tempfile.TemporaryDirectory(prefix="e2e_mlp-") as run_dir:
        for rep in range(args.repeats):
            order = contenders[rep % len(contenders):] + contenders[:rep % len(contenders)]
            for c in order:
                quiet, idle, _ = wait_quiet(args.quiet_max_s)
                not_quiet += 0 if quiet else 1
                ts = run_contender(args, c, run_dir)
                medians[c].append(statistics.median(ts) * 1e3)
                print(f"repeat {rep + 1}  {c:<14} {times_line(ts, quiet, idle)}", flush=True)
    print(f"\nsummary: median step over the {args.repeats} runs' medians, ms "
          f"(min / median / max); {not_quiet} run(s) NOT-QUIET")
    single = statistics.median(medians["single"])
    for c in contenders:
        m = medians[c]
        med = statistics.median(m)
        exposed = "" if c == "single" else f"  exposed communication {med - single:7.1f} ms"
        print(f"  {c:<14} {min(m):8.1f} / {med:8.1f} / {max(m):8.1f}{exposed}")
    ddp_exposed = statistics.median(medians["torch-ddp"]) - single
    for c in contenders:
        if not c.startswith("tessel-"):
            continue
        exposed = statistics.median(medians[c]) - single
        ratio = exposed / ddp_exposed if ddp_exposed > 0 else float("nan")
        print(f"exposed  {c:<14} {exposed:6.1f} ms vs torch-ddp {ddp_exposed:6.1f} ms  "
              f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
