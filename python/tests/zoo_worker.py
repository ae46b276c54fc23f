"""One rank of the model zoo test: trains each case (zoo_models' grammar,
MODEL:STRATEGY:OPTIMIZER:ACCUMULATION) through tessel.torch on this rank's
slice of each micro-batch, each case as its own job, and after each step in
zoo_models.CHECKED measures how far its parameters (gathered) and the model's
buffers are from what the case's torch reference had there (REFDIR, which
zoo_test filled first). Writes OUTDIR/zoo-r<rank>.json: per case, per checked
step [params difference, buffers difference or null], the sha256 of the
final parameters and of the final buffers (the ranks compare them) and the
milliseconds per step.

Usage (under tessel-launch): zoo_worker.py REFDIR OUTDIR CASE...
"""
import hashlib
import json
import os
import sys
import time

import rank_lib
import tessel.torch as tt
import zoo_models as zm

refdir, outdir, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
r = rank_lib.Rank(batch=zm.BATCH)
features = zm.tessel_features()
results = {}
for case in cases:
    model_name, strategy, opt_name, accumulation = case.split(":")
    _, ref_tag = zm.reference_of(case)
    model = zm.make_model(model_name)
    if model_name == "resnet-syncbn":
        model = zm.convert_sync_batchnorm(model)
    # broadcast_buffers (default True where it exists) only where the case says so.
    extra = ({"broadcast_buffers": model_name == "resnet-bcast"}
             if features["broadcast_buffers"] else {})
    # The LM is small: several buckets still, so pushes overlap backward.
    bucket_bytes = 16 << 10 if model_name == "lm" else 4 << 20
    opt = tt.DistributedOptimizer(zm.OPTIMIZERS[opt_name](model), model=model,
                                  strategy=strategy, bucket_bytes=bucket_bytes,
                                  job=f"{r.cfg['job']}-{case.replace(':', '-')}", **extra)
    micro = list(zm.micro_batches(accumulation))
    result = {}
    elapsed = 0.0
    for step in range(1, zm.STEPS + 1):
        start = time.perf_counter()
        opt.zero_grad()
        for m in micro:
            inputs, targets = zm.batch(model_name, step - 1, m)
            inputs, targets = inputs[r.rows()], targets[r.rows()]
            if m < micro[-1]:  # torch DDP's accumulation: no exchange until the last
                with opt.no_sync():
                    zm.loss(model, inputs, targets).backward()
            else:
                zm.loss(model, inputs, targets).backward()
        opt.step()
        elapsed += time.perf_counter() - start
        if step in zm.CHECKED:
            with opt.gathered():
                params, buffers = zm.snapshot(model)
            want = zm.load_reference(refdir, ref_tag, step, zm.reference_rank(case, r.rank))
            result[f"s{step}"] = [zm.rel(params, want[0]), zm.rel(buffers, want[1])]
    result["params_sha"] = hashlib.sha256(params.tobytes()).hexdigest()
    result["buffers_sha"] = hashlib.sha256(buffers.tobytes()).hexdigest()
    result["ms"] = elapsed * 1e3 / zm.STEPS
    results[case] = result
    if r.rank == 0:
        print(f"{case}: {zm.STEPS} steps, {result['ms']:.1f} ms/step", flush=True)
    opt.close()
with open(os.path.join(outdir, f"zoo-r{r.rank}.json"), "w") as f:
    json.dump(results, f)
tt.shutdown()
