"""FsdpGroup: a parameter group trained with fsdp (ZeRO-3), and how a model is cut
into units.

Contract. The worker keeps no full copy: a unit's parameters are gathered
from the shard servers when its module's forward starts (a forward pre-hook,
which also sends changed settings and prefetches the next unit), its
gradients are written into the unit's own buffer, and once backward produced
every one of them the unit is released and pushed (under loss scaling in
step() instead, after the overflow decision). step() pushes the units
backward did not reach (zero gradients) and finishes the step. Between steps
the parameters are empty tensors; hold_all() gathers every unit not held
(DistributedOptimizer.gathered()). Each unit is an FsdpUnit (fsdp_unit.py)
with an explicit state; every release goes through FsdpUnit.release.
When backward hands a unit's gradients over (its push; under loss scaling
when backward made the last of them) the group notes each member's .grad
and its _version (a pushed member gets an empty .grad until the step ends,
so torch's clip_grad_norm_ touches something); collect_grads() raises
RuntimeError if one changed in place since.

plan_units(model, groups) cuts the model: per group, the model's top-level
children that own parameters of the group, in the group's parameter order
(parameters of the model itself form units of their own). A module whose
parameters are in several groups has a unit in each, all gathered by its
forward. ValueError unless the groups hold exactly model.parameters() and
each unit's parameters are contiguous in its group.

Threads: as ParamGroup (group.py): the hooks run during forward and backward.

Example:
    plans = plan_units(model, groups)              # [[(first, module), ...], ...]
    g.worker = tessel.Worker(..., units=[first for first, _ in plans[0]])
    g.bind(plans[0])                                # parameters now empty tensors
    model(x).sum().backward()                      # units gathered, pushed, released
    g.step()                                       # the rest pushed; finish_step
"""
import torch

from tessel.torch.fsdp_unit import FsdpUnit
from tessel.torch.group import ParamGroup, changed_after_hand_over
from tessel.torch.precision import model_dtype


def plan_units(model, groups):
    """Per group, [(index of the unit's first parameter, its module), ...]."""
    if model is None:
        raise ValueError("strategy 'fsdp' needs model= (its modules are the units)")
    named = list(model.named_parameters())
    in_groups = sorted(id(p) for g in groups for p in g.params)
    if sorted(id(p) for _, p in named) != in_groups:
        raise ValueError("strategy 'fsdp' needs the optimizer's parameter groups to hold "
                         "exactly model.parameters()")
    children = dict(model.named_children())
    key_of = {}
    for name, p in named:
        head = name.split(".")[0]
        key_of[id(p)] = (head, head if head in children else f"<root>.{name}")
    per_group = []
    for g in groups:
        units = []  # (index of the unit's first tensor, module, key)
        last = None
        for i, p in enumerate(g.params):
            head, key = key_of[id(p)]
            if key != last:
                if any(k == key for _, _, k in units):
                    raise ValueError(f"the parameters of {head} are not contiguous in "
                                     f"parameter group {g.index}; fsdp units must be")
                units.append((i, children.get(head, model), key))
                last = key
        per_group.append([(first, module) for first, module, _ in units])
    return per_group


class FsdpGroup(ParamGroup):
    """One group's parameters gathered unit by unit (see the module's docs)."""

    def __init__(self, index, params, names, hyper_source, settings):
        super().__init__(index, params, names, hyper_source, settings)
        self.units = []
        self.unit_of = {}  # parameter index -> unit index
        # unit index -> [(parameter index, its .grad, the .grad's _version)] when
        # backward handed the unit's gradients over: an in-place change after it is
        # refused. A unit pushed in backward leaves each member an empty .grad (its
        # gradient is on the servers) for torch's clip_grad_norm_ to touch.
        self.guards = {}

    def bind(self, plan):
        self.register_layout()
        firsts = [first for first, _ in plan] + [len(self.params)]
        for u, (first, module) in enumerate(plan):
            members = list(range(first, firsts[u + 1]))
            begin, _ = self.worker.unit_range(u)
            offsets = []
            off = 0
            for i in members:
                n = self.params[i].numel()
                offsets.append((off, off + n))
                off += n
            self.units.append(FsdpUnit(self, u, members, offsets, begin))
            self.hooks.append(module.register_forward_pre_hook(self._pre_hook(u)))
        for unit in self.units:
            for i in unit.members:
                self.unit_of[i] = unit.index
        # The hooks go on each parameter's gradient node made in the dtype the
        # model computes in (torch makes a new node, without them, when a
        # parameter's dtype changes) and at its full shape (the node checks
        # gradients against it), then the parameters are emptied.
        dtype = model_dtype(self.settings.precision)
        with torch.no_grad():
            for p in self.params:
                if p.dtype != dtype:
                    p.data = p.data.to(dtype)
        for i, p in enumerate(self.params):
            self.hooks.append(self._grad_hook(i, p))
        self.empty_params(range(len(self.params)))

    def empty_params(self, members):
        with torch.no_grad():
            for i in members:
                self.params[i].data = torch.empty(0, device=self.params[i].device,
                                                  dtype=model_dtype(self.settings.precision))
                self.params[i].grad = None

    def _pre_hook(self, u):
        def hook(module, inputs):
            self.require_worker()
            self.sync_hyper()  # new settings reach the servers before any push
            self.units[u].hold()
            if u + 1 < len(self.units) and not self.units[u + 1].held:
                self.worker.prefetch(u + 1)
        return hook

    def _grad_hook(self, i, p):
        acc = p.expand_as(p).grad_fn.next_functions[0][0]  # p's AccumulateGrad node
        unit = self.units[self.unit_of[i]]
        settings = self.settings

        def hook(*_):
            if self.worker is None:
                return
            unit.done += 1
            self.has_grad[i] = True
            if unit.done != len(unit.members) * settings.backward_passes_per_step:
                return
            if not settings.push_in_backward:  # loss scaling pushes in step(), if at all
                if settings.sync:
                    self._guard(unit, [(i, self.params[i].grad) for i in unit.members])
            elif settings.sync:
                unit.push()
                self._guard(unit, [(i, self._pushed_grad(i)) for i in unit.members])
            else:  # no_sync(): a part, summed on the servers
                unit.accumulate()

        acc.register_hook(hook)
        return acc

    def _pushed_grad(self, i):
        """An empty .grad for parameter i, whose gradient was pushed (None if it has none)."""
        p = self.params[i]
        if not self.has_grad[i]:
            return None
        with torch.no_grad():
            p.grad = torch.empty(0, dtype=p.dtype, device=p.device)
        return p.grad

    def _guard(self, unit, grads):
        self.guards[unit.index] = [(i, t, t._version) for i, t in grads if t is not None]

    def _end_guards(self):
        """The step is over (or dropped): the empty .grads go back to None."""
        for guard in self.guards.values():
            for i, t, _ in guard:
                if self.params[i].grad is t and t.numel() == 0:
                    self.params[i].grad = None
        self.guards = {}

    # --- a step ----------------------------------------------------------------
    def collect_grads(self):
        """Held units' gradients into their buffers (has_grad follows). RuntimeError
        (changed_after_hand_over) if a gradient changed in place since backward
        handed it over."""
        changed = [self.names[i] for guard in self.guards.values() for i, t, v in guard
                   if self.params[i].grad is t and t._version != v]
        if changed:
            raise changed_after_hand_over(changed)
        for unit in self.units:
            if unit.held:
                unit.adopt_grads()

    def grad_tensors(self):
        """The tensors holding this step's gradients (checked for overflow)."""
        return [unit.grads for unit in self.units if unit.grads is not None]

    def push_rest(self):
        for unit in self.units:
            unit.push()  # units backward did not reach: a zero gradient

    def step(self):
        for unit in self.units:
            unit.push()  # units backward did not reach: a zero gradient
        self.worker.finish_step()
        for unit in self.units:
            unit.finish_step()
        self._end_guards()

    def drop_gradients(self):
        """A skipped step: every held unit lets go with its buffer zeroed."""
        self._end_guards()
        for unit in self.units:
            unit.release(grads="zero")
            unit.done = 0

    def recovered(self):
        """After worker.recover(): the SDK dropped what it held; gather afresh."""
        self._end_guards()
        for unit in self.units:
            unit.reset()

    def loaded(self):
        """After worker.deserialize(): what was gathered before the load is stale."""
        for unit in self.units:
            unit.release()

    # --- the rest of the optimizer's interface --------------------------------
    def zero_grad(self, set_to_none):
        if any(unit.parts for unit in self.units):
            raise RuntimeError(
                "zero_grad() after no_sync() passes: fsdp sent their gradients to the shard "
                "servers, which sum them into this step; finish the step (a backward outside "
                "no_sync(), then step()) before zeroing gradients")
        self._end_guards()
        for unit in self.units:
            if unit.grads is not None:
                unit.grads.zero_()
            if unit.held:  # gradients backward made that are not in the buffer yet
                for i in unit.members:
                    if self.params[i].grad is not None:
                        self.params[i].grad.zero_()
        if set_to_none:
            self.has_grad = [False] * len(self.params)
            for unit in self.units:
                if unit.held:
                    for i in unit.members:
                        self.params[i].grad = None

    def hold_all(self):
        """Gathers every unit not held; returns those units (to release afterwards)."""
        self.require_worker()
        held = []
        for unit in self.units:
            if not unit.held:
                unit.hold()
                held.append(unit)
        return held

    def full_values(self):
        """The full value of every parameter of a unit not held now, by index
        (gathered unit by unit and freed: the units' states and gradients stay)."""
        out = {}
        for unit in self.units:
            if unit.held:
                continue
            flat = unit.peek()
            for i, (b, e) in zip(unit.members, unit.offsets):
                out[i] = flat[b:e].view(self.shapes[i]).to(self.params[i].device)
        return out

    def flat_slice(self, begin, end):
        """Elements [begin, end) of the group's flat parameters cut by tensor:
        {index: (offset in the tensor, 1-D copy)}; one unit gathered at a time."""
        out = {}
        for unit in self.units:
            size = unit.offsets[-1][1] if unit.offsets else 0
            if unit.begin >= end or unit.begin + size <= begin:
                continue
            flat = (torch.cat([self.params[i].detach().reshape(-1).cpu() for i in unit.members])
                    if unit.held else unit.peek())
            for i, (b, e) in zip(unit.members, unit.offsets):
                lo, hi = max(unit.begin + b, begin), min(unit.begin + e, end)
                if lo < hi:
                    out[i] = (lo - unit.begin - b, flat[lo - unit.begin:hi - unit.begin].clone())
        return out

    def load_params(self, values):
        """New parameters (fp32, the group's flat order) onto the servers; the
        optimizer state and step stay. Collective."""
        self.require_worker().load_params(values)
        self.loaded()

    def mean_gradients(self):
        raise ValueError("synchronize_gradients (and clip_grad_norm_) is not available with "
                         "fsdp: its units' gradients are pushed and freed during backward")

    def close(self):
        """Leaves the job; the parameters take their full values, in memory of their own."""
        if self.worker is None:
            return
        full = torch.from_numpy(self.worker.gather_all())
        off = 0
        with torch.no_grad():
            for i, p in enumerate(self.params):
                n = 1
                for d in self.shapes[i]:
                    n *= d
                p.data = full[off:off + n].view(self.shapes[i]).clone().to(p.device)
                p.grad = None
                off += n
        self.worker.close()
        self.worker = None
        for h in self.hooks:  # the model runs on its own again: no more gathers
            if hasattr(h, "remove"):
                h.remove()
