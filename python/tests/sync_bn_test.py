"""Buffers and BatchNorm through a real cluster (tessel-launch, 2 workers, 2
shard servers), bn_model.Net (BatchNorm2d twice, BatchNorm1d) on half-batches:

  sync   convert_sync_batchnorm'ed, with ddp, zero2 and fsdp, ends where torch's
         single-process training with plain BatchNorm on the whole batches
         ends: parameters and running statistics (after every step) within 1e-5
         of the largest magnitude, num_batches_tracked equal, both ranks'
         statistics bitwise equal.
  bcast  plain BatchNorm, broadcast_buffers=True (the default), with ddp, zero2
         and fsdp: after every step rank 1's buffers are rank 0's bitwise, and
         parameters and statistics are torch DDP's (each rank normalizes with
         its own half; the gradients' mean; rank 0's running statistics):
         within 1e-5 of torch doing just that in one process.
  local  the same with broadcast_buffers=False: each rank keeps its own
         statistics (rank 1's differ from rank 0's and are its own half's).
And the binding's worker.broadcast: rank 1's bytes exactly (a NaN's payload,
int64s), ValueError for a read-only, strided or object array and a root
outside the world; an unbound SyncBatchNorm refuses to train in a job of 2.

Usage: sync_bn_test.py --launch=tessel-launch --worker=sync_bn_worker.py
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bn_model  # noqa: E402
import driver  # noqa: E402

TOLERANCE = 1e-5
WORLD = 2
COMBOS = ["sync:ddp", "sync:zero2", "sync:fsdp", "bcast:ddp", "bcast:zero2", "bcast:fsdp",
          "local:zero2"]


def reference_whole(steps):
    """Plain BatchNorm, one process, the whole batches: (params, stats per step, tracked)."""
    model = bn_model.Net()
    opt = bn_model.make_optimizer(model)
    stats = []
    for step in range(steps):
        x, y = bn_model.batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        stats.append(bn_model.flat_stats(model).numpy())
    return bn_model.flat_params(model).numpy(), np.stack(stats), bn_model.batches_tracked(model)


def reference_ranks(steps, broadcast):
    """torch DDP with plain BatchNorm, in one process: each rank's replica normalizes
    with its own half, the step takes the mean of their gradients, and (broadcast)
    every replica then holds rank 0's buffers. Returns (params, per rank: stats per
    step)."""
    replicas = [bn_model.Net() for _ in range(WORLD)]
    opt = bn_model.make_optimizer(replicas[0])
    per = bn_model.BATCH // WORLD
    stats = [[] for _ in range(WORLD)]
    for step in range(steps):
        x, y = bn_model.batch(step)
        grads = []
        for r, m in enumerate(replicas):
            m.zero_grad()
            rows = slice(r * per, (r + 1) * per)
            torch.nn.functional.cross_entropy(m(x[rows]), y[rows]).backward()
            grads.append([p.grad.clone() for p in m.parameters()])
        for i, p in enumerate(replicas[0].parameters()):
            p.grad = (grads[0][i] + grads[1][i]) / WORLD
        opt.step()
        for m in replicas[1:]:
            with torch.no_grad():
                for p, q in zip(m.parameters(), replicas[0].parameters()):
                    p.copy_(q)
                if broadcast:
                    for b, c in zip(m.buffers(), replicas[0].buffers()):
                        b.copy_(c)
        for r, m in enumerate(replicas):
            stats[r].append(bn_model.flat_stats(m).numpy())
    return bn_model.flat_params(replicas[0]).numpy(), [np.stack(s) for s in stats]


def rel(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--steps", type=int, default=bn_model.STEPS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = tempfile.mkdtemp(prefix="sync-bn-")
    text, secs = driver.launch(args.launch, "bn", ["/usr/bin/python3", args.worker,
                                                   str(args.steps), out] + COMBOS,
                               timeout_s=240)
    print(f"{len(COMBOS)} runs of {args.steps} steps in {secs:.1f} s")
    for line in text.splitlines():
        if " ms/step" in line or "checks passed" in line:
            print("  rank 0,", line)
    init = bn_model.flat_params(bn_model.Net()).numpy()
    whole = reference_whole(args.steps)
    ranks = {b: reference_ranks(args.steps, b) for b in (True, False)}
    # broadcast: 6 checks; an unbound SyncBatchNorm refusing: 2 (sync:ddp, sync:zero2).
    failures = [] if "rank 0: 9 checks passed" in text else ["rank 0's checks did not all run"]
    print(f"{'run':12} {'params':>9} {'stats':>9} {'moved':>7}  rank 1's statistics")
    for combo in COMBOS:
        mode, strategy = combo.split(":")
        name = f"{mode}-{strategy}"
        params = np.load(os.path.join(out, f"{name}-params.npy"))
        stats = [np.load(os.path.join(out, f"{name}-stats-r{r}.npy")) for r in range(WORLD)]
        tracked = [list(np.load(os.path.join(out, f"{name}-tracked-r{r}.npy")))
                   for r in range(WORLD)]
        if mode == "sync":
            want_params, want_stats, want_tracked = whole
            want_stats = [want_stats] * WORLD
        else:
            want_params, want_stats = ranks[mode == "bcast"]
            want_tracked = whole[2]
        d_params = rel(params, want_params)
        d_stats = max(rel(stats[r], want_stats[r]) for r in range(WORLD))
        moved = float(np.abs(want_params - init).max())
        same = all(np.array_equal(stats[0][s], stats[1][s]) for s in range(args.steps))
        if mode == "local":
            verdict = "its own" if not same else "RANK 0's"
        else:
            verdict = "rank 0's bitwise, every step" if same else "DIFFERENT"
        print(f"{combo:12} {d_params:9.3g} {d_stats:9.3g} {moved:7.3f}  {verdict}")
        if not d_params < TOLERANCE:
            failures.append(f"{combo}: parameters differ by {d_params:.3g} >= {TOLERANCE}")
        if not d_stats < TOLERANCE:
            failures.append(f"{combo}: running statistics differ by {d_stats:.3g} >= {TOLERANCE}")
        if moved < 1e-2:
            failures.append(f"{combo}: training did not move the parameters")
        if any(t != want_tracked for t in tracked):
            failures.append(f"{combo}: num_batches_tracked {tracked}, torch {want_tracked}")
        if (mode == "local") == same:
            failures.append(f"{combo}: rank 1's statistics: {verdict}")
    driver.finish(failures)


if __name__ == "__main__":
    main()
