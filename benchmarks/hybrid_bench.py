#!/usr/bin/python3
"""Step time of the same two transformer blocks (examples/hybrid_attention.py)
trained with 4 worker processes split four ways, in one run:

  DP4 plain    tessel.torch data parallelism alone (tt.init(), zero2): THE
               BASELINE (the ratio column).
  DP4          the same through tessel.torch.parallel (tensor_parallel=1,
               pipeline_parallel=1): what the hybrid machinery costs by itself.
  DP2xTP2      2 replicas, heads and MLP split over 2 tensor ranks (4
               tensor-parallel sums per block and micro-batch, forward and
               backward).
  PP2xDP2 M=m  2 replicas of 2 pipeline stages (one block each), 1F1B over m
               micro-batches.
  single       one process, the dense model on the whole batch, no Tessel:
               the compute of a step on one core.

Every contender trains the same global batch (--rows rows of --seq tokens)
with SGD under tessel-launch (2 shard servers, one BLAS thread per process),
and reports rank 0's mean step time after --warmup steps; the summary is the
median over --repeats runs, contenders rotated each repeat. The machine's
cores are shared by the 4 workers and the 2 servers: on a 2-core machine
tensor parallelism cannot win (its point is a model too big for one device);
the table shows its communication cost.

Usage: bazel run //benchmarks:hybrid_bench -- [--repeats=3] [--steps=30]
         [--embed=128 --heads=8 --hidden=512 --seq=32 --rows=32]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

CONTENDERS = {  # name -> (tp, pp, micro-batches, plain)
    "DP4 plain": (1, 1, 1, True),
    "DP4": (1, 1, 1, False),
    "DP2xTP2": (2, 1, 1, False),
    "PP2xDP2 M=2": (1, 2, 2, False),
    "PP2xDP2 M=4": (1, 2, 4, False),
}


def runfile(rel):
    for root in (os.environ.get("RUNFILES_DIR"), os.path.join(sys.argv[0] + ".runfiles")):
        if root and os.path.exists(os.path.join(root, "tessel", rel)):
            return os.path.join(root, "tessel", rel)
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", rel)


def run_tessel(args, name, example, launch):
    tp, pp, micro, plain = CONTENDERS[name]
    cmd = [launch, "--nproc_per_node=4", "--servers=2", f"--job=hb{abs(hash(name)) % 10000}",
           "--timeout_s=600", "--", "/usr/bin/python3", example, f"--tp={tp}", f"--pp={pp}",
           f"--micro_batches={micro}", f"--steps={args.steps}", f"--warmup={args.warmup}",
           f"--embed={args.embed}", f"--heads={args.heads}", f"--hidden={args.hidden}",
           f"--seq={args.seq}", f"--rows={args.rows}", "--log_every=1000000"] + \
        (["--plain"] if plain else [])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=700).stdout
    m = re.search(r"([\d.]+) ms/step", out)
    if not m:
        print(out[-3000:])
        raise SystemExit(f"{name}: no step time in the output")
    return float(m.group(1))


def run_single(args, example):
    sys.path.insert(0, os.path.dirname(example))
    import torch
    from torch.nn import functional as F
    import hybrid_attention as ha
    torch.set_num_threads(1)
    model = ha.make_model(0, args.embed, args.heads, args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times = []
    for step in range(args.steps):
        x, y = ha.batch(step, args.rows, args.seq, args.embed)
        t = time.monotonic()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.monotonic() - t)
    return 1000 * statistics.mean(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--embed", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--example", default=runfile("examples/hybrid_attention.py"))
    ap.add_argument("--launch", default=runfile("tools/tessel-launch"))
    args = ap.parse_args()
    names = list(CONTENDERS) + ["single"]
    results = {n: [] for n in names}
    for r in range(args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            ms = run_single(args, args.example) if name == "single" else \
                run_tessel(args, name, args.example, args.launch)
            results[name].append(ms)
            print(f"repeat {r + 1}: {name}: {ms:.2f} ms/step", flush=True)
    params = 2 * (4 * (args.embed * args.embed + args.embed) + 4 * args.embed +
                  2 * args.embed * args.hidden + args.hidden + args.embed)
    print(f"\ntwo blocks: embed {args.embed}, {args.heads} heads, MLP {args.hidden}, "
          f"{params} parameters; global batch {args.rows} x {args.seq} tokens; SGD; "
          f"{args.steps - args.warmup} timed steps, median of {args.repeats} repeats")
    base = statistics.median(results["DP4 plain"])
    print(f"{'contender':<14} {'ms/step':>9} {'vs DP4 plain':>13}   runs")
    for name in names:
        med = statistics.median(results[name])
        print(f"{name:<14} {med:9.2f} {med / base:12.2f}x   "
              + ", ".join(f"{v:.1f}" for v in results[name]))


if __name__ == "__main__":
    main()
