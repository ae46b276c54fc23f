"""Fakes for tessel.torch's unit tests: a worker that records what it is asked,
and a tiny two-module model.

FakeWorker implements the calls tessel.torch's groups make of tessel.Worker
for fsdp (register_layout, unit_range, gather, unit_grads, prefetch, release,
push_unit, finish_step, set_optimizer, gather_all, close) and the job-wide
reduction (all_reduce_mean, with a fixed "other ranks" contribution). It
keeps the registered values, hands out one gradient buffer per unit until
that unit is pushed, and records every call in `calls`. FakeFlatWorker adds
a flat group's (flat.py): params and grads (its buffers), gradients_ready,
step, and synchronize_gradients (one rank's gradients as the mean).
ThreadWorld runs W ranks as threads whose RankWorkers' all_reduce_mean and
broadcast meet as the servers' rank-order mean would (SyncBatchNorm and BufferSync without a
cluster). MeshWorld runs a hybrid job's dp x tp x pp ranks as threads over an
in-memory mailbox with tessel.Mesh's interface (tags, sends and receives,
the collectives), for tessel.torch.parallel without a cluster.

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

    def _add_part(self, u):
        """The unit's buffer added to its parts so far, as the servers add: in its
        precision (bf16: each add rounded to bf16)."""
        grads = self.grads.get(u)
        if grads is not None and grads.dtype == np.int16:
            half = torch.from_numpy(grads.copy()).view(torch.bfloat16)
            return half if u not in self.parts else self.parts[u] + half
        if grads is None:
            grads = self.unit_grads(u)
        return self.parts.get(u, 0) + grads

    def push_unit(self, u):
        self.calls.append(("push_unit", u))
        total = self._add_part(u)
        self.parts.pop(u, None)
        if isinstance(total, torch.Tensor):  # bf16 widened
            total = total.float().numpy()
        self.pushed[u] = total
        self.grads.pop(u, None)

    def push_unit_part(self, u):
        """A micro-batch part: the servers add it to the unit's push of the step."""
        self.calls.append(("push_unit_part", u))
        self.parts[u] = self._add_part(u)
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


class FakeFlatWorker(FakeWorker):
    """FakeWorker for a flat group (flat.py): its buffers and calls."""

    def __init__(self):
        super().__init__()
        del self.grads  # fsdp's per-unit buffers; a flat group calls grads()
        self.grad_buffer = None

    def params(self):
        return self.values

    def grads(self):
        if self.grad_buffer is None:
            self.grad_buffer = np.zeros_like(self.values)
        return self.grad_buffer

    def gradients_ready(self, begin, end):
        self.calls.append(("gradients_ready", begin, end))

    def step(self):
        self.calls.append(("step",))

    def synchronize_gradients(self):
        """This rank's gradients as the mean (one rank)."""
        self.calls.append(("synchronize_gradients",))
        return self.grads().copy()


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


class MeshWorld:
    """dp x tp x pp ranks of a hybrid job (worker/hybrid.h's numbering: t = r % tp,
    p = (r / tp) % pp, d = r / (tp * pp)) as threads, each with a FakeMesh that
    implements what tessel.torch.parallel calls of tessel.Mesh. Messages go
    through one mailbox keyed (sender, receiver, tag), as the real mesh's are:
    the collectives are built from them (all_reduce_sum sums in member order in
    float32, in place; every member gets the same bits), so a tag that two ranks
    compute differently waits (TimeoutError naming it after `timeout` seconds)
    and a tag sent twice while the first is still in flight raises
    AssertionError ("tag collision"). A mailbox rather than ThreadWorld's barrier:
    pipeline messages are point to point and out of step. run(fn) runs
    fn(mesh) on every rank and returns the results in rank order; the first
    failure ends every other rank's wait and is re-raised.

    Example:
        w = MeshWorld(tp=2)
        sums = w.run(lambda m: m.all_reduce_sum(m.tensor_group, m.tag(3, 0, 0, 0),
                                                np.ones(2, np.float32), "x"))
    """

    def __init__(self, tp=1, pp=1, dp=1, timeout=20.0):
        import threading
        self.tp, self.pp, self.dp = tp, pp, dp
        self.world = tp * pp * dp
        self.timeout = timeout
        self.cond = threading.Condition()
        self.inbox = {}  # (sender, receiver, tag) -> bytes, in flight
        self.failed = None  # the first rank's failure, which ends every wait

    def coords(self, r):
        return r // (self.tp * self.pp), (r // self.tp) % self.pp, r % self.tp

    def rank_of(self, d, p, t):
        return (d * self.pp + p) * self.tp + t

    def post(self, src, dst, tag, data):
        with self.cond:
            if (src, dst, tag) in self.inbox:
                raise AssertionError(f"tag collision: rank {src} sent tag {tag:#x} to rank "
                                     f"{dst} while the last one is still in flight")
            self.inbox[(src, dst, tag)] = data
            self.cond.notify_all()

    def take(self, src, dst, tag, what):
        import time
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while (src, dst, tag) not in self.inbox:
                if self.failed is not None:
                    raise RuntimeError(f"rank {dst} gave up waiting: {self.failed!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"rank {dst} waited {self.timeout} s for {what} from "
                                       f"rank {src} (tag {tag:#x})")
                self.cond.wait(left)
            return self.inbox.pop((src, dst, tag))

    def in_flight(self):
        with self.cond:
            return sorted(self.inbox)

    def run(self, fn):
        import threading
        results, errors = [None] * self.world, []

        def body(r):
            try:
                results[r] = fn(FakeMesh(self, r))
            except BaseException as e:  # noqa: B902 (re-raised below)
                with self.cond:
                    errors.append(e)
                    if self.failed is None:
                        self.failed = e
                    self.cond.notify_all()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.failed = None
        if errors:
            raise errors[0]
        return results


def _payload(data):
    if isinstance(data, bytes):
        return data
    view = memoryview(data)
    if not view.contiguous:
        raise ValueError("the buffer must be contiguous")
    return view.tobytes()


class FakeMesh:
    """One rank of a MeshWorld: tessel.Mesh's attributes and calls (see MeshWorld)."""

    def __init__(self, world, rank):
        self.w, self.rank = world, rank
        self.world_size, self.dp, self.tp, self.pp = world.world, world.dp, world.tp, world.pp
        self.coords = world.coords(rank)
        d, p, t = self.coords
        self.tensor_group = [world.rank_of(d, p, x) for x in range(world.tp)]
        self.data_group = [world.rank_of(x, p, t) for x in range(world.dp)]
        self.pipeline_group = [world.rank_of(d, x, t) for x in range(world.pp)]
        self.next_rank = world.rank_of(d, p + 1, t) if p + 1 < world.pp else -1
        self.prev_rank = world.rank_of(d, p - 1, t) if p > 0 else -1
        self.replacement = False
        self.generation = 0
        self.attached = None  # attach()'s worker
        self.calls = []  # ("attach", worker), ("recover", why), ("finish",), ("close",)

    def describe(self, rank):
        d, p, t = self.w.coords(rank)
        return f"rank {rank} (d{d} p{p} t{t})"

    def tag(self, kind, step, micro_batch, index):
        if not (1 <= kind <= 255 and 0 <= step < 1 << 32 and 0 <= micro_batch <= 4095
                and 0 <= index <= 4095):
            raise ValueError(f"mesh tag out of range: kind {kind}, step {step}, micro-batch "
                             f"{micro_batch}, index {index}")
        return (kind << 56) | (step << 24) | (micro_batch << 12) | index

    def _members(self, members):
        members = list(members)
        if members != sorted(set(members)) or self.rank not in members:
            raise ValueError(f"bad members {members} for rank {self.rank}")
        return members

    def _peer(self, peer):
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"peer {peer}: not another rank of [0, {self.world_size})")

    def send(self, peer, tag, data):
        self._peer(peer)
        self.w.post(self.rank, peer, tag, _payload(data))

    def recv(self, peer, tag, what):
        self._peer(peer)
        return self.w.take(peer, self.rank, tag, what)

    def all_gather(self, members, tag, data, what):
        members = self._members(members)
        mine = _payload(data)
        for m in members:
            if m != self.rank:
                self.w.post(self.rank, m, tag, mine)
        return [mine if m == self.rank else self.w.take(m, self.rank, tag, what)
                for m in members]

    def all_reduce_sum(self, members, tag, data, what):
        if not (isinstance(data, np.ndarray) and data.dtype == np.float32
                and data.flags.c_contiguous):
            raise TypeError("all_reduce_sum: a C-contiguous float32 NumPy array (summed in "
                            "place)")
        if not data.flags.writeable:
            raise ValueError("all_reduce_sum: the array is read-only")
        parts = self.all_gather(members, tag, data, what)
        if any(len(b) != data.nbytes for b in parts):
            raise ValueError(f"all_reduce_sum {what}: members gave different sizes")
        total = np.frombuffer(parts[0], dtype=np.float32).copy()
        for b in parts[1:]:
            total += np.frombuffer(b, dtype=np.float32)
        data.reshape(-1)[...] = total

    def broadcast(self, members, root, tag, data, what):
        members = self._members(members)
        if self.rank == root:
            mine = _payload(data)
            for m in members:
                if m != root:
                    self.w.post(root, m, tag, mine)
            return mine
        return self.w.take(root, self.rank, tag, what)

    def barrier(self, members, tag, what):
        self.all_gather(members, tag, b"", what)

    def attach(self, worker):
        self.calls.append(("attach", worker))
        self.attached = worker

    def recover(self, why):
        self.calls.append(("recover", why))
        self.generation += 1

    def finish(self):
        self.calls.append(("finish",))

    def close(self):
        self.calls.append(("close",))
