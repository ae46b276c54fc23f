"""FsdpUnit: one fsdp unit (a module's parameters in one group) and its state.

Contract. A unit's parameters are gathered from the shard servers around its
module's forward and backward and are empty tensors otherwise; its gradients
go into the unit's buffer (the worker's, or a device copy of it when staged),
made when first needed in a step (bind_buffer: at the push, or at a hold when
the step already has gradients of the unit), and are pushed once per step.
Inside DistributedOptimizer.no_sync() backward's hook calls accumulate()
instead of push(): the unit is released and its gradients pushed as a
micro-batch part (the servers sum the parts and the push, in the unit's
precision), so its buffer goes until the next pass. The state says which of
these holds:

    RELEASED  nothing held; this step's gradients not pushed yet
    HELD      parameters gathered (views of the gathered values); .grad
              torch's until the buffer is bound, then views of it
    PUSHED    released and pushed this step
    REHELD    gathered again after its push in the same step (gathered(),
              or a forward without a step); a later push is a no-op

    hold():            RELEASED -> HELD, PUSHED -> REHELD (held: no-op)
    release(grads):    HELD -> RELEASED, REHELD -> PUSHED (not held: no-op)
    push():            RELEASED -> PUSHED (a zero gradient), HELD -> PUSHED
                       (released first, flushing a staged copy); pushed: no-op
    finish_step():     PUSHED -> RELEASED, REHELD -> HELD
    reset():           any -> RELEASED, after the worker's recovery dropped
                       what it held (the worker is not told to release)

release() is the one way a unit lets go of what it holds: its parameters
become empty tensors (.grad None), the views of its buffer are dropped and
the worker frees the gathered values; `grads` says what happens to this
step's gradients: "leave" them in the worker's buffer, "flush" a staged
device copy into it (before a push), or "zero" it (a skipped step).
`done` counts the gradients backward produced since the unit was gathered
(the group's hooks push at len(members) * backward_passes_per_step).

The unit reads its group (fsdp.py FsdpGroup) for the worker, the parameters,
their shapes, has_grad and the settings.
Threads: the training thread's, and autograd's during backward (the group's
hooks), never both at once.

Example:
    unit = group.units[0]
    unit.hold()              # forward pre-hook: the module's parameters are real
    ... backward fills unit.grads ...
    unit.push()              # released, pushed: state PUSHED
    group.worker.finish_step(); unit.finish_step()   # RELEASED for the next step
"""
import enum

import torch

from tessel.torch.precision import HALF


class UnitState(enum.Enum):
    RELEASED = "released"
    HELD = "held"
    PUSHED = "pushed"
    REHELD = "reheld"


_HOLD = {UnitState.RELEASED: UnitState.HELD, UnitState.PUSHED: UnitState.REHELD}
_RELEASE = {UnitState.HELD: UnitState.RELEASED, UnitState.REHELD: UnitState.PUSHED}
_FINISH = {UnitState.PUSHED: UnitState.RELEASED, UnitState.REHELD: UnitState.HELD}


class FsdpUnit:
    """One unit of an FsdpGroup (see the module's docs)."""

    def __init__(self, group, index, members, offsets, begin=0):
        self.group = group
        self.index = index
        self.members = members  # the group's parameter indices, in order
        self.offsets = offsets  # (begin, end) of each member in the unit's buffer
        self.begin = begin  # the unit's first element in the group's flat layout
        self.state = UnitState.RELEASED
        self.done = 0
        self.buffered = False  # the worker's gradient buffer of this step exists
        self.parts = 0  # no_sync() passes pushed as parts this step (summed on the servers)
        self.grads = None  # the unit's gradient buffer while held (device copy if staged)
        self.host_grads = None  # staged: the worker's buffer under `grads`

    @property
    def held(self):
        return self.state in (UnitState.HELD, UnitState.REHELD)

    @property
    def pushed(self):
        return self.state in (UnitState.PUSHED, UnitState.REHELD)

    def hold(self):
        """Gathers the unit's parameters and binds them (no-op if held)."""
        if self.held:
            return
        g, w, u = self.group, self.group.worker, self.index
        precision = g.settings.precision
        if precision in HALF:
            params = torch.from_numpy(w.gather_half(u)).view(HALF[precision])
        else:
            params = torch.from_numpy(w.gather(u))
        if g.settings.staged:  # the model's copies on its device; the worker's stay host
            params = params.to(g.settings.device, copy=True)
        with torch.no_grad():
            for i, (b, e) in zip(self.members, self.offsets):
                g.params[i].data = params[b:e].view(g.shapes[i])
                g.params[i].grad = None
        if self.buffered:  # gradients of this step so far (no_sync, loss scaling): torch adds
            self.bind_buffer()
        self.state = _HOLD[self.state]
        self.done = 0

    def bind_buffer(self):
        """The unit's gradient buffer (the worker's; a device copy when staged), made on
        first use in a step, so a worker holds the buffers of the units backward is
        between, not of every unit gathered; parameters that have a gradient see
        views of it as .grad (torch's None-ness kept)."""
        g, w, u = self.group, self.group.worker, self.index
        if g.settings.precision in HALF:
            grads = torch.from_numpy(w.unit_half_grads(u)).view(HALF[g.settings.precision])
        else:
            grads = torch.from_numpy(w.unit_grads(u))
        if g.settings.staged:
            self.host_grads = grads
            grads = grads.to(g.settings.device, copy=True)
        self.grads = grads
        self.buffered = True
        with torch.no_grad():
            for i, (b, e) in zip(self.members, self.offsets):
                p = g.params[i]
                if p.grad is None and g.has_grad[i]:
                    p.grad = grads[b:e].view(g.shapes[i])

    def release(self, grads="leave", worker_dropped=False):
        """Lets go of what the unit holds (no-op if not held); see the module's docs."""
        if not self.held:
            return
        if grads == "flush":
            if self.host_grads is not None:  # the device's gradients into the worker's buffer
                self.host_grads.copy_(self.grads)
        elif grads == "zero":  # the worker's buffer outlives the release
            if self.grads is not None:
                self.grads.zero_()
            if self.host_grads is not None:
                self.host_grads.zero_()
        elif grads != "leave":
            raise ValueError(f"internal: release(grads={grads!r})")
        self.group.empty_params(self.members)
        self.grads = None
        self.host_grads = None
        if not worker_dropped:
            self.group.worker.release(self.index)
        self.state = _RELEASE[self.state]

    def peek(self):
        """A copy of the unit's parameters (1-D, the model's dtype) gathered for the
        moment and freed again, without holding the unit: its state and gradients
        stay (state_dict between steps)."""
        g, w, u = self.group, self.group.worker, self.index
        if g.settings.precision in HALF:
            flat = torch.from_numpy(w.gather_half(u)).view(HALF[g.settings.precision]).clone()
        else:
            flat = torch.from_numpy(w.gather(u)).clone()
        w.release(u)
        return flat

    def adopt_grads(self):
        """A held unit's gradients into its buffer (backward made a new .grad for a
        parameter that had none); those parameters have a gradient now."""
        g = self.group
        if self.grads is None:
            self.bind_buffer()
        for i, (b, e) in zip(self.members, self.offsets):
            p = g.params[i]
            if p.grad is None:
                continue
            g.has_grad[i] = True
            view = self.grads[b:e]
            if p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad.reshape(-1))
                p.grad = view.view(g.shapes[i])

    def accumulate(self):
        """no_sync(): backward produced this pass's gradients; the unit lets go of
        its parameters and pushes them as a micro-batch part, which the servers add
        to this step's push in the unit's precision (bf16/fp16: each add rounded to
        half, as torch's in-place add into a half .grad), so the buffer goes: the
        worker holds one pass's gradients of a unit at a time."""
        if not self.held:
            return
        self.adopt_grads()
        self.release(grads="flush")
        self.group.worker.push_unit_part(self.index)
        self.buffered = False
        self.parts += 1

    def push(self):
        """Pushes this step's gradients once (a unit never held pushes zeros)."""
        if self.pushed:
            return
        w, u = self.group.worker, self.index
        if not self.held:  # a zero gradient: the buffer comes zeroed
            if self.group.settings.precision in HALF:
                w.unit_half_grads(u)
            else:
                w.unit_grads(u)
        else:
            self.adopt_grads()
            self.release(grads="flush")
        w.push_unit(u)
        self.buffered = False
        self.parts = 0
        self.state = UnitState.PUSHED

    def finish_step(self):
        """The step was applied: the next one pushes again."""
        self.state = _FINISH.get(self.state, self.state)
        self.done = 0

    def reset(self):
        """After the worker's recovery: it dropped what it held; gather afresh."""
        self.release(worker_dropped=True)
        self.buffered = False
        self.parts = 0
        self.state = UnitState.RELEASED
        self.done = 0
