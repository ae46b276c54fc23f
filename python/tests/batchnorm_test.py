"""Buffers and BatchNorm without a cluster: convert_sync_batchnorm keeps the
structure, parameters, buffers and flags; SyncBatchNorm with one rank is
BatchNorm bitwise; two ranks as threads (fakes.ThreadWorld: the servers'
rank-order mean) each on half a batch equal BatchNorm on the whole batch;
BufferSync gives every rank rank 0's buffers bitwise, whatever their dtype."""
import os
import unittest
from unittest import mock

import torch
from torch import nn

import tessel.torch as tt
from fakes import ThreadWorld
from tessel.torch.buffers import BufferSync
from tessel.torch.session import Session

torch.set_num_threads(1)


class Net(nn.Module):
    """Conv + BatchNorm2d, a nested BatchNorm1d, a frozen BatchNorm2d."""

    def __init__(self, momentum=0.1):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum=momentum)
        self.frozen = nn.BatchNorm2d(4, affine=True)
        self.frozen.weight.requires_grad_(False)
        self.head = nn.Sequential(nn.Linear(4 * 4 * 4, 6), nn.BatchNorm1d(6, momentum=momentum),
                                  nn.ReLU(), nn.Linear(6, 3))
        with torch.no_grad():  # not the default ones and zeros
            for bn in (self.bn, self.frozen, self.head[1]):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = torch.relu(self.frozen(self.bn(self.conv(x))))
        return self.head(h.reshape(h.shape[0], -1))


def batch(step, n=8):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(n, 3, 4, 4, generator=g) * 2 + 0.5, torch.randint(0, 3, (n,), generator=g)


def state(model):
    return [t.detach().clone() for t in list(model.parameters()) + list(model.buffers())]


def train(model, steps, rows=slice(None), worker=None):
    """SGD on rows of each batch; with a worker, gradients averaged over its ranks."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1,
                          momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        if worker is not None:
            for p in model.parameters():
                if p.grad is not None:
                    g = p.grad.numpy().reshape(-1)
                    worker.all_reduce_mean(g)
        opt.step()
    return model


def rel(a, b):
    return max(float((x - y).abs().max() / max(y.abs().max(), 1e-30))
               for x, y in zip(a, b) if x.is_floating_point())


class ConvertTest(unittest.TestCase):
    def test_keeps_structure_parameters_buffers_and_flags(self):
        model = Net()
        model.frozen.eval()
        before = {n: m for n, m in model.named_modules()}
        params = {n: p for n, p in model.named_parameters()}
        buffers = {n: b for n, b in model.named_buffers()}
        out = tt.convert_sync_batchnorm(model)
        self.assertIs(out, model)
        for name in ("bn", "frozen", "head.1"):
            m = out.get_submodule(name)
            self.assertIsInstance(m, tt.SyncBatchNorm)
            self.assertIsInstance(m, torch.nn.modules.batchnorm._BatchNorm)
            old = before[name]
            self.assertEqual((m.num_features, m.eps, m.momentum, m.affine,
                              m.track_running_stats, m.training),
                             (old.num_features, old.eps, old.momentum, old.affine,
                              old.track_running_stats, old.training))
        self.assertFalse(out.frozen.training)
        self.assertTrue(out.bn.training)
        self.assertIs(out.conv, before["conv"])
        self.assertEqual(list(dict(out.named_parameters())), list(params))
        for n, p in out.named_parameters():
            self.assertIs(p, params[n], n)  # the same Parameter: requires_grad, optimizer
        self.assertFalse(out.frozen.weight.requires_grad)
        for n, b in out.named_buffers():
            self.assertIs(b, buffers[n], n)

    def test_a_batchnorm_itself_and_refusals(self):
        bn = nn.BatchNorm1d(5, eps=1e-3, momentum=None, affine=False)
        out = tt.convert_sync_batchnorm(bn)
        self.assertIsInstance(out, tt.SyncBatchNorm)
        self.assertIsNone(out.weight)
        self.assertIsNone(out.momentum)
        self.assertIs(tt.convert_sync_batchnorm(out), out, "already converted")
        with self.assertRaisesRegex(ValueError, "process_group must be None"):
            tt.SyncBatchNorm(3, process_group=object())
        with self.assertRaisesRegex(ValueError, "expected at least 2D input"):
            tt.SyncBatchNorm(3)(torch.zeros(3))


class OneRankTest(unittest.TestCase):
    def test_equals_batchnorm_bitwise(self):
        for momentum in (0.1, None):
            want = train(Net(momentum), 3)
            got = train(tt.convert_sync_batchnorm(Net(momentum)), 3)
            for a, b in zip(state(got), state(want)):
                self.assertTrue(torch.equal(a, b), f"momentum {momentum}")
            x, _ = batch(9)
            got.eval(), want.eval()
            self.assertTrue(torch.equal(got(x), want(x)))

    def test_unbound_in_a_job_of_two(self):
        s = Session()
        s.init(registry="r", job="j", rank=0, world_size=2)
        model = tt.convert_sync_batchnorm(Net())
        with mock.patch("tessel.torch.session.default_session", return_value=s):
            with self.assertRaisesRegex(RuntimeError, "before a DistributedOptimizer bound it"):
                model(batch(0)[0])
            model.eval()
            model(batch(0)[0])  # running statistics: nothing to synchronize


class TwoRanksTest(unittest.TestCase):
    def check_two_ranks(self, momentum, steps=4):
        want = train(Net(momentum), steps)
        models = [tt.convert_sync_batchnorm(Net(momentum)) for _ in range(2)]
        world = ThreadWorld(2)

        def rank(w):
            m = models[w.rank]
            for bn in m.modules():
                if isinstance(bn, tt.SyncBatchNorm):
                    bn._tessel_comm = lambda: w
            return train(m, steps, slice(4 * w.rank, 4 * w.rank + 4), worker=w)

        world.run(rank)
        for m in models:
            d = rel(state(m), state(want))
            self.assertLess(d, 1e-5, f"momentum {momentum}: {d:.3g}")
            self.assertTrue(torch.equal(m.bn.num_batches_tracked, want.bn.num_batches_tracked))
        for a, b in zip(state(models[0]), state(models[1])):
            self.assertTrue(torch.equal(a, b), "both ranks hold the same bits")
        # A forward collective per layer (W * (2C + 1) floats) and a backward one
        # (2C + 1), besides train()'s parameter means.
        self.assertIn(2 * (2 * 4 + 1), world.sizes)
        self.assertIn(2 * 6 + 1, world.sizes)
        return d

    def test_equal_to_one_process_on_the_whole_batch(self):
        worst = max(self.check_two_ranks(0.1), self.check_two_ranks(None))
        print(f"\ntwo ranks vs one process, worst max|d|/max|ref|: {worst:.3g}")


class BufferSyncTest(unittest.TestCase):
    def test_every_rank_gets_rank_0s_bits(self):
        def make(rank):
            m = nn.Module()
            m.bn = nn.BatchNorm1d(3)
            m.register_buffer("count", torch.tensor(7 + rank, dtype=torch.int64))
            m.register_buffer("flags", torch.tensor([rank == 0, True, False]))
            m.register_buffer("wide", torch.randn(2, 3, dtype=torch.float64))
            m.register_buffer("brain", torch.randn(5).to(torch.bfloat16))
            m.register_buffer("odd", torch.arange(3, dtype=torch.uint8) + rank)
            with torch.no_grad():
                m.bn.running_mean.normal_()
                m.bn.running_var.uniform_(0.5, 2)
                m.bn.running_mean[0] = float("nan") if rank == 0 else 1.0
                m.bn.num_batches_tracked.fill_(3 * rank + 1)
            return m

        models = [make(r) for r in range(2)]
        want = [b.clone() for b in models[0].buffers()]
        syncs = [BufferSync(m) for m in models]
        sizes = ThreadWorld(2).run(lambda w: syncs[w.rank].sync(w))
        self.assertEqual(sizes[0], sum(b.numel() * b.element_size() for b in want))
        for m in models:
            for a, b in zip(m.buffers(), want):
                self.assertEqual(a.dtype, b.dtype)
                self.assertTrue(torch.equal(a.reshape(-1).view(torch.uint8),
                                            b.reshape(-1).view(torch.uint8)))
        self.assertEqual(syncs[1].syncs, 1)

    def test_nothing_to_do(self):
        one = ThreadWorld(1)
        self.assertEqual(one.run(lambda w: BufferSync(make_bn()).sync(w)), [0])
        self.assertEqual(ThreadWorld(2).run(lambda w: BufferSync(None).sync(w)), [0, 0])
        self.assertEqual(ThreadWorld(2).run(lambda w: BufferSync(nn.Linear(2, 2)).sync(w)),
                         [0, 0])


def make_bn():
    return nn.BatchNorm1d(2)


if __name__ == "__main__":
    os.environ.pop("TESSEL_WORLD_SIZE", None)
    unittest.main()
