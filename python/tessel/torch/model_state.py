"""ModelState: the model's state_dict and load_state_dict under every strategy.

Contract. Made by DistributedOptimizer for its model (model= given), before
the groups bind, it records the model's state_dict keys and shapes and which
group and index each parameter key names (tied parameters: several keys, one
parameter). It then hooks the model so that, while the optimizer is open:

  model.state_dict()        holds the full parameters under every strategy
                            (fsdp gathers each unit not held, copies it and
                            frees it: one unit at a time besides the result);
  model.load_state_dict(sd) checks sd, then scatters its parameters to the
                            shard servers (collective: every rank loads the
                            same sd) and copies its buffers into the model.

load() (DistributedOptimizer.load_model_state_dict) does the same at any step
between steps. Missing or unexpected keys (strict) and mis-shaped tensors
raise ValueError naming every one, on every rank, before anything changes:
a rank that finds a problem makes the others' load fail too (an empty
load_params, which the workers refuse together). The optimizer state and the
step stay, as torch's optimizer keeps its state when a model is reloaded.

sharded() is this rank's contiguous 1/world of each group's parameters
(fsdp: unit by unit, so no rank ever holds the whole model);
merge_sharded_state_dicts() puts every rank's back together offline.

Threads: the training thread's, between steps.

Example:
    opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters()), model=model,
                                  strategy="fsdp")
    torch.save(model.state_dict(), "model.pt")        # full, as torch FSDP's default
    model.load_state_dict(torch.load("model.pt"))     # back onto the servers
    shard = opt.sharded_state_dict()                  # this rank's part
"""
import collections

import numpy as np
import torch


SHARDED_FORMAT = 1


class ModelState:
    """The model's state_dict and load_state_dict through Tessel (see the module's docs)."""

    def __init__(self, model, groups, rank_of=None):
        self.model = model
        self.groups = groups
        self.rank_of = rank_of  # () -> (rank, world_size)
        where = {id(p): (gi, i) for gi, g in enumerate(groups) for i, p in enumerate(g.params)}
        self.param_keys = collections.OrderedDict()  # key -> (group position, param index)
        for mname, module in model.named_modules(remove_duplicate=False):
            for pname, p in module._parameters.items():
                if p is not None and id(p) in where:
                    self.param_keys[f"{mname}.{pname}" if mname else pname] = where[id(p)]
        # Every key torch's state_dict has, with its shape (parameters as made).
        self.shapes = collections.OrderedDict(
            (k, tuple(v.shape)) for k, v in model.state_dict().items())
        self.buffer_keys = [k for k in self.shapes if k not in self.param_keys]
        self.handles = [
            model._register_state_dict_hook(self._state_dict_hook),
            model._register_load_state_dict_pre_hook(self._load_pre_hook),
        ]
        model._tessel_model_state = self  # load_pretrained finds the servers through it

    def _open(self):
        return all(g.worker is not None for g in self.groups)

    is_open = _open

    # --- state_dict ------------------------------------------------------------
    def _state_dict_hook(self, module, state_dict, prefix, local_metadata):
        if not self._open():
            return None
        values = self._gathered()
        for key, (gi, i) in self.param_keys.items():
            if (gi, i) in values and prefix + key in state_dict:
                state_dict[prefix + key] = values[(gi, i)]
        return None

    def _gathered(self):
        """(group position, index) -> the full value of each parameter that is not
        held now (fsdp's released units)."""
        out = {}
        for gi, g in enumerate(self.groups):
            for i, value in g.full_values().items():
                out[(gi, i)] = value
        return out

    def full_params(self):
        """Every parameter key -> its full value now (a copy)."""
        values = self._gathered()
        out = collections.OrderedDict()
        for key, (gi, i) in self.param_keys.items():
            v = values.get((gi, i))
            out[key] = v if v is not None else self.groups[gi].params[i].detach().clone()
        return out

    # --- load ----------------------------------------------------------------------
    def check(self, state_dict, strict=True):
        """ValueError naming every missing/unexpected (strict) or mis-shaped key."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise ValueError(f"a state_dict is a mapping of names to tensors, not "
                             f"{type(state_dict).__name__}")
        problems = []
        missing = sorted(k for k in self.shapes if k not in state_dict)
        unexpected = sorted(k for k in state_dict if k not in self.shapes)
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        bad = []
        for key, shape in self.shapes.items():
            if key not in state_dict:
                continue
            v = state_dict[key]
            if not isinstance(v, torch.Tensor):
                bad.append(f"{key} is a {type(v).__name__}, not a tensor")
            elif tuple(v.shape) != shape:
                bad.append(f"{key} is {list(v.shape)}, the model's {list(shape)}")
            elif key in self.param_keys and not v.is_floating_point():
                bad.append(f"{key} is {v.dtype}, not a floating-point tensor")
        if bad:
            problems.append("mis-shaped: " + "; ".join(bad))
        if problems:
            raise ValueError("load_state_dict: " + ". ".join(problems) +
                             ". Nothing was loaded, on any rank.")
        return missing, unexpected

    def load(self, state_dict, strict=True, buffers=True):
        """Checks `state_dict`, scatters its parameters to the servers (every rank
        calls this with the same values) and copies its buffers. Returns
        (missing keys, unexpected keys), as torch's load_state_dict."""
        try:
            missing, unexpected = self.check(state_dict, strict)
        except ValueError:
            self._abort()
            raise
        keys_of = collections.defaultdict(list)  # (group, index) -> its keys (tied: several)
        for key, where in self.param_keys.items():
            keys_of[where].append(key)
        current = None
        for gi, g in enumerate(self.groups):
            flat = []
            for i in range(len(g.params)):  # the group's order, not the model's
                given = [k for k in keys_of[(gi, i)] if k in state_dict]
                if given:
                    v = state_dict[given[0]]
                else:  # strict=False and not in state_dict, or not the model's: as it is
                    if current is None:
                        current = self._gathered()
                    v = current.get((gi, i), g.params[i])
                flat.append(v.detach().to("cpu", torch.float32).reshape(-1))
            values = torch.cat(flat).numpy() if flat else np.zeros(0, np.float32)
            g.load_params(values)
        if buffers:
            with torch.no_grad():
                named = dict(self.model.named_buffers())
                for key in self.buffer_keys:
                    if key in state_dict and key in named:
                        named[key].copy_(state_dict[key])
        return missing, unexpected

    def _abort(self):
        """Makes every other rank's load of this state_dict fail with this one."""
        try:
            self.groups[0].require_worker().load_params(np.zeros(0, np.float32))
        except Exception:  # the refusal this rank asked for
            pass

    def _load_pre_hook(self, state_dict, prefix, local_metadata, strict, missing_keys,
                       unexpected_keys, error_msgs):
        if not self._open():  # closed: the parameters are the model's own again
            return
        # The model's part of the dict (all of it, unless the model is a submodule
        # of what is being loaded).
        mine = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        self.load(mine, strict, buffers=False)
        # torch copies what is left: each parameter's entry becomes the parameter
        # itself (fsdp's released ones are empty tensors), so the copy is a no-op.
        for key, (gi, i) in self.param_keys.items():
            if prefix + key in state_dict:
                state_dict[prefix + key] = self.groups[gi].params[i].detach()

    # --- sharded ---------------------------------------------------------------------
    def sharded(self):
        """This rank's part: {"tessel_sharded": 1, "rank", "world_size", "params":
        {key: {"shape", "offset", "data"}}, "buffers": {key: tensor}} where each
        group's flat parameters [rank * n // W, (rank + 1) * n // W) are cut by tensor
        ("offset" in elements of the flattened tensor). Buffers are in every part."""
        rank, world = self.rank_of()
        params = collections.OrderedDict()
        for gi, g in enumerate(self.groups):
            n = sum(p_numel(s) for s in g.shapes)
            begin, end = rank * n // world, (rank + 1) * n // world
            for i, piece in g.flat_slice(begin, end).items():
                offset, data = piece
                for key, where in self.param_keys.items():
                    if where == (gi, i):
                        params[key] = {"shape": list(g.shapes[i]), "offset": offset, "data": data}
        named = dict(self.model.named_buffers())
        buffers = collections.OrderedDict(
            (k, named[k].detach().clone()) for k in self.buffer_keys if k in named)
        return {"tessel_sharded": SHARDED_FORMAT, "rank": rank, "world_size": world,
                "params": params, "buffers": buffers}

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        if getattr(self.model, "_tessel_model_state", None) is self:
            del self.model._tessel_model_state


def p_numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def merge_sharded_state_dicts(parts):
    """Every rank's DistributedOptimizer.sharded_state_dict() -> one full state dict
    (an OrderedDict of tensors, torch.save-able), checking that the parts are one
    world's and cover every parameter exactly once. ValueError otherwise."""
    parts = list(parts)
    if not parts or any(not isinstance(p, dict) or p.get("tessel_sharded") != SHARDED_FORMAT
                        for p in parts):
        raise ValueError("not a list of tessel.torch sharded_state_dict() parts")
    world = parts[0]["world_size"]
    ranks = sorted(p["rank"] for p in parts)
    if any(p["world_size"] != world for p in parts) or ranks != list(range(world)):
        raise ValueError(f"the parts are ranks {ranks} of world sizes "
                         f"{sorted(set(p['world_size'] for p in parts))}: need ranks 0..W-1 of one")
    shapes, pieces = collections.OrderedDict(), collections.defaultdict(list)
    for part in sorted(parts, key=lambda p: p["rank"]):
        for key, piece in part["params"].items():
            shape = tuple(piece["shape"])
            if shapes.setdefault(key, shape) != shape:
                raise ValueError(f"{key}: the parts disagree on its shape")
            pieces[key].append((piece["offset"], piece["data"]))
    out = collections.OrderedDict()
    for key, shape in shapes.items():
        flat = torch.empty(p_numel(shape), dtype=pieces[key][0][1].dtype)
        at = 0
        for offset, data in sorted(pieces[key], key=lambda x: x[0]):
            if offset != at:
                raise ValueError(f"{key}: elements [{min(at, offset)}, {max(at, offset)}) are "
                                 f"{'missing' if offset > at else 'in two parts'}")
            flat[offset:offset + data.numel()] = data.reshape(-1).cpu()
            at = offset + data.numel()
        if at != flat.numel():
            raise ValueError(f"{key}: elements [{at}, {flat.numel()}) are missing")
        out[key] = flat.view(shape)
    for key, value in parts[0]["buffers"].items():
        out[key] = value
    return out


