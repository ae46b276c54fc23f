"""One rank of the exactness test: trains exact_model.Net through tessel.torch
on this rank's slice of each batch, once per STRATEGY:OPTIMIZER given, each
as its own job; rank 0 saves each run's final parameters.

Usage (under tessel-launch): exact_worker.py STEPS OUTDIR STRATEGY:OPTIMIZER...
"""
import os
import sys
import time

import numpy as np

import exact_model
import rank_lib
import tessel.torch as tt

steps, outdir, combos = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
r = rank_lib.Rank()
cfg, rank, loss_fn = r.cfg, r.rank, r.loss_fn
for combo in combos:
    strategy, opt_name, *rest = combo.split(":")
    variant = rest[0] if rest else "fp32"
    # ...-staged / staged: the model's own tensors, staged to and from the
    # worker's buffers as a CUDA model's are (tessel.torch's Staging).
    staged = variant == "staged" or variant.endswith("-staged")
    if staged:
        variant = "fp32" if variant == "staged" else variant[:-len("-staged")]
    os.environ["TESSEL_TORCH_STAGING"] = "1" if staged else "0"
    fp16 = variant == "fp16"
    # overlap: clipping with the gradients pushed during backward (held steps:
    # the servers measure the norm and apply the factor in the same step).
    overlap = variant == "overlap"
    # unused: parameters without gradients, zero_grad(set_to_none=True);
    # unused-keep: the same with zero_grad() keeping zeroed gradients.
    unused = variant in ("unused", "unused-keep")
    precision = "fp32" if unused or overlap else variant
    if unused:
        model = exact_model.make_branch_model()
    else:
        model = exact_model.make_half_model() if fp16 else exact_model.make_model()
    clip = exact_model.CLIP.get(opt_name)
    opt = tt.DistributedOptimizer(exact_model.OPTIMIZERS[opt_name](model),
                                  model=model, strategy=strategy, bucket_bytes=512,
                                  job=f"{cfg['job']}-{combo.replace(':', '-')}",
                                  overlap=None if fp16 else (clip is None or overlap),
                                  precision=precision,
                                  find_unused_parameters=unused,
                                  **(exact_model.FP16_SCALER if fp16 else {}))
    if staged:  # the model's tensors are its own, not views of the worker's buffers
        assert opt._staged, combo
        for g in opt._groups:
            if strategy == "fsdp":  # units: copies of each gathered unit
                continue
            assert g.staging is not None, combo
            buf = g.worker.half_params() if precision in ("bf16", "fp16") else g.worker.params()
            lo, hi = buf.ctypes.data, buf.ctypes.data + buf.nbytes
            assert all(not lo <= p.data_ptr() < hi for p in g.params), combo
    applied = []
    make_schedule = exact_model.SCHEDULES.get(opt_name)
    schedule = make_schedule(opt.optimizer) if make_schedule else None
    norms = []
    start = time.perf_counter()
    for step in range(steps):
        tokens, labels = r.batch(step)
        opt.zero_grad(set_to_none=variant == "unused")
        logits = model(tokens, step) if unused else model(tokens)
        opt.scale_loss(loss_fn(logits.float(), labels)).backward()
        if clip:
            norms.append(float(tt.clip_grad_norm_(opt, clip)))
        applied.append(opt.step())
        if schedule:
            schedule.step()
    ms = (time.perf_counter() - start) * 1e3 / steps
    if rank == 0:
        np.save(os.path.join(outdir, f"{combo.replace(':', '-')}.npy"),
                r.gathered_flat(opt, model).float().numpy())
        print(f"{combo}: {steps} steps, {ms:.2f} ms/step"
              + (f", gradient norms {' '.join(f'{n:.3f}' for n in norms)}" if norms else "")
              + (f", applied {''.join('1' if a else '0' for a in applied)} final loss scale "
                 f"{opt.loss_scale:g}" if fp16 else "")
              + (f", {opt.skipped_tensors} parameter updates left out" if unused else ""),
              flush=True)
    opt.close()
tt.shutdown()
