"""The job-wide decisions of a step, the same on every rank.

Contract. agree(groups, find_unused, check_overflow) decides, after every
group's collect_grads():
  - whether any rank's gradients overflowed (inf or NaN; asked for under loss
    scaling): then every rank skips the step;
  - per group, the parameters no rank has a gradient for (asked for with
    find_unused_parameters): the servers leave exactly those alone.
Both ride on one reduction (all_reduce_mean over the first group's worker of
[overflow flag, has-gradient flags...]); none runs when neither is asked for.
Without find_unused_parameters a parameter without a gradient on this rank
is a ValueError naming it (before any reduction). Returns (overflowed, skips)
with skips None unless find_unused, else a list per group of parameter
indices. Threads: the training thread's; every rank must call it at the same
point of a step (a collective).

Example:
    overflowed, skips = agree(groups, find_unused=True, check_overflow=False)
    # False, [[3], []]: no rank used parameter 3 of group 0
"""
import numpy as np
import torch


def agree(groups, find_unused, check_overflow):
    """(overflowed, skips) for this step, the same on every rank."""
    missing = [[i for i, h in enumerate(g.has_grad) if not h] for g in groups]
    if not find_unused and any(missing):
        names = [g.names[i] for g, m in zip(groups, missing) for i in m]
        raise ValueError(
            f"parameter(s) {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} got no "
            f"gradient this step (.grad is None): make the DistributedOptimizer with "
            f"find_unused_parameters=True to leave them out as torch does (this rank's "
            f"other gradients may already have been pushed: the job cannot finish this step)")
    if not check_overflow and not find_unused:
        return False, None
    bad = 0.0
    if check_overflow:
        for g in groups:
            if any(not bool(torch.isfinite(t).all()) for t in g.grad_tensors()):
                bad = 1.0
    flags = [bad]
    if find_unused:
        for g in groups:
            flags += [1.0 if h else 0.0 for h in g.has_grad]
    flags = np.array(flags, dtype=np.float32)
    groups[0].require_worker().all_reduce_mean(flags)
    skips = None
    if find_unused:
        skips, at = [], 1
        for g in groups:
            n = len(g.params)
            skips.append([i for i in range(n) if flags[at + i] == 0])
            at += n
    return bool(flags[0] > 0), skips
