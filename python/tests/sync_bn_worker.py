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
import torch

import bn_model
import rank_lib
import tessel.torch as tt

steps, outdir, combos = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
r = rank_lib.Rank()
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
tt.shutdown()
