"""One rank of the BatchNorm integration test: trains bn_model.Net through
tessel.torch on this rank's half of each global batch, once per MODE:STRATEGY
given, each as its own job. Modes: sync (convert_sync_batchnorm), bcast (plain
BatchNorm, broadcast_buffers=True, the default), local (plain BatchNorm,
broadcast_buffers=False). Every rank saves its BatchNorm statistics after each
step and its num_batches_tracked; rank 0 saves the final parameters.

Usage (under tessel-launch): sync_bn_worker.py STEPS OUTDIR MODE:STRATEGY...
"""
import os
import sys
import time

import numpy as np

import bn_model
import rank_lib
import tessel.torch as tt



def check_broadcast(worker, checks):
    """worker.broadcast: bytes of the root, exactly; bad input refused on every rank."""
    mine = np.array([r.rank + 0.5, np.nan, -0.0, 3e38], dtype=np.float32)
    mine.view(np.uint32)[1] = 0x7fc00000 + 17 + r.rank  # a NaN payload of this rank
    big = np.array([2**62 + 7 * r.rank, -1 - r.rank, 5], dtype=np.int64)
    want_f, want_i = mine.copy(), big.copy()
    if r.rank != 1:
        want_f = np.array([1.5, np.nan, -0.0, 3e38], dtype=np.float32)
        want_f.view(np.uint32)[1] = 0x7fc00000 + 18
        want_i = np.array([2**62 + 7, -2, 5], dtype=np.int64)
    worker.broadcast(mine, root=1)
    worker.broadcast(big, root=1)
    checks.check(mine.tobytes() == want_f.tobytes() and big.tobytes() == want_i.tobytes(),
                 "broadcast(root=1): rank 1's float32 bits (NaN payload, -0.0) and int64s")
    frozen = np.zeros(4, dtype=np.float32)
    frozen.setflags(write=False)
    checks.raises(ValueError, "writeable", lambda: worker.broadcast(frozen))
    checks.raises(ValueError, "C-contiguous",
                  lambda: worker.broadcast(np.zeros((4, 4), dtype=np.float32)[:, 0]))
    checks.raises(ValueError, "dtype kind 'O'",
                  lambda: worker.broadcast(np.array([None, 1], dtype=object)))
    checks.raises(ValueError, "root 2 is outside [0, 2)",
                  lambda: worker.broadcast(np.zeros(4, dtype=np.float32), root=2))
    checks.raises(ValueError, "root -1 is outside",
                  lambda: worker.broadcast(np.zeros(4, dtype=np.float32), root=-1))


steps, outdir, combos = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
r = rank_lib.Rank()
checks = rank_lib.Checks()
per = bn_model.BATCH // r.world
rows = slice(r.rank * per, (r.rank + 1) * per)
for combo in combos:
    mode, strategy = combo.split(":")
    model = bn_model.Net()
    if mode == "sync":
        model = tt.convert_sync_batchnorm(model)
    opt = tt.DistributedOptimizer(bn_model.make_optimizer(model), model=model,
                                  strategy=strategy, bucket_bytes=1024,
                                  job=f"{r.cfg['job']}-{mode}-{strategy}",
                                  broadcast_buffers=mode != "local")
    if combo == combos[0]:
        check_broadcast(opt.workers[0], checks)
    stats, times = [], []
    for step in range(steps):
        start = time.perf_counter()
        x, y = bn_model.batch(step)
        opt.zero_grad()
        r.loss_fn(model(x[rows]), y[rows]).backward()
        opt.step()
        times.append(time.perf_counter() - start)
        stats.append(bn_model.flat_stats(model).numpy())
    name = f"{mode}-{strategy}"
    np.save(os.path.join(outdir, f"{name}-stats-r{r.rank}.npy"), np.stack(stats))
    np.save(os.path.join(outdir, f"{name}-tracked-r{r.rank}.npy"),
            np.array(bn_model.batches_tracked(model)))
    with opt.gathered():
        params = bn_model.flat_params(model).numpy().copy()
    if r.rank == 0:
        np.save(os.path.join(outdir, f"{name}-params.npy"), params)
        # The first step makes the helper reduce jobs (one per vector size).
        print(f"{combo}: {steps} steps, first {times[0] * 1e3:.2f} ms, then "
              f"{np.median(times[1:]) * 1e3:.2f} ms/step (median), {opt._buffers.syncs} buffer "
              f"broadcasts", flush=True)
    want = 0 if mode == "local" else steps + 1  # construction, then every step
    assert opt._buffers.syncs == want, (combo, opt._buffers.syncs)
    opt.close()
    if mode == "sync":  # unbound now, in a job of 2 ranks
        checks.raises(RuntimeError, "before a DistributedOptimizer bound it",
                      lambda: model(bn_model.batch(0)[0][rows]))
if r.rank == 0:
    print(f"rank 0: {checks.passed} checks passed", flush=True)
tt.shutdown()
