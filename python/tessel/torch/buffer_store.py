"""BufferStore: the model's buffers in the shard servers' checkpoints.

Contract. A model's buffers (its state_dict entries that are not parameters:
BatchNorm's running_mean, running_var and int64 num_batches_tracked, any
persistent registered buffer) live in a job of their own, J.buffers
(tessel.buffers_job_name), that rank 0 alone joins (world size 1). Its
"parameters" are the buffers' bytes, each buffer one layout tensor named
`KEY@DTYPE[D0,D1,...]` (layout_name/parse_name) of ceil(bytes / 4) float32
words (at least one), so every dtype travels bitwise; the servers never
compute on them (each write's step skips every tensor).

Rank 0 writes the buffers at each step s that is a checkpoint step of J
(s % checkpoint_every_steps == 0), before J's step s is applied (its forward
and backward are done, so the buffers are those after step s): J.buffers is
loaded at step s - 1 (deserialize) and stepped once with every tensor skipped,
so its servers checkpoint it at step s (every_steps 1). Between checkpoint
steps nothing happens: the step's data path is J's alone. The job is made
with checkpoint_initial when J is (recovery), so step 0 has its buffers too.

restore(s) puts the buffers of step s back into the model (rank 0): from the
copies of the last KEEP writes it holds, else from J.buffers itself (at s:
its values; otherwise worker.recover_to(s)). Before copying anything it
checks every buffer against the model (present, same dtype and shape) and
raises ValueError naming each difference; the model is then unchanged.

tesselctl checkpoint export reads J.buffers at the step it exports and
writes each buffer under KEY with its dtype (client/checkpoint_export.cc).

Threads: the training thread's.

Example (what DistributedOptimizer does on rank 0):
    store = BufferStore(model, every=3)
    store.connect(cfg, job, recovery=True)
    if store.due(step + 1): store.write(step + 1)   # in step(), before J's step
    store.restore(opt.step_count)                    # after a rollback
"""
import collections
import re

import numpy as np
import torch

import tessel

# The dtypes a buffer may have, with their names in layout names and export
# files (client/tensor_files/named_tensor.h uses the same names).
DTYPES = collections.OrderedDict([
    (torch.float32, "float32"), (torch.float64, "float64"), (torch.float16, "float16"),
    (torch.bfloat16, "bfloat16"), (torch.int64, "int64"), (torch.int32, "int32"),
    (torch.int16, "int16"), (torch.int8, "int8"), (torch.uint8, "uint8"), (torch.bool, "bool"),
])
_BY_NAME = {v: k for k, v in DTYPES.items()}
_NAME = re.compile(r"^(.+)@([a-z0-9]+)\[([0-9,]*)\]$")
# Writes whose buffers rank 0 keeps in memory for a rollback (the servers keep
# CheckpointPolicy.keep_last = 3 checkpoints by default).
KEEP = 4


def layout_name(key, tensor):
    """The layout tensor name of buffer `key`: KEY@DTYPE[D0,D1,...]."""
    return f"{key}@{DTYPES[tensor.dtype]}[{','.join(str(d) for d in tensor.shape)}]"


def parse_name(name):
    """(key, torch dtype, shape) of a layout name; ValueError if it is not one."""
    m = _NAME.match(name)
    if m is None or m.group(2) not in _BY_NAME:
        raise ValueError(f"{name!r} is not a buffer's layout name (KEY@DTYPE[D0,D1,...])")
    dims = m.group(3)
    return m.group(1), _BY_NAME[m.group(2)], tuple(int(d) for d in dims.split(",")) if dims else ()


def words(nbytes):
    """float32 words holding `nbytes` bytes (at least one: a layout tensor is not empty)."""
    return max(1, (nbytes + 3) // 4)


def persistent_buffers(model):
    """key -> buffer for the model's buffers that its state_dict holds (the same
    keys, in state_dict's order), without running state_dict (which gathers
    fsdp's parameters)."""
    out = collections.OrderedDict()
    for mname, module in model.named_modules(remove_duplicate=False):
        for bname, b in module._buffers.items():
            if b is not None and bname not in module._non_persistent_buffers_set:
                out[f"{mname}.{bname}" if mname else bname] = b
    return out


def encode(buffers):
    """(names, shapes, flat float32 array): the layout of `buffers` (key -> tensor)
    and their bytes, each padded with zeros to whole words."""
    names, shapes, parts = [], [], []
    for key, b in buffers.items():
        if b.dtype not in DTYPES:
            raise ValueError(f"buffer {key} is {b.dtype}; checkpoints hold buffers of "
                             f"{', '.join(DTYPES.values())}")
        raw = b.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy()
        n = words(raw.size)
        padded = np.zeros(n * 4, np.uint8)
        padded[:raw.size] = raw
        names.append(layout_name(key, b))
        shapes.append([n])
        parts.append(padded.view(np.float32))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return names, shapes, flat


def decode(names, flat):
    """key -> tensor (its dtype and shape) from a layout's names and its words."""
    out = collections.OrderedDict()
    raw = np.ascontiguousarray(flat, dtype=np.float32).view(np.uint8)
    at = 0
    for name in names:
        key, dtype, shape = parse_name(name)
        count = 1
        for d in shape:
            count *= d
        nbytes = count * torch.empty(0, dtype=dtype).element_size()
        n = words(nbytes)
        if at + n * 4 > raw.size:
            raise ValueError(f"buffer {key}: the stored values end before it")
        chunk = torch.from_numpy(raw[at:at + nbytes].copy())
        out[key] = chunk.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
        at += n * 4
    if at != raw.size:
        raise ValueError(f"the stored buffers hold {raw.size} bytes; their names {at}")
    return out


def check_fits(model_buffers, saved, when):
    """ValueError naming every buffer of `saved` the model lacks, every model buffer
    `saved` lacks, and every one whose dtype or shape differs."""
    problems = []
    missing = sorted(k for k in model_buffers if k not in saved)
    unexpected = sorted(k for k in saved if k not in model_buffers)
    if missing:
        problems.append("not in the checkpoint: " + ", ".join(missing))
    if unexpected:
        problems.append("not buffers of the model: " + ", ".join(unexpected))
    for key, b in model_buffers.items():
        s = saved.get(key)
        if s is not None and (s.dtype != b.dtype or tuple(s.shape) != tuple(b.shape)):
            problems.append(f"{key} is {s.dtype} {list(s.shape)} in the checkpoint, "
                            f"{b.dtype} {list(b.shape)} in the model")
    if problems:
        raise ValueError(f"the model's buffers do not match {when}: " + "; ".join(problems) +
                         ". No buffer was changed.")


class BufferStore:
    """Rank 0's writer and reader of J.buffers (see the module's docs)."""

    def __init__(self, model, every):
        self.model = model
        self.every = int(every)
        self.worker = None
        self.names = None
        self.template = None
        self.kept = collections.OrderedDict()  # step -> flat words written at that step
        self.writes = 0

    def buffers(self):
        return persistent_buffers(self.model)

    def connect(self, cfg, job, recovery):
        """Joins J.buffers as its only rank (rank 0 of J calls this) and registers
        the buffers' layout, the model's values as its initial ones."""
        names, shapes, flat = encode(self.buffers())
        self.worker = tessel.Worker(
            cfg["registry"], tessel.buffers_job_name(job), 0, 1, strategy="zero2",
            optimizer={"kind": "sgd", "lr": 0.0, "weight_decay": 0.0, "momentum": 0.0,
                       "dampening": 0.0, "nesterov": False},
            num_servers=cfg["num_servers"], ucx_tls=cfg["ucx_tls"],
            connect_timeout_s=cfg["connect_timeout_s"], step_timeout_s=cfg["step_timeout_s"],
            token=cfg["token"], recovery=recovery, auto_resume=recovery,
            checkpoint_every_steps=1, checkpoint_initial=recovery,
            rejoin_in_place=False)  # rank 0 alone: a restart restores its checkpoint
        self.worker.register_layout(names, shapes, flat)
        self.names = names
        self.template = self.worker.serialize()

    def due(self, step):
        return self.worker is not None and step > 0 and step % self.every == 0

    def write(self, step):
        """The model's buffers now as J.buffers' checkpoint of `step`."""
        names, _, flat = encode(self.buffers())
        if names != self.names:
            changed = sorted(set(names) ^ set(self.names))
            raise ValueError(f"the model's buffers changed since the optimizer was made "
                             f"({', '.join(changed)}): a checkpoint holds the buffers it "
                             f"started with")
        self.worker.deserialize(tessel.train_state_at(self.template, step - 1, flat))
        self.worker.skip_tensors(list(range(len(names))))
        self.worker.step()
        self.kept[step] = flat
        while len(self.kept) > KEEP:
            self.kept.popitem(last=False)
        self.writes += 1

    def stored(self, step):
        """key -> tensor: the buffers of checkpoint `step`."""
        flat = self.kept.get(step)
        if flat is None:
            if self.worker.current_step != step:
                self.worker.recover_to(step)
            flat = np.array(self.worker.params(), copy=True)
        return decode(self.names, flat)

    def restore(self, step):
        """The buffers of checkpoint `step` into the model (all or none)."""
        saved = self.stored(step)
        mine = self.buffers()
        check_fits(mine, saved, f"the checkpoint of step {step}")
        with torch.no_grad():
            for key, b in mine.items():
                b.copy_(saved[key])
        # Later writes belong to steps the job will redo.
        for s in [s for s in self.kept if s > step]:
            del self.kept[s]

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None
