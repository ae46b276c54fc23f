"""DistributedOptimizer's state_dict() and load_state_dict(): the whole training
state, with the wrapped torch optimizer's param_groups as torch keeps them.

Contract. state_dict(opt) returns
    {"tessel": 1,
     "groups": [bytes, ...],        # per Tessel job (non-empty parameter group): the
                                    # parameters, optimizer state and step
                                    # (worker.serialize(): portable across world sizes,
                                    # shard counts and strategies)
     "param_groups": [...],         # torch's optimizer.state_dict()["param_groups"]:
                                    # every group's hyper-parameters (lr, betas,
                                    # momentum, weight_decay, a scheduler's initial_lr,
                                    # ...) and "params", torch's parameter indices
     "scaler": {...}}               # the loss scaler's state (only with loss scaling)
load_state_dict(opt, state) checks all of it before anything changes (group
counts, each group's size, the hyper-parameters the optimizer's rule reads,
each job's tensors as the blob's header lists them, the scaler's state):
ValueError naming the difference, and nothing changed on this rank. Then it
loads every job (collective: every rank passes the same state), puts the saved
param_groups into the torch optimizer as torch's load_state_dict does (so a
learning-rate scheduler made on it, whose own state_dict() the user saves and
loads beside, continues where it was), and the groups send the restored
settings to the servers before the next step's pushes. A state without
"param_groups" (written before they were kept) loads the jobs and leaves the
torch optimizer's settings as they are. Threads: the training thread's.

Example:
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, path)
    ...                                       # a new launch, any world size
    ck = torch.load(path)
    opt.load_state_dict(ck["opt"]); sched.load_state_dict(ck["sched"])
"""
import json
import struct

from tessel.torch.hyper import torch_hyper
from tessel.torch.scaler import LossScaler

_MAGIC = b"TESSELTS"  # worker/train_state.h
_MAX_HEADER = 16 << 20


def state_dict(opt):
    """The whole training state of `opt` (see the module's docs); collective."""
    state = {"tessel": 1, "groups": [g.require_worker().serialize() for g in opt._groups],
             "param_groups": opt.optimizer.state_dict()["param_groups"]}
    if opt._scaler.enabled:
        state["scaler"] = opt._scaler.state_dict()
    return state


def _blob_tensors(blob, index):
    """The [(name, shape)] a serialize() blob's header lists (ValueError if unreadable)."""
    if not isinstance(blob, (bytes, bytearray)) or len(blob) < 16 or blob[:8] != _MAGIC:
        raise ValueError(f"the state's job {index} is not a Tessel training state blob")
    _, size = struct.unpack_from("<II", blob, 8)
    if size > _MAX_HEADER or 16 + size > len(blob):
        raise ValueError(f"the state's job {index}: its header length {size} does not fit")
    try:
        header = json.loads(bytes(blob[16:16 + size]).decode("utf-8"))
        return [(t["name"], [int(d) for d in t["shape"]]) for t in header["tensors"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the state's job {index}: unreadable header ({e})") from e


def _check_blob(g, blob, index):
    """The blob's tensors are the group's (count and shapes) before any job loads."""
    tensors = _blob_tensors(blob, index)
    mine = [list(s) if s else [1] for s in g.shapes]
    if len(tensors) != len(mine):
        raise ValueError(f"parameter group {g.index} has {len(mine)} parameters; the state's "
                         f"job {index} holds {len(tensors)} tensors")
    for i, ((name, shape), want) in enumerate(zip(tensors, mine)):
        if shape != want:
            raise ValueError(f"parameter group {g.index}'s parameter {g.names[i]} is "
                             f"{tuple(want)}; the state's {name} is {tuple(shape)}")


def _check_param_groups(optimizer, saved):
    """ValueError unless the saved torch param_groups fit `optimizer`'s groups."""
    groups = optimizer.param_groups
    if not isinstance(saved, list) or not all(isinstance(s, dict) for s in saved):
        raise ValueError("the state's param_groups is not a list of torch parameter groups")
    if len(saved) != len(groups):
        raise ValueError(f"{len(groups)} parameter group(s) in this optimizer, {len(saved)} in "
                         f"the state: make the torch optimizer with the groups it was saved with")
    for i, (mine, theirs) in enumerate(zip(groups, saved)):
        params = theirs.get("params")
        if not isinstance(params, list):
            raise ValueError(f"the state's parameter group {i} has no 'params' list")
        if len(params) != len(mine["params"]):
            raise ValueError(f"parameter group {i} has {len(mine['params'])} parameters in this "
                             f"optimizer, {len(params)} in the state")
        if not mine["params"]:
            continue
        try:  # what this optimizer's rule reads of a group (torch fills in the rest)
            torch_hyper(optimizer, dict(theirs, params=mine["params"]))
        except KeyError as e:
            raise ValueError(f"the state's parameter group {i} lacks {e.args[0]!r} (saved from "
                             f"another kind of torch optimizer?)") from e
        except (TypeError, ValueError) as e:
            raise ValueError(f"the state's parameter group {i}: {e}") from e


def load_state_dict(opt, state):
    """Loads a state_dict() into `opt` (see the module's docs); collective."""
    if not isinstance(state, dict) or state.get("tessel") != 1:
        raise ValueError("not a tessel.torch DistributedOptimizer state_dict")
    blobs = state.get("groups")
    if not isinstance(blobs, list):
        raise ValueError("the state has no list of Tessel jobs ('groups')")
    if len(blobs) != len(opt._groups):
        raise ValueError(f"the state holds {len(blobs)} Tessel job(s) (one per non-empty "
                         f"parameter group), this optimizer {len(opt._groups)}")
    saved = state.get("param_groups")
    if saved is not None:
        _check_param_groups(opt.optimizer, saved)
    for i, (g, blob) in enumerate(zip(opt._groups, blobs)):
        _check_blob(g, blob, i)
    scaler = state.get("scaler") if opt._scaler.enabled else None
    if scaler is not None:
        LossScaler.check_state(scaler)
    for g, blob in zip(opt._groups, blobs):
        g.require_worker().deserialize(blob)
        g.loaded()
    if saved is not None:  # torch's own load: its checks passed above, so it changes them all
        opt.optimizer.load_state_dict({"state": {}, "param_groups": saved})
        for g in opt._groups:
            g.hyper = None  # the next sync_hyper sends the restored settings
    if scaler is not None:
        opt._scaler.load_state_dict(scaler)
