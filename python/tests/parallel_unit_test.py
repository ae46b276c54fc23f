"""tessel.torch.parallel without a cluster: T = 2 and 4 tensor ranks (and 2
pipeline stages) as threads over fakes.MeshWorld, an in-process tessel.Mesh
(a mailbox keyed (sender, receiver, tag): a tag computed differently on two
ranks waits and fails, one sent twice while in flight is a collision).

  - each layer (column with and without gather_output, row with
    input_is_parallel True and False, the vocabulary embedding) forward and
    backward against its dense torch layer: outputs and every gradient within
    1e-6, the embedding bitwise;
  - a layer made directly is the slice of the dense layer made from the same
    RNG state (the ranks' slices differ; the same draws as the dense layer);
  - from_dense/to_dense, to_dense(model), dense_state_dict/shard_state_dict
    round trips bitwise; refused calls consume no collective;
  - examples/hybrid_attention.py's two blocks, parallelized, forward and
    backward against dense;
  - Pipeline over 2 stages (also with 2 tensor ranks each): the loss and every
    gradient against dense; a step that failed on one stage raises on both and
    the next step runs clean; a stage without parameters;
  - HybridMesh.replicate makes the parameters no layer splits tensor rank 0's;
  - HybridMesh's attached worker: a closing optimizer detaches only its own, a
    refused DistributedOptimizer leaves none attached.
"""
import copy
import os
import sys
import threading
import unittest
from unittest import mock

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import tessel
import tessel.torch as tt
from fakes import MeshWorld
from tessel.torch import parallel as tp
from tessel.torch import session as session_lib
from tessel.torch.parallel import comm
from tessel.torch.parallel.layers import replicated_parameters

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
import hybrid_attention as ha  # noqa: E402

torch.set_num_threads(1)
_local = threading.local()  # each rank thread's Session, as the default session
_default = session_lib.default_session
_patch = mock.patch.object(session_lib, "default_session",
                           lambda: getattr(_local, "session", None) or _default())


def setUpModule():
    _patch.start()


def tearDownModule():
    _patch.stop()


def run(fn, tp_size=1, pp=1, world=None):
    """fn(session, hybrid) on every rank of a MeshWorld, each rank's Session installed
    as its thread's default session; the results in rank order."""
    world = world or MeshWorld(tp=tp_size, pp=pp)

    def body(mesh):
        s = session_lib.Session()
        s.init(registry="fake", job="unit", rank=mesh.rank, world_size=mesh.world_size,
               tensor_parallel=world.tp, pipeline_parallel=world.pp, mesh=mesh)
        _local.session = s
        try:
            return fn(s, s.hybrid)
        finally:
            _local.session = None
    return world.run(body)


def part(t, T, full, dim):
    n = full.shape[dim] // T
    return full.narrow(dim, t * n, n)


class Base(unittest.TestCase):
    def close(self, got, want, what, tol=1e-6):
        self.assertEqual(got.shape, want.shape, what)
        err = (got - want).abs().max().item() if got.numel() else 0.0
        self.assertLessEqual(err, tol, f"{what}: off by {err:.3e}")

    def equal(self, got, want, what):
        self.assertTrue(torch.equal(got, want), f"{what}: not bitwise equal")


class LayersTest(Base):
    def test_column(self):
        torch.manual_seed(1)
        dense = nn.Linear(8, 12)
        x, gy = torch.randn(3, 5, 8), torch.randn(3, 5, 12)
        xd = x.clone().requires_grad_(True)
        yd = dense(xd)
        (yd * gy).sum().backward()
        for T in (2, 4):
            for gather in (False, True):
                def fn(s, h):
                    layer = tp.ColumnParallelLinear.from_dense(dense, gather_output=gather,
                                                               session=s)
                    xs = x.clone().requires_grad_(True)
                    y = layer(xs)
                    (y * (gy if gather else part(h.t, T, gy, -1))).sum().backward()
                    return y.detach(), xs.grad, layer.weight.grad, layer.bias.grad
                for t, (y, gx, gw, gb) in enumerate(run(fn, T)):
                    what = f"T={T} t={t} gather_output={gather}"
                    self.close(y, yd.detach() if gather else part(t, T, yd.detach(), -1),
                               what + " output")
                    self.close(gx, xd.grad, what + " input gradient")
                    self.close(gw, part(t, T, dense.weight.grad, 0), what + " weight gradient")
                    self.close(gb, part(t, T, dense.bias.grad, 0), what + " bias gradient")

    def test_column_chunks(self):
        # A fused q/k/v layer: each rank holds its 1/T of each block and its output is
        # [q_t, k_t, v_t]; gathered, it is the dense output; round trips bitwise.
        torch.manual_seed(5)
        dense = nn.Linear(8, 24)
        x, gy = torch.randn(3, 5, 8), torch.randn(3, 5, 24)
        xd = x.clone().requires_grad_(True)
        yd = dense(xd)
        (yd * gy).sum().backward()

        def mine(t, T, full, dim):  # rank t's 1/T of each of the 3 blocks along dim
            return torch.cat([part(t, T, b, dim) for b in full.chunk(3, dim)], dim)
        for T in (2, 4):
            for gather in (False, True):
                def fn(s, h):
                    layer = tp.ColumnParallelLinear.from_dense(dense, gather_output=gather,
                                                               chunks=3, session=s)
                    xs = x.clone().requires_grad_(True)
                    y = layer(xs)
                    (y * (gy if gather else mine(h.t, T, gy, -1))).sum().backward()
                    sd = tp.dense_state_dict(layer)
                    return (y.detach(), xs.grad, layer.weight.grad, layer.bias.grad,
                            layer.to_dense().state_dict(), sd,
                            tp.shard_state_dict(layer, sd), layer.state_dict())
                for t, (y, gx, gw, gb, back, sd, ssd, own) in enumerate(run(fn, T)):
                    what = f"T={T} t={t} chunks=3 gather_output={gather}"
                    self.close(y, yd.detach() if gather else mine(t, T, yd.detach(), -1),
                               what + " output")
                    self.close(gx, xd.grad, what + " input gradient")
                    self.close(gw, mine(t, T, dense.weight.grad, 0), what + " weight gradient")
                    self.close(gb, mine(t, T, dense.bias.grad, 0), what + " bias gradient")
                    for k, v in dense.state_dict().items():
                        self.equal(back[k], v, what + f" to_dense {k}")
                        self.equal(sd[k], v, what + f" dense_state_dict {k}")
                        self.equal(ssd[k], own[k], what + f" shard_state_dict {k}")
        with self.assertRaisesRegex(ValueError, r"out_features 24 in chunks=5"):
            run(lambda s, h: tp.ColumnParallelLinear(8, 24, chunks=5, session=s), 2)
        with self.assertRaisesRegex(ValueError, r"chunks=3 is not divisible by chunks x "
                                                r"tensor_parallel = 3 x 4"):
            run(lambda s, h: tp.ColumnParallelLinear(8, 18, chunks=3, session=s), 4)

    def test_row(self):
        torch.manual_seed(2)
        dense = nn.Linear(12, 5)
        x, gy = torch.randn(3, 4, 12), torch.randn(3, 4, 5)
        xd = x.clone().requires_grad_(True)
        yd = dense(xd)
        (yd * gy).sum().backward()
        for T in (2, 4):
            for parallel in (True, False):
                def fn(s, h):
                    layer = tp.RowParallelLinear.from_dense(dense, input_is_parallel=parallel,
                                                            session=s)
                    xs = (part(h.t, T, x, -1) if parallel else x).clone().requires_grad_(True)
                    y = layer(xs)
                    (y * gy).sum().backward()
                    return y.detach(), xs.grad, layer.weight.grad, layer.bias.grad
                for t, (y, gx, gw, gb) in enumerate(run(fn, T)):
                    what = f"T={T} t={t} input_is_parallel={parallel}"
                    self.close(y, yd.detach(), what + " output")
                    self.close(gx, part(t, T, xd.grad, -1) if parallel else xd.grad,
                               what + " input gradient")
                    self.close(gw, part(t, T, dense.weight.grad, 1), what + " weight gradient")
                    self.close(gb, dense.bias.grad, what + " bias gradient")

    def test_embedding_bitwise(self):
        torch.manual_seed(3)
        dense = nn.Embedding(12, 6)
        ids = torch.tensor([[0, 11, 4, 4], [5, 9, 1, 6], [3, 7, 2, 10]])
        gy = torch.randn(3, 4, 6)
        yd = dense(ids)
        (yd * gy).sum().backward()
        for T in (2, 4):
            def fn(s, h):
                layer = tp.VocabParallelEmbedding.from_dense(dense, session=s)
                y = layer(ids)
                (y * gy).sum().backward()
                return y.detach(), layer.weight.grad
            for t, (y, gw) in enumerate(run(fn, T)):
                self.equal(y, yd.detach(), f"T={T} t={t} embedding output")
                self.equal(gw, part(t, T, dense.weight.grad, 0), f"T={T} t={t} its gradient")

    def test_made_directly_is_a_slice_of_the_dense_init(self):
        # The same seed on every rank must give one dense model, not T equal slices
        # (a symmetry between the ranks' units that training never breaks).
        lock = threading.Lock()
        for T in (2, 4):
            def fn(s, h):
                out = []
                for make, dense in ((lambda: tp.ColumnParallelLinear(8, 12, session=s),
                                     lambda: nn.Linear(8, 12)),
                                    (lambda: tp.RowParallelLinear(12, 8, session=s),
                                     lambda: nn.Linear(12, 8)),
                                    (lambda: tp.VocabParallelEmbedding(12, 4, session=s),
                                     lambda: nn.Embedding(12, 4))):
                    with lock:  # the global RNG
                        torch.manual_seed(7)
                        layer, after = make(), torch.rand(1)
                        torch.manual_seed(7)
                        ref, ref_after = dense(), torch.rand(1)
                    out.append((layer.state_dict(), ref.state_dict(), layer.SPLIT,
                                torch.equal(after, ref_after)))
                return out
            for t, layers in enumerate(run(fn, T)):
                for mine, ref, split, same_draws in layers:
                    for k, v in ref.items():
                        want = part(t, T, v, split[k]) if k in split else v
                        self.equal(mine[k], want, f"T={T} t={t} {k} of a layer made directly")
                    self.assertTrue(same_draws, "the layer draws what the dense layer draws")

    def test_from_dense_draws_no_random_numbers(self):
        lock = threading.Lock()

        def fn(s, h):
            dense = (nn.Linear(8, 12), nn.Linear(12, 8), nn.Embedding(12, 4))
            with lock:  # the global RNG
                torch.manual_seed(3)
                tp.ColumnParallelLinear.from_dense(dense[0], session=s)
                tp.RowParallelLinear.from_dense(dense[1], session=s)
                tp.VocabParallelEmbedding.from_dense(dense[2], session=s)
                after = torch.rand(1)
                torch.manual_seed(3)
                return torch.equal(after, torch.rand(1))
        self.assertEqual(run(fn, 2), [True, True], "from_dense left the RNG where it was")

    def test_round_trips_bitwise(self):
        torch.manual_seed(4)
        dense = nn.Sequential(nn.Embedding(12, 8), nn.LayerNorm(8), nn.Linear(8, 12), nn.GELU(),
                              nn.Linear(12, 8, bias=False))
        want = {k: v.clone() for k, v in dense.state_dict().items()}
        for T in (2, 4):
            def fn(s, h):
                m = copy.deepcopy(dense)
                m[0] = tp.VocabParallelEmbedding.from_dense(m[0], session=s)
                m[2] = tp.ColumnParallelLinear.from_dense(m[2], session=s)
                m[4] = tp.RowParallelLinear.from_dense(m[4], session=s)
                layers = [m[i].to_dense().state_dict() for i in (0, 2, 4)]
                whole = tp.to_dense(m)
                dsd = tp.dense_state_dict(m)
                ssd = tp.shard_state_dict(m, dsd)
                return m.state_dict(), layers, whole, dsd, ssd
            for t, (mine, layers, whole, dsd, ssd) in enumerate(run(fn, T)):
                for i, sd in zip((0, 2, 4), layers):
                    for k, v in sd.items():
                        self.equal(v, want[f"{i}.{k}"], f"T={T} t={t} layer {i}.to_dense() {k}")
                self.assertEqual([type(c) for c in whole], [type(c) for c in dense])
                for k, v in whole.state_dict().items():
                    self.equal(v, want[k], f"T={T} t={t} to_dense(model) {k}")
                self.assertEqual(sorted(dsd), sorted(want))
                for k, v in dsd.items():
                    self.equal(v, want[k], f"T={T} t={t} dense_state_dict {k}")
                for k, v in ssd.items():
                    self.equal(v, mine[k], f"T={T} t={t} shard_state_dict(dense_state_dict) {k}")

    def test_tied_weights(self):
        """An output head tied to a VocabParallelEmbedding's weight (GPT-2's lm_head):
        dense_state_dict gathers it under both keys, shard_state_dict cuts both, and
        to_dense keeps the tie on the dense weight."""
        torch.manual_seed(5)
        dense = nn.Sequential(nn.Embedding(12, 8), nn.LayerNorm(8), nn.Linear(8, 12, bias=False))
        dense[2].weight = dense[0].weight
        want = {k: v.clone() for k, v in dense.state_dict().items()}
        self.assertEqual(sorted(want), ["0.weight", "1.bias", "1.weight", "2.weight"])
        for T in (2, 4):
            def fn(s, h):
                m = copy.deepcopy(dense)
                m[0] = tp.VocabParallelEmbedding.from_dense(m[0], session=s)
                m[2].weight = m[0].weight  # tied to this rank's rows
                whole = tp.to_dense(m)
                dsd = tp.dense_state_dict(m)
                return m.state_dict(), whole, dsd, tp.shard_state_dict(m, dsd)
            for t, (mine, whole, dsd, ssd) in enumerate(run(fn, T)):
                self.assertEqual(sorted(dsd), sorted(want))
                for k, v in dsd.items():
                    self.equal(v, want[k], f"T={T} t={t} dense_state_dict {k}")
                for k, v in ssd.items():
                    self.equal(v, mine[k], f"T={T} t={t} shard_state_dict {k}")
                self.assertIs(whole[2].weight, whole[0].weight, "to_dense keeps the tie")
                self.equal(whole[2].weight.detach(), want["2.weight"], f"T={T} to_dense tied")

    def test_refused_calls_consume_no_collective(self):
        def fn(s, h):
            row = tp.RowParallelLinear(8, 4, session=s)
            col = tp.ColumnParallelLinear(4, 8, gather_output=True, session=s)
            seq = h._tensor_seq
            with self.assertRaisesRegex(ValueError, "input_is_parallel"):
                row(torch.randn(2, 8))
            with self.assertRaisesRegex(TypeError, "float64"):
                comm.all_reduce(h, torch.ones(3, dtype=torch.float64), "forward_sum", "x")
            with self.assertRaises(RuntimeError):
                col(torch.randn(2, 5))
            with self.assertRaisesRegex(KeyError, "weight"):
                tp.shard_state_dict(row, {})
            with self.assertRaisesRegex(ValueError, "slice"):
                tp.shard_state_dict(row, {"weight": torch.zeros(4, 6), "bias": torch.zeros(4)})
            self.assertEqual(h._tensor_seq, seq)
            return comm.all_reduce(h, torch.full((2,), float(h.t + 1)), "forward_sum", "y")
        for got in run(fn, 2):
            self.equal(got, torch.full((2,), 3.0), "the next collective")


def dense_reference(x, y):
    """examples/hybrid_attention.py's dense model, a pristine copy, its loss and grads."""
    dense = ha.make_model(0)
    init = copy.deepcopy(dense)
    xd = x.clone().requires_grad_(True)
    out = dense(xd)
    loss = F.mse_loss(out, y)
    loss.backward()
    return init, dense, out.detach(), float(loss), xd.grad


class AttentionTest(Base):
    def check_grads(self, t, T, stage, dense, what):
        split = tp.split_parameters(stage)
        ref = dict(dense.named_parameters())
        for name, p in stage.named_parameters():
            want = ref[name].grad
            if name in split:
                want = part(t, T, want, split[name][1])
            self.close(p.grad, want, f"{what} {name} gradient")

    def test_two_blocks_against_dense(self):
        x, y = ha.batch(0)
        init, dense, out, _, gx = dense_reference(x, y)
        for T in (2, 4):
            def fn(s, h):
                model = copy.deepcopy(init)
                for block in model:
                    ha.parallelize(block)
                xs = x.clone().requires_grad_(True)
                got = model(xs)
                F.mse_loss(got, y).backward()
                return model, got.detach(), xs.grad
            for t, (model, got, g) in enumerate(run(fn, T)):
                self.close(got, out, f"T={T} t={t} output")
                self.close(g, gx, f"T={T} t={t} input gradient")
                self.check_grads(t, T, model, dense, f"T={T} t={t}")


class FailOnce(nn.Module):
    """A stage whose first forward fails."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.armed = inner, True

    def forward(self, x):
        if self.armed:
            self.armed = False
            raise RuntimeError("injected failure")
        return self.inner(x)


class PipelineTest(Base):
    def pipeline(self, T, micro, fail=False):
        x, y = ha.batch(1)
        init, dense, _, loss, _ = dense_reference(x, y)

        def fn(s, h):
            stage = copy.deepcopy(init[h.p])
            if T > 1:
                ha.parallelize(stage)
            module = FailOnce(stage) if fail and h.p == 1 else stage
            pipe = tp.Pipeline(module, micro_batches=micro, loss_fn=F.mse_loss, session=s)
            args = (x if h.p == 0 else None, y if h.p == 1 else None)
            if fail:
                kind = RuntimeError if h.p == 1 else tp.StageError
                with self.assertRaisesRegex(kind, "stage 1.*injected failure"):
                    pipe.step(*args)
                stage.zero_grad(set_to_none=True)
            return h.p, h.t, stage, pipe.step(*args)
        for p, t, stage, got in run(fn, T, pp=2):
            what = f"T={T} micro_batches={micro} p={p} t={t}"
            self.assertAlmostEqual(got, loss, delta=1e-6, msg=what + " loss")
            self.check_grads(t, T, stage, dense[p], what)

    check_grads = AttentionTest.check_grads

    def test_two_stages_against_dense(self):
        self.pipeline(1, 4)
        self.pipeline(2, 2)

    def test_a_failed_step_then_a_clean_one(self):
        self.pipeline(1, 2, fail=True)

    def test_a_stage_without_parameters(self):
        torch.manual_seed(5)
        head = nn.Linear(4, 2)
        x, y = torch.randn(6, 4), torch.randn(6, 2)
        want = F.mse_loss(head(torch.tanh(x)), y)
        want.backward()

        def fn(s, h):
            stage = nn.Tanh() if h.p == 0 else copy.deepcopy(head).requires_grad_(True)
            if h.p == 1:
                stage.zero_grad(set_to_none=True)
            pipe = tp.Pipeline(stage, micro_batches=3, loss_fn=F.mse_loss, session=s)
            loss = pipe.step(x if h.p == 0 else None, y if h.p == 1 else None)
            return loss, stage
        (loss0, _), (loss1, stage1) = run(fn, 1, pp=2)
        self.assertAlmostEqual(loss0, float(want), delta=1e-6)
        self.assertEqual(loss0, loss1)
        self.close(stage1.weight.grad, head.weight.grad, "head weight gradient")


class AttachTest(Base):
    def test_detach_only_your_own(self):
        def fn(s, h):
            w1, w2 = object(), object()
            h.attach(w1)
            h.attach(w2)
            h.detach(w1)  # an older optimizer closing
            kept = h.mesh.attached
            h.detach(w2)
            return kept is w2, h.mesh.attached
        self.assertEqual(run(fn, 2), [(True, None), (True, None)])

    def test_refused_optimizer_leaves_no_worker_attached(self):
        class Refusing:  # a tessel.Worker whose layout the job refuses
            def __init__(self, *args, **kwargs):
                self.closed = False

            def register_layout(self, *args):
                raise RuntimeError("layout refused")

            def close(self):
                self.closed = True

        def fn(s, h):
            model = nn.Sequential(tp.ColumnParallelLinear(4, 4, session=s), nn.ReLU())
            with mock.patch.object(tessel, "Worker", Refusing):
                with self.assertRaisesRegex(RuntimeError, "layout refused"):
                    tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                            model=model, session=s)
            return [c[0] for c in h.mesh.calls], h.mesh.attached
        for calls, attached in run(fn, 1):
            self.assertIsNone(attached, "a refused optimizer's worker is still attached")
            self.assertEqual(calls, ["attach", "attach"])


class ReplicateTest(Base):
    def test_replicated_parameters_become_tensor_rank_0s(self):
        """What DistributedOptimizer does at construction: the parameters no layer
        splits (layers.replicated_parameters) take tensor rank 0's values; the split
        ones keep each rank's slice."""
        def fn(s, h):
            torch.manual_seed(0)  # the same dense layers on every rank
            model = nn.Sequential(tp.ColumnParallelLinear(4, 6, session=s),
                                  tp.RowParallelLinear(6, 4, session=s), nn.LayerNorm(4))
            with torch.no_grad():  # replicated values that differ between the ranks
                model[1].bias.fill_(h.t + 1)
                model[2].weight.fill_(10 * (h.t + 1))
            split_before = model[0].weight.detach().clone()
            shared = replicated_parameters(model, list(model.parameters()))
            h.replicate(shared)
            return ([id(p) for p in shared] == [id(model[1].bias), id(model[2].weight),
                                                id(model[2].bias)],
                    model[1].bias.detach().clone(), model[2].weight.detach().clone(),
                    torch.equal(model[0].weight, split_before), split_before)
        (ok0, bias0, ln0, kept0, w0), (ok1, bias1, ln1, kept1, w1) = run(fn, 2)
        self.assertTrue(ok0 and ok1, "replicated_parameters: the row bias and the norm's")
        self.assertTrue(torch.equal(bias0, torch.ones(4)) and torch.equal(bias1, bias0))
        self.assertTrue(torch.equal(ln0, torch.full((4,), 10.0)) and torch.equal(ln1, ln0))
        self.assertTrue(kept0 and kept1, "a split parameter is left as it was")
        self.assertFalse(torch.equal(w0, w1), "the ranks' slices differ")


if __name__ == "__main__":
    unittest.main()
