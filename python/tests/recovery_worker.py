"""One rank of the recovery test (under tessel-launch --checkpoint_dir).

    recovery_worker.py STRATEGY OUTDIR [CRASH_AT]
        (STRATEGY: zero2, fsdp, zero2-staged, fsdp-staged; zero2-bn: bn_model's
        BatchNorm net, whose saved vector also holds rank 0's buffers; zero2-bn-rank0:
        the same with rank 0 killed, so its restarted process reads the buffers back)

Trains 10 steps with recovery on (a checkpoint every 3 steps), the loop
written over opt.step_count. With CRASH_AT, rank 1's first process dies
(os._exit(9)) when the job is at that step; tessel-launch --max_restarts
starts it again. zero2 and fsdp without buffers: it rejoins the step in flight (rank
0 waits in it; nothing rolls back); otherwise it resumes from the latest
checkpoint, rank 0's step fails and rolls back there, and both go on. Rank 0
saves the final parameters and prints how many recoveries it made.
"""
import os
import sys

import numpy as np
import torch

import bn_model
import exact_model
import rank_lib
import tessel.torch as tt

strategy, outdir = sys.argv[1], sys.argv[2]
# zero2-staged: the model's own tensors staged as a CUDA model's are.
os.environ["TESSEL_TORCH_STAGING"] = "1" if strategy.endswith("-staged") else "0"
crash_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
bn = "-bn" in strategy  # bn_model's BatchNorm net: its buffers roll back too
crash_rank = 0 if strategy.endswith("-rank0") else 1  # -rank0: rank 0 dies and resumes
r = rank_lib.Rank(batch=bn_model.BATCH if bn else exact_model.BATCH)
rank = r.rank
restarted = int(os.environ.get("TESSEL_RESTART_COUNT", "0")) > 0
model = bn_model.Net() if bn else exact_model.make_model()
# -norejoin: rejoin_in_place=False on every rank (a rollback; the shards keep
# one version of the parameters and update in place: JobSpec.in_place_update).
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy=strategy.split("-")[0], bucket_bytes=512, recovery=True,
                              checkpoint_every_steps=3,
                              rejoin_in_place=not strategy.endswith("-norejoin"))
if strategy.endswith("-norejoin") and opt.rejoin_in_place:
    sys.exit("rejoin_in_place=False: opt.rejoin_in_place is still True")
if restarted:
    said = (f"rank {rank}: restarted, resuming at step {opt.resume_step}, in place: "
            f"{opt.rejoined_in_place}")
    print(said, file=sys.stderr, flush=True)
    with open(os.path.join(outdir, f"{strategy}-restart.txt"), "w") as f:  # for the driver
        f.write(said)
while opt.step_count < 10:
    k = opt.step_count
    if rank == crash_rank and not restarted and k == crash_at:
        os._exit(9)  # a crash: no goodbye to the registry or the servers
    if bn:
        x, y = bn_model.batch(k)
        opt.zero_grad()
        r.loss_fn(model(x[r.rows()]), y[r.rows()]).backward()
        opt.step()
    else:
        r.train_step(opt, model, k)
path = os.path.join(outdir, f"{strategy}-{'crash' if crash_at >= 0 else 'clean'}.npy")
if bn:  # rank 0's parameters, running statistics and num_batches_tracked
    with opt.gathered():
        flat = torch.cat([bn_model.flat_params(model), bn_model.flat_stats(model),
                          torch.tensor(bn_model.batches_tracked(model), dtype=torch.float32)])
    if rank == 0:
        np.save(path, flat.numpy())
else:
    r.save_flat(opt, model, path)
if rank == 0:
    print(f"rank 0: {strategy} done at step {opt.step_count}, recoveries {opt.recoveries}",
          flush=True)
tt.shutdown()
