"""ParamGroup: one torch parameter group = one Tessel job and its worker.

Contract. A group holds the group's parameters (in the torch optimizer's
order), their names, the Tessel optimizer settings last sent (`hyper`), the
worker once connected, and torch's None-ness of each .grad (`has_grad`). Two
kinds bind a group to its worker: FlatGroup (flat.py: ddp, zero1, zero2; the
parameters are views of the worker's buffers) and FsdpGroup (fsdp.py: units
gathered and released around their forward and backward). Both answer the
same calls, which DistributedOptimizer (optimizer.py) makes in this order in
a step: require_worker, check_layout, collect_grads, [grad_tensors],
sync_hyper, step (through the optimizer's recovery), end_step; and besides:
zero_grad, drop_gradients (a skipped step), recovered (after
worker.recover()), loaded (after worker.deserialize()), hold_all (gathered()),
mean_gradients, close.

Threads: the training thread's, except the autograd hooks a group registers,
which run during backward (on autograd's thread for a CUDA model) while the
training thread waits in backward.

Example (what DistributedOptimizer does per group):
    g = FlatGroup(0, params, names, hyper_source, settings)
    g.worker = tessel.Worker(registry, job, ...)
    g.bind()
    ... backward ...
    g.check_layout(); g.collect_grads(); g.sync_hyper(); g.step(); g.end_step()
"""
import numpy as np


def changed_after_hand_over(names):
    """The RuntimeError of step() when gradients handed to Tessel changed in place
    afterwards (a tensor's _version moved): this rank's change would not reach the
    update, or only part of it."""
    return RuntimeError(
        f"the gradient of {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} was changed "
        f"in place after backward handed it to Tessel (torch.nn.utils.clip_grad_norm_, "
        f"GradScaler.unscale_, p.grad.mul_(), model.zero_grad(), ...): the servers average "
        f"the gradients as handed over, so the change would be lost or apply to this rank's "
        f"share alone. Clip with tt.clip_grad_norm_(opt, max_norm) between backward and step "
        f"(the job-wide norm, as under DDP; DistributedOptimizer(overlap=False), not fsdp); "
        f"scale the loss, not the gradients; zero with opt.zero_grad() before backward. "
        f"This step cannot finish")


class Settings:
    """What every group of one DistributedOptimizer shares: complete (device and staged
    known) before any group binds, read-only afterwards.

    strategy:   "ddp", "zero1", "zero2" or "fsdp".
    precision:  "fp32", "bf16" or "fp16".
    device:     the device of the model's parameters.
    staged:     the model's tensors are device copies of the worker's buffers (staging.py).
    backward_passes_per_step: backward calls per step.
    overlap:    hand gradients over from autograd hooks (flat groups).
    push_in_backward: fsdp pushes a unit from backward's hooks (False under loss
                scaling, whose overflow decision comes first).
    sync:       the one field that changes: False inside DistributedOptimizer.no_sync(),
                where backward's hooks accumulate gradients instead of handing them over.
    """

    def __init__(self, strategy, precision, device, staged, backward_passes_per_step, overlap,
                 push_in_backward):
        self.strategy = strategy
        self.precision = precision
        self.device = device
        self.staged = staged
        self.backward_passes_per_step = backward_passes_per_step
        self.overlap = overlap
        self.push_in_backward = push_in_backward
        self.sync = True


class ParamGroup:
    """What both kinds of group share (see the module's docs)."""

    def __init__(self, index, params, names, hyper_source, settings):
        self.index = index
        self.params = params
        self.names = names
        self.settings = settings
        # The settings of this group now (torch's param_groups[index] and the
        # step's gradient multiplier); `hyper` is what the servers have.
        self._hyper_source = hyper_source
        self.hyper = hyper_source()
        self.worker = None
        self.shapes = [tuple(p.shape) for p in params]
        # torch's p.grad is not None, per parameter: fsdp frees the tensors between
        # steps, so it is kept here (flat groups set it from p.grad at each step).
        self.has_grad = [p.grad is not None for p in params]
        self.hooks = []  # autograd nodes and hook handles, kept alive with the group

    def require_worker(self):
        if self.worker is None:
            raise RuntimeError("this DistributedOptimizer was closed (tessel.torch.shutdown)")
        return self.worker

    def sync_hyper(self):
        """Settings changed in param_groups (an lr_scheduler, by hand) go to the
        servers before the step's pushes, so the step uses them, as in torch."""
        now = self._hyper_source()
        if now != self.hyper:
            self.require_worker().set_optimizer(now)
            self.hyper = now

    def register_layout(self):
        """The group's tensors (names, shapes, rank 0's values win) to the worker.
        Returns the total number of elements."""
        flat_init = np.concatenate([p.detach().reshape(-1).cpu().numpy() for p in self.params])
        shapes = [list(p.shape) if p.dim() > 0 else [1] for p in self.params]
        self.worker.register_layout(self.names, shapes, flat_init.astype(np.float32, copy=False))
        return flat_init.size

    # What each kind does; see FlatGroup and FsdpGroup.
    def bind(self):
        raise NotImplementedError

    def check_layout(self):
        pass

    def push_rest(self):
        """A held step about to be measured (held.py): every gradient handed over
        (the worker SDK pushes what is left)."""

    def end_step(self):
        pass


class Gathered:
    """The context of DistributedOptimizer.gathered(): every group's parameters
    held (fsdp gathers each unit) until it exits, which releases them; it
    yields `value` (the optimizer)."""

    def __init__(self, groups, value):
        self.groups = groups
        self.value = value
        self.held = []

    def __enter__(self):
        for g in self.groups:
            self.held += g.hold_all()
        return self.value

    def __exit__(self, *exc):
        for unit in self.held:
            unit.release()
        self.held = []
        return False
