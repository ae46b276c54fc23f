"""Whether a lost worker costs a rollback (docs/operations.md, "Recovery").

Contract. rejoins_in_place(...) is True when a worker of this optimizer's job
that dies is replaced without a rollback: the shard servers keep the step in
flight, the surviving ranks wait in it, and the replacement (tessel-launch
restarts it; it resumes with auto_resume) takes the step the servers applied
last and recomputes the one in flight (Worker option rejoin_in_place,
worker/internal/rejoin.h). That needs everything a step computes to come from
the parameters and the step's data alone, the same on the replacement as on
the process that died, and the program not to have declined it:
  - `wanted` (DistributedOptimizer(rejoin_in_place=...), True by default):
    False trades rejoining for the shards' in-place update (one version of
    the parameters instead of two, docs/performance.md);
  - strategy zero1, zero2 or fsdp with recovery (ddp recovers its own way);
  - no buffers in the model (BatchNorm's running statistics live only on the
    workers: a replacement's would be the checkpoint's, not the dead rank's),
    which also rules out SyncBatchNorm;
  - no per-step reduction between the ranks outside the step (loss scaling's
    overflow vote, find_unused_parameters' vote): the replacement would join
    it at another point;
  - not a hybrid job (its partitions roll back together).
Otherwise a lost worker rolls the job back to its latest checkpoint, as before.
Every rank computes the same answer from the same arguments, so the job agrees.

Example:
    rejoins_in_place("zero2", True, model, scaler_enabled=False, find_unused=False,
                     hybrid=None)  # True for a model without buffers
"""


def rejoins_in_place(strategy, recovery, model, scaler_enabled, find_unused, hybrid, wanted=True):
    """True when a lost worker of this job is replaced without a rollback."""
    if not wanted or not recovery or strategy not in ("zero1", "zero2", "fsdp"):
        return False
    if hybrid is not None or scaler_enabled or find_unused:
        return False
    return model is None or not any(True for _ in model.buffers())
