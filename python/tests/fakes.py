"""Fakes for tessel.torch's unit tests: a worker that records what it is asked,
and a tiny two-module model.

FakeWorker implements the calls tessel.torch's groups make of tessel.Worker
for fsdp (register_layout, unit_range, gather, unit_grads, prefetch, release,
push_unit, finish_step, set_optimizer, gather_all, close) and the job-wide
reduction (all_reduce_mean, with a fixed "other ranks" contribution). It
keeps the registered values, hands out one gradient buffer per unit until
that unit is pushed, and records every call in `calls`. ThreadWorld runs W
ranks as threads whose RankWorkers' all_reduce_mean and broadcast meet as the
servers' rank-order mean would (SyncBatchNorm and BufferSync without a
cluster).

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


class ThreadWorld:
    """W ranks as threads of one process, for collectives without a cluster: each
    rank's RankWorker has world_size, rank, all_reduce_mean (the sum in rank order
    in float32, then / W, as the servers reduce) and broadcast (root's bytes).
    run(fn) runs fn(worker) on W threads and returns their results in rank order
    (re-raising the first exception).

    Example:
        means = ThreadWorld(2).run(lambda w: w.all_reduce_mean(np.ones(3, np.float32)))
    """

    def __init__(self, world):
        import threading
        self.world = world
        self.barrier = threading.Barrier(world, timeout=30)
        self.slots = [None] * world
        self.sizes = []  # every all_reduce_mean's size, in call order (rank 0's)

    def _mean(self, rank, v):
        self.slots[rank] = np.array(v, dtype=np.float32)
        self.barrier.wait()
        total = self.slots[0].copy()
        for other in self.slots[1:]:
            total += other
        if rank == 0:
            self.sizes.append(len(v))
        self.barrier.wait()
        v[...] = total / np.float32(self.world)

    def run(self, fn):
        import threading
        results, errors = [None] * self.world, []

        def body(r):
            try:
                results[r] = fn(RankWorker(self, r))
            except BaseException as e:  # noqa: B902 (re-raised below)
                errors.append(e)
                self.barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


class RankWorker:
    """One rank of a ThreadWorld (the collectives of tessel.Worker)."""

    def __init__(self, world, rank):
        self.w, self.rank, self.world_size = world, rank, world.world

    def all_reduce_mean(self, v):
        self.w._mean(self.rank, v)

    def broadcast(self, data, root=0):
        raw = data.view(np.uint8).reshape(-1)
        words = np.zeros((raw.size + 1) // 2, dtype=np.float32)
        if self.rank == root:
            padded = np.zeros(words.size * 2, dtype=np.uint8)
            padded[:raw.size] = raw
            words[:] = padded.view(np.uint16)
        self.w._mean(self.rank, words)
        back = np.rint(words.astype(np.float64) * self.world_size).astype(np.uint16)
        raw[:] = back.view(np.uint8)[:raw.size]
