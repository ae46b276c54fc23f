"""Fakes for tessel.torch's unit tests: a worker that records what it is asked,
and a tiny two-module model.

FakeWorker implements the calls tessel.torch's groups make of tessel.Worker
for fsdp (register_layout, unit_range, gather, unit_grads, prefetch, release,
push_unit, finish_step, set_optimizer, gather_all, close) and the job-wide
reduction (all_reduce_mean, with a fixed "other ranks" contribution). It
keeps the registered values, hands out one gradient buffer per unit until
that unit is pushed, and records every call in `calls`.

Example:
    w = FakeWorker(units=[0, 2])
    w.register_layout(names, shapes, flat)
    w.gather(0)            # the values of unit 0's tensors
    w.calls                # [("register_layout",), ("gather", 0)]
"""
import numpy as np
import torch
from torch import nn


class FakeWorker:
    def __init__(self, units=(), others=None):
        self.units = list(units)  # index of each unit's first tensor
        self.others = others  # all_reduce_mean: the other ranks' vectors, summed
        self.calls = []
        self.values = None
        self.sizes = []
        self.grads = {}
        self.pushed = {}  # unit -> the gradient it pushed (a copy)
        self.parts = {}  # unit -> the sum of its parts pushed this step
        self.hyper = None

    def _range(self, u):
        firsts = self.units + [len(self.sizes)]
        begin = sum(self.sizes[:firsts[u]])
        return begin, begin + sum(self.sizes[firsts[u]:firsts[u + 1]])

    def register_layout(self, names, shapes, flat):
        self.calls.append(("register_layout",))
        self.sizes = [int(np.prod(s)) for s in shapes]
        self.values = np.array(flat, dtype=np.float32)

    def unit_range(self, u):
        return self._range(u)

    def gather(self, u):
        self.calls.append(("gather", u))
        b, e = self._range(u)
        return self.values[b:e].copy()

    def unit_grads(self, u):
        if u not in self.grads:
            b, e = self._range(u)
            self.grads[u] = np.zeros(e - b, dtype=np.float32)
        return self.grads[u]

    # Mixed precision (bf16): the values and gradients as 16-bit patterns.
    def gather_half(self, u):
        self.calls.append(("gather", u))
        b, e = self._range(u)
        return torch.from_numpy(self.values[b:e].copy()).bfloat16().view(torch.int16).numpy()

    def unit_half_grads(self, u):
        if u not in self.grads:
            b, e = self._range(u)
            self.grads[u] = np.zeros(e - b, dtype=np.int16)
        return self.grads[u]

    def prefetch(self, u):
        self.calls.append(("prefetch", u))

    def release(self, u):
        self.calls.append(("release", u))

    def push_unit(self, u):
        self.calls.append(("push_unit", u))
        grads = self.grads.get(u)
        if grads is not None and grads.dtype == np.int16:  # bf16 widened
            grads = torch.from_numpy(grads).view(torch.bfloat16).float().numpy()
        elif grads is None:
            grads = self.unit_grads(u)
        self.pushed[u] = self.parts.pop(u, 0) + grads  # as the servers sum
        self.grads.pop(u, None)

    def push_unit_part(self, u):
        """A micro-batch part: the servers add it to the unit's push of the step."""
        self.calls.append(("push_unit_part", u))
        self.parts[u] = self.parts.get(u, 0) + self.unit_grads(u)
        del self.grads[u]

    def finish_step(self):
        self.calls.append(("finish_step",))

    def set_optimizer(self, hyper):
        self.calls.append(("set_optimizer",))
        self.hyper = hyper

    def gather_all(self):
        return self.values.copy()

    def close(self):
        self.calls.append(("close",))

    def all_reduce_mean(self, v):
        self.calls.append(("all_reduce_mean", len(v)))
        if self.others is not None:
            v += np.asarray(self.others, dtype=np.float32)
            v /= 2

    def named(self, name):
        return [c for c in self.calls if c[0] == name]


class TwoLayers(nn.Module):
    """Two top-level modules: two fsdp units (a: 2 tensors, b: 2 tensors)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))
