"""One rank of the recovery test (under tessel-launch --checkpoint_dir).

    recovery_worker.py STRATEGY OUTDIR [CRASH_AT]      (STRATEGY: zero2, fsdp, zero2-staged)

Trains 10 steps with recovery on (a checkpoint every 3 steps), the loop
written over opt.step_count. With CRASH_AT, rank 1's first process dies
(os._exit(9)) when the job is at that step; tessel-launch --max_restarts
starts it again, it resumes from the latest checkpoint, rank 0's step fails
and rolls back there, and both go on. Rank 0 saves the final parameters and
prints how many recoveries it made.
"""
import os
import sys

import torch

import exact_model
import rank_lib
import tessel.torch as tt

strategy, outdir = sys.argv[1], sys.argv[2]
# zero2-staged: the model's own tensors staged as a CUDA model's are.
os.environ["TESSEL_TORCH_STAGING"] = "1" if strategy.endswith("-staged") else "0"
crash_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
r = rank_lib.Rank()
rank = r.rank
restarted = int(os.environ.get("TESSEL_RESTART_COUNT", "0")) > 0
model = exact_model.make_model()
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy=strategy.split("-")[0], bucket_bytes=512, recovery=True,
                              checkpoint_every_steps=3)
if restarted:
    print(f"rank {rank}: restarted, resuming at step {opt.step_count}", file=sys.stderr, flush=True)
while opt.step_count < 10:
    k = opt.step_count
    if rank == 1 and not restarted and k == crash_at:
        os._exit(9)  # a crash: no goodbye to the registry or the servers
    r.train_step(opt, model, k)
r.save_flat(opt, model,
            os.path.join(outdir, f"{strategy}-{'crash' if crash_at >= 0 else 'clean'}.npy"))
if rank == 0:
    print(f"rank 0: {strategy} done at step {opt.step_count}, recoveries {opt.recoveries}",
          flush=True)
tt.shutdown()
