"""clip_grad_norm_ for a DistributedOptimizer: the job-wide gradient norm, and the
clipping factor the coming step applies where the update runs.

Contract. total_norm(tensors, norm_type) is torch.nn.utils.clip_grad_norm_'s
norm of a list of tensors (inf: the largest magnitude); clip_factor(max_norm,
total) is max_norm / (total + 1e-6) when that is below 1 and the norm is
finite, else None (nothing to clip, or the gradients overflowed and the step
skips). clip_grad_norm_(optimizer, ...) measures the norm of the mean
gradient over all ranks and has this step apply the factor: measured on the
servers for a held step (held.py: overlap, fsdp), else by one reduction
through the servers, the factor joining the step's settings. Threads: the training
thread's; a collective (every rank calls it at the same point).

Example:
    opt.zero_grad(); loss.backward()
    norm = clip_grad_norm_(opt, 1.0)     # a tensor; the step scales the mean if > 1
    opt.step()
"""
import numpy as np
import torch

from tessel.torch.optimizer import DistributedOptimizer
from tessel.torch.precision import HALF


def total_norm(tensors, norm_type):
    """The norm of all `tensors` together (a 0-dim tensor), as torch's clip_grad_norm_."""
    if norm_type == float("inf"):
        return max(t.abs().max() for t in tensors)
    return torch.norm(torch.stack([torch.norm(t, norm_type) for t in tensors]), norm_type)


def clip_factor(max_norm, total):
    """The factor that brings a norm of `total` to max_norm, or None (no clipping)."""
    coef = max_norm / (float(total) + 1e-6)
    if np.isfinite(float(total)) and coef < 1.0:  # overflowed: step() skips anyway
        return coef
    return None


def clip_grad_norm_(optimizer, max_norm, norm_type=2.0):
    """torch.nn.utils.clip_grad_norm_ for a DistributedOptimizer: the norm is the
    job-wide one, of the mean gradient over all ranks (what the step applies),
    across every parameter group; if above max_norm, the step multiplies that
    mean by max_norm / (norm + 1e-6) (float32) where the update runs (the
    servers; ddp: the workers), as torch multiplies a single process's
    gradients. Returns the norm (a tensor). Call it between backward and step
    on every rank.

    With the gradients pushed during backward (overlap, the default, and
    fsdp) the servers hold the step's update (held.py): the norm is measured
    where the reduced gradient lives, each server's share as it sums the
    step, combined here (norm types 1, 2 and inf), and the factor goes back
    with one small message per server, applied in the same step.
    ddp with overlap: the step's exchange runs now (its workers receive the
    mean and apply the update themselves), the norm is the mean's, and the
    factor joins the step's settings. With overlap=False the gradients are
    still here: one extra reduction through the servers gives the mean, and
    the factor joins the step's settings. With loss scaling (overlap=False) it works on the
    unscaled gradients, as torch's recipe (scaler.unscale_(opt);
    clip_grad_norm_(...); scaler.step(opt)) does: the norm is that of the
    mean gradient times float32(1 / scale), and the clipping factor joins the
    unscaling on the servers for this step. If the gradients overflowed the
    norm is inf or NaN, nothing is clipped, and step() skips."""
    if not isinstance(optimizer, DistributedOptimizer):
        raise ValueError("clip_grad_norm_ takes a tessel.torch.DistributedOptimizer")
    max_norm = float(max_norm)
    norm_type = float(norm_type)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    if optimizer._held.applies():
        return optimizer._held.clip(max_norm, norm_type)
    if optimizer.strategy == "fsdp":
        raise ValueError("clip_grad_norm_ under fsdp with loss scaling is not available: "
                         "clip without loss scaling (bf16 needs none)")
    if optimizer.overlap and optimizer._hybrid is not None:
        raise ValueError("clip_grad_norm_ with overlap in a tensor- or pipeline-parallel job is "
                         "not available: make the DistributedOptimizer with overlap=False")
    if optimizer.overlap:  # ddp: the step's mean comes now, and is applied by step()
        means = _pull_ddp_means(optimizer)
    else:
        means = optimizer.synchronize_gradients()
    if optimizer.strategy == "ddp" and optimizer.precision in HALF and not optimizer.overlap:
        # what ddp's servers hand back, and its workers apply: the mean in half
        half = HALF[optimizer.precision]
        means = [g.to(half).float() for g in means]
    means = optimizer._scaler.unscale(means)  # torch's unscale_: grad * float32(1 / scale)
    total = total_norm(means, norm_type)
    coef = clip_factor(max_norm, total)
    if coef is not None:
        optimizer._clip_next_step(coef)
        if optimizer.overlap:  # ddp: the settings of the step its workers apply now
            for g in optimizer._groups:
                g.sync_hyper()
    return total


def _pull_ddp_means(optimizer):
    """ddp with overlap: the step's mean gradient pulled now (Worker::PullMean),
    per parameter as its workers will apply it (half: the half mean, widened);
    step() applies it with the factor."""
    if optimizer._ddp_mean_pulled:
        raise RuntimeError("clip_grad_norm_ twice in one step: the step's mean was measured "
                           "by the first call")
    optimizer._prepare_step()
    means = []
    for g in optimizer._groups:
        g.push_rest()
        w = g.require_worker()
        w.pull_mean()
        if optimizer.precision in HALF:
            flat = torch.from_numpy(w.half_grads()).view(HALF[optimizer.precision]).float()
        else:
            flat = torch.from_numpy(w.grads())
        means += [flat[b:e] for b, e in g.ranges]
    optimizer._ddp_mean_pulled = True
    return means
