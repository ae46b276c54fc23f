"""A step's job-wide decisions (agree.py) and clip_grad_norm_'s norm and factor
(clip.py), over fake groups and a fake worker."""
import unittest

import torch

import fakes
from tessel.torch.agree import agree
from tessel.torch.clip import clip_factor, total_norm


class FakeGroup:
    def __init__(self, names, has_grad, grads, worker=None):
        self.names = names
        self.params = names
        self.has_grad = has_grad
        self.grads = grads
        self.worker = worker

    def grad_tensors(self):
        return self.grads

    def require_worker(self):
        return self.worker


class AgreeTest(unittest.TestCase):
    def test_nothing_asked_no_reduction(self):
        w = fakes.FakeWorker()
        g = FakeGroup(["a"], [True], [torch.ones(1)], w)
        self.assertEqual(agree([g], find_unused=False, check_overflow=False), (False, None))
        self.assertEqual(w.calls, [])

    def test_a_missing_gradient_is_named(self):
        g = FakeGroup([f"p{i}" for i in range(7)], [False] * 7, [], fakes.FakeWorker())
        with self.assertRaisesRegex(ValueError, r"parameter\(s\) p0, p1, p2, p3, p4 \.\.\. got no"):
            agree([g], find_unused=False, check_overflow=True)

    def test_overflow_anywhere_skips(self):
        w = fakes.FakeWorker(others=[0.0])
        g = FakeGroup(["a"], [True], [torch.tensor([1.0, float("inf")])], w)
        self.assertEqual(agree([g], find_unused=False, check_overflow=True), (True, None))
        w = fakes.FakeWorker(others=[1.0])  # another rank overflowed
        g = FakeGroup(["a"], [True], [torch.tensor([1.0, 2.0])], w)
        self.assertEqual(agree([g], find_unused=False, check_overflow=True), (True, None))
        self.assertEqual(w.calls, [("all_reduce_mean", 1)], "one reduction")

    def test_unused_are_those_no_rank_used(self):
        # this rank: g0 has a, not b, not c; g1 has x. The other rank: b only.
        w = fakes.FakeWorker(others=[0.0, 0.0, 1.0, 0.0, 0.0])
        g0 = FakeGroup(["a", "b", "c"], [True, False, False], [torch.ones(1)], w)
        g1 = FakeGroup(["x"], [True], [torch.ones(1)], w)
        self.assertEqual(agree([g0, g1], find_unused=True, check_overflow=True),
                         (False, [[2], []]))
        self.assertEqual(w.calls, [("all_reduce_mean", 5)], "overflow and use in one reduction")


class ClipTest(unittest.TestCase):
    def grads(self):
        torch.manual_seed(1)
        return [torch.randn(3, 4), torch.randn(5)]

    def test_norm_is_torchs(self):
        for norm_type in (2.0, 1.0, 3.0, float("inf")):
            ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in self.grads()]
            for p, g in zip(ps, self.grads()):
                p.grad = g.clone()
            want = torch.nn.utils.clip_grad_norm_(ps, 1e9, norm_type)
            self.assertTrue(torch.equal(total_norm(self.grads(), norm_type), want), norm_type)

    def test_factor(self):
        self.assertEqual(clip_factor(1.0, torch.tensor(4.0)), 1.0 / (4.0 + 1e-6))
        self.assertIsNone(clip_factor(5.0, torch.tensor(4.0)), "below max_norm: no clipping")
        self.assertIsNone(clip_factor(1.0, torch.tensor(float("inf"))), "overflowed: none")
        self.assertIsNone(clip_factor(1.0, torch.tensor(float("nan"))))


if __name__ == "__main__":
    unittest.main()
