"""One rank of the observability test: trains bn_model.Net with zero2 under
tessel-launch with $TESSEL_METRICS_ADDRESS and $TESSEL_TIMELINE set, reporting
each step's loss: steps 1..STEPS/2 through step(closure), the rest through
opt.report_loss(loss). Files in OUTDIR, the handshake with the driver:
  metrics-r<R>.txt   where rank R serves /metrics (opt.metrics_address)
  at-<K>             rank 0 finished step K = STEPS/2; it waits for seen-<K>
                     (the driver found step K's loss on the status page)
  losses.json        rank 0's reported {step: loss} (after the last step)
  done-r<R>          rank R trained every step; it waits for `finish`
Usage (under tessel-launch): observe_worker.py OUTDIR STEPS
"""
import json
import os
import sys
import time

import bn_model
import rank_lib
import tessel.torch as tt


def wait_for(path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"rank waited {timeout_s} s for {path}")
        time.sleep(0.02)


outdir, steps = sys.argv[1], int(sys.argv[2])
r = rank_lib.Rank()
assert r.cfg["metrics_address"] == "127.0.0.1:0" and "{rank}" in r.cfg["timeline"], r.cfg
model = bn_model.Net()
opt = tt.DistributedOptimizer(bn_model.make_optimizer(model), model=model, strategy="zero2",
                              bucket_bytes=1024)
with open(os.path.join(outdir, f"metrics-r{r.rank}.txt"), "w") as f:
    f.write(opt.metrics_address)
per = bn_model.BATCH // r.world
rows = slice(r.rank * per, (r.rank + 1) * per)
losses = {}
for step in range(steps):
    x, y = bn_model.batch(step)

    def closure():
        opt.zero_grad()
        loss = r.loss_fn(model(x[rows]), y[rows])
        loss.backward()
        return loss

    if step < steps // 2:
        loss = opt.step(closure)  # reports the closure's loss itself
    else:
        loss = closure()
        opt.step()
        opt.report_loss(loss)
    losses[opt.step_count] = float(loss)
    if r.rank == 0 and opt.step_count == steps // 2:
        open(os.path.join(outdir, f"at-{opt.step_count}"), "w").close()
        wait_for(os.path.join(outdir, f"seen-{opt.step_count}"))
if r.rank == 0:
    with open(os.path.join(outdir, "losses.json"), "w") as f:
        json.dump(losses, f)
open(os.path.join(outdir, f"done-r{r.rank}"), "w").close()
wait_for(os.path.join(outdir, "finish"))
if r.rank == 0:
    print(f"trained {steps} steps; metrics at {opt.metrics_address}", flush=True)
tt.shutdown()
