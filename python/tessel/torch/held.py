"""Held steps: clipping by the job-wide gradient norm while the gradients are
pushed during backward (overlap, fsdp). The shard servers reduce a held
step but hold its update; clip_grad_norm_ asks each group's servers for the
mean gradient's share of the norm (measured where the reduced gradient
lives, server/step_hold.h), combines the shares, and releases the step with
the clipping factor, applied in the same step.

Contract. HeldSteps(opt, mode) decides which steps are held, the same way on
every rank: mode True holds every step; None (the default) holds the first
step of the process, the first step after a recovery (a restarted rank's
first step is its survivors' first after theirs), and every step after one
that clipped (a loop that clips does so every step); False none. A
replacement that rejoined the step in flight in place holds it as the
other ranks did (the shards say). A step is
held only where the gradients go out during backward (overlap or fsdp, no
loss scaling, not ddp): applies() says so. clip(max_norm, norm_type) runs
on a held step between backward and step(); on a step that is not held it
raises RuntimeError naming hold_for_clipping=True. A held step not clipped
is released by step() with its own settings (the worker SDK does it).
Threads: the training thread's; every rank clips the same steps.

Example:
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    loss.backward()
    norm = tt.clip_grad_norm_(opt, 1.0)   # measured on the servers, applied in this step
    opt.step()
"""
import math

import numpy as np
import tessel
import torch

NORM_TYPES = (1.0, 2.0, math.inf)


def holds(overlap, strategy, scaling, hybrid):
    """Whether such an optimizer's steps can be held: gradients pushed during
    backward, no loss scaling, the servers apply the update, not a hybrid job."""
    return (overlap or strategy == "fsdp") and not scaling and strategy != "ddp" and not hybrid


def check_mode(mode, overlap, strategy, scaling, hybrid):
    """ValueError for a hold_for_clipping the optimizer cannot honour (before it connects)."""
    if mode not in (None, True, False):
        raise ValueError(f"hold_for_clipping must be None, True or False, got {mode!r}")
    if mode is True and not holds(overlap, strategy, scaling, hybrid):
        raise ValueError(
            "hold_for_clipping=True needs the gradients pushed during backward (overlap, or "
            "fsdp) without loss scaling, strategy zero1, zero2 or fsdp, and no tensor or "
            "pipeline parallelism; with overlap=False clip_grad_norm_ needs no held step")


class HeldSteps:
    def __init__(self, opt, mode):
        self.opt = opt
        self.mode = mode
        self.held = False
        self.clipped = False
        first = self.applies() and mode is not False
        worker = opt._groups[0].require_worker()
        if worker.rejoined_in_place:
            # A replacement recomputing the step in flight holds it as the
            # other ranks did (the worker set hold_updates to match).
            self.held = first = bool(worker.rejoined_step_held)
        self._set(first)

    def applies(self):
        o = self.opt
        return holds(o.overlap, o.strategy, o._scaler.enabled, o._hybrid is not None)

    def _set(self, hold):
        if hold != self.held:
            for g in self.opt._groups:
                g.require_worker().hold_updates(hold)
            self.held = hold

    def clip(self, max_norm, norm_type):
        """The job-wide norm (a float32 tensor); the step's factor is sent to the servers."""
        opt = self.opt
        if norm_type not in NORM_TYPES:
            raise ValueError(f"norm_type {norm_type}: with the gradients pushed during backward "
                             f"the servers measure norm types 1, 2 and inf")
        if not self.held:
            raise RuntimeError(
                f"clip_grad_norm_ at step {opt.step_count + 1}: this step's update was not held "
                f"for a clipping factor (only the first step, and each step after one that "
                f"clipped, are), so the servers may have applied it already. Make the "
                f"DistributedOptimizer with hold_for_clipping=True to clip from any step on, "
                f"or clip every step from the first")
        if self.clipped:
            raise RuntimeError("clip_grad_norm_ twice in one step: the step was released "
                               "with the first call's factor")
        opt._prepare_step()
        try:
            for g in opt._groups:
                g.push_rest()
            stats = [g.require_worker().held_gradient_norm() for g in opt._groups]
        except tessel.RecoverableError as e:  # a member was lost during the step
            opt.abandon_step(e)  # rolled back (re-raised without recovery): next step() no-op
            return torch.tensor(math.nan, dtype=torch.float32)
        if norm_type == 2.0:
            total = math.sqrt(sum(s[0] for s in stats))
        elif norm_type == 1.0:
            total = sum(s[1] for s in stats)
        else:
            total = max(s[2] for s in stats)
            if any(math.isnan(s[2]) for s in stats):
                total = math.nan
        coef = max_norm / (total + 1e-6)
        multiplier = float(np.float32(coef)) if math.isfinite(total) and coef < 1.0 else 0.0
        for g in opt._groups:
            g.require_worker().release_step(multiplier)
        self.clipped = True
        return torch.tensor(total, dtype=torch.float32)

    def recovered(self):
        """After a recovery: the next step is held, as a restarted rank's first is."""
        self.clipped = False
        if self.applies():
            self._set(self.mode is not False)

    def step_done(self):
        """After a step: whether the next one is held."""
        if self.applies():
            self._set(self.mode is True or (self.mode is None and self.clipped))
        self.clipped = False
