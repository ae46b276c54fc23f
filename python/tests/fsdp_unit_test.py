"""FsdpUnit's state machine and FsdpGroup's units, over a fake worker: the states
of hold/release/push/finish_step/reset, what the worker is told, and that the
pushed gradients are torch's."""
import copy
import unittest

import torch

import fakes
from tessel.torch.fsdp import FsdpGroup, plan_units
from tessel.torch.fsdp_unit import UnitState
from tessel.torch.group import Settings

RELEASED, HELD, PUSHED, REHELD = (UnitState.RELEASED, UnitState.HELD, UnitState.PUSHED,
                                  UnitState.REHELD)


def make(push_in_backward=True, staged=False, hyper=None, precision="fp32"):
    model = fakes.TwoLayers()
    ref = copy.deepcopy(model)
    params = list(model.parameters())
    names = [n for n, _ in model.named_parameters()]
    settings = Settings("fsdp", precision, torch.device("cpu"), staged, 1, False, push_in_backward)
    g = FsdpGroup(0, params, names, hyper or (lambda: {"kind": "sgd", "lr": 0.1}), settings)
    plan = plan_units(model, [g])[0]
    g.worker = fakes.FakeWorker(units=[first for first, _ in plan])
    g.bind(plan)
    return model, ref, g


def states(g):
    return [u.state for u in g.units]


X = torch.linspace(-1, 1, 15).view(5, 3)


class PlanTest(unittest.TestCase):
    def test_top_level_children_in_order(self):
        model, _, g = make()
        self.assertEqual(plan_units(model, [g]), [[(0, model.a), (2, model.b)]])

    def test_refusals(self):
        model, _, g = make()
        with self.assertRaisesRegex(ValueError, "needs model="):
            plan_units(None, [g])
        g.params = g.params[:2]
        with self.assertRaisesRegex(ValueError, "exactly model.parameters"):
            plan_units(model, [g])
        g.params = [model.a.weight, model.b.weight, model.a.bias, model.b.bias]
        with self.assertRaisesRegex(ValueError, "parameters of a are not contiguous"):
            plan_units(model, [g])


class UnitStateTest(unittest.TestCase):
    def test_bind_leaves_every_unit_released_and_empty(self):
        model, _, g = make()
        self.assertEqual(states(g), [RELEASED, RELEASED])
        self.assertTrue(all(p.numel() == 0 for p in model.parameters()))
        self.assertEqual([u.members for u in g.units], [[0, 1], [2, 3]])

    def test_forward_holds_backward_pushes_step_finishes(self):
        model, ref, g = make()
        out = model(X)
        self.assertEqual(states(g), [HELD, HELD])
        self.assertIn(("prefetch", 1), g.worker.calls)
        self.assertTrue(torch.equal(out, ref(X)), "the gathered values are the model's")
        out.sum().backward()
        self.assertEqual(states(g), [PUSHED, PUSHED])
        self.assertEqual(g.worker.named("release"), [("release", 1), ("release", 0)])
        self.assertEqual(g.worker.named("push_unit"), [("push_unit", 1), ("push_unit", 0)])
        self.assertTrue(all(p.numel() == 0 for p in model.parameters()))
        ref(X).sum().backward()
        want = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
        got = torch.cat([torch.from_numpy(g.worker.pushed[u]) for u in (0, 1)])
        self.assertTrue(torch.equal(got, want), "the pushed gradients are torch's")
        self.assertEqual(g.has_grad, [True] * 4)
        g.step()
        self.assertEqual(len(g.worker.named("push_unit")), 2, "a pushed unit pushes once")
        self.assertEqual(g.worker.named("finish_step"), [("finish_step",)])
        self.assertEqual(states(g), [RELEASED, RELEASED])

    def test_a_unit_backward_did_not_reach_pushes_zeros(self):
        _, _, g = make()
        g.units[0].hold()
        g.step()
        self.assertEqual(states(g), [RELEASED, RELEASED])
        self.assertEqual(g.worker.named("release"), [("release", 0)])
        self.assertEqual(g.worker.named("gather"), [("gather", 0)], "unit 1 is not gathered")
        for u in (0, 1):
            self.assertFalse(g.worker.pushed[u].any())

    def test_loss_scaling_holds_until_a_skipped_step_zeroes(self):
        model, _, g = make(push_in_backward=False)
        model(X).sum().backward()
        self.assertEqual(states(g), [HELD, HELD])
        self.assertEqual([u.done for u in g.units], [2, 2])
        g.collect_grads()
        self.assertTrue(any(t.abs().sum() > 0 for t in g.grad_tensors()))
        buffers = [g.worker.unit_grads(u) for u in (0, 1)]
        g.drop_gradients()
        self.assertEqual(states(g), [RELEASED, RELEASED])
        self.assertEqual([u.done for u in g.units], [0, 0])
        self.assertFalse(any(b.any() for b in buffers), "the worker's buffers are zeroed")
        self.assertEqual(len(g.worker.named("release")), 2)
        self.assertEqual(g.worker.named("push_unit"), [])
        self.assertTrue(all(p.numel() == 0 for p in model.parameters()))

    def test_held_again_after_its_push(self):
        model, _, g = make()
        model(X).sum().backward()
        held = g.hold_all()
        self.assertEqual(states(g), [REHELD, REHELD])
        self.assertEqual(len(held), 2)
        self.assertTrue(all(p.numel() > 0 for p in model.parameters()))
        g.units[0].push()
        self.assertEqual(len(g.worker.named("push_unit")), 2, "a reheld unit is pushed already")
        held[0].release()
        self.assertEqual(states(g), [PUSHED, REHELD])
        g.step()
        self.assertEqual(states(g), [RELEASED, HELD], "finish_step keeps what is held")
        g.units[1].release()
        self.assertEqual(states(g), [RELEASED, RELEASED])

    def test_release_of_a_unit_not_held_does_nothing(self):
        _, _, g = make()
        g.units[0].release()
        g.loaded()
        self.assertEqual(g.worker.named("release"), [])
        self.assertEqual(states(g), [RELEASED, RELEASED])

    def test_reset_after_recovery_does_not_tell_the_worker(self):
        model, _, g = make()
        model(X)
        g.recovered()
        self.assertEqual(states(g), [RELEASED, RELEASED])
        self.assertEqual(g.worker.named("release"), [])
        self.assertTrue(all(p.numel() == 0 for p in model.parameters()))
        self.assertTrue(all(u.grads is None for u in g.units))

    def test_zero_grad_set_to_none_forgets_gradients(self):
        model, _, g = make(push_in_backward=False)
        model(X).sum().backward()
        g.collect_grads()
        g.zero_grad(set_to_none=True)
        self.assertEqual(g.has_grad, [False] * 4)
        self.assertTrue(all(p.grad is None for p in model.parameters()))
        self.assertFalse(any(t.any() for t in g.grad_tensors()))

    def test_staged_gradients_are_flushed_into_the_workers_buffer(self):
        model, ref, g = make(staged=True)
        model(X)
        for u in g.units:  # gradient buffers are made when backward needs them
            self.assertIsNone(u.grads)
            self.assertIsNone(u.host_grads)
        g.units[0].adopt_grads()
        self.assertNotEqual(g.units[0].grads.data_ptr(), g.units[0].host_grads.data_ptr())
        model(X).sum().backward()
        ref(X).sum().backward()
        want = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
        got = torch.cat([torch.from_numpy(g.worker.pushed[u]) for u in (0, 1)])
        self.assertTrue(torch.equal(got, want))

    def test_no_sync_sums_passes_in_the_units_buffer(self):
        for staged in (False, True):
            model, ref, g = make(staged=staged)
            g.settings.sync = False  # DistributedOptimizer.no_sync()
            model(X).sum().backward()
            self.assertEqual(states(g), [RELEASED, RELEASED], "released, not pushed")
            self.assertEqual(g.worker.named("push_unit"), [])
            self.assertTrue(all(p.numel() == 0 for p in model.parameters()))
            (model(X) * 2).sum().backward()
            g.settings.sync = True
            (model(X) * 3).sum().backward()
            self.assertEqual(states(g), [PUSHED, PUSHED])
            ref(X).sum().backward()  # 1 + 2 + 3 passes' worth: 6 times one pass
            want = torch.cat([6 * p.grad.reshape(-1) for p in ref.parameters()])
            got = torch.cat([torch.from_numpy(g.worker.pushed[u]) for u in (0, 1)])
            self.assertTrue(torch.allclose(got, want, rtol=1e-6), f"staged={staged}")

    def test_no_sync_pushes_fp32_passes_as_parts(self):
        model, ref, g = make()
        g.settings.sync = False
        model(X).sum().backward()
        self.assertEqual(g.worker.named("push_unit_part"),
                         [("push_unit_part", 1), ("push_unit_part", 0)])
        self.assertEqual(g.worker.grads, {}, "no gradient buffer kept between passes")
        with self.assertRaisesRegex(RuntimeError, "finish the step"):
            g.zero_grad(False)
        g.settings.sync = True
        model(X).sum().backward()
        ref(X).sum().backward()
        want = torch.cat([2 * p.grad.reshape(-1) for p in ref.parameters()])
        got = torch.cat([torch.from_numpy(g.worker.pushed[u]) for u in (0, 1)])
        self.assertTrue(torch.equal(got, want))
        g.zero_grad(False)  # the step's push ended the parts

    def test_no_sync_pushes_half_passes_as_parts_summed_in_half(self):
        model, ref, g = make(precision="bf16")
        g.settings.sync = False
        model(X.bfloat16()).sum().backward()  # half too: each pass a part, no buffer kept
        self.assertEqual(g.worker.named("push_unit_part"),
                         [("push_unit_part", 1), ("push_unit_part", 0)])
        self.assertEqual(g.worker.grads, {}, "no gradient buffer kept between passes")
        self.assertEqual(states(g), [RELEASED, RELEASED])
        with self.assertRaisesRegex(RuntimeError, "finish the step"):
            g.zero_grad(False)
        (model(X.bfloat16()) * 3).sum().backward()
        g.settings.sync = True
        (model(X.bfloat16()) * 5).sum().backward()
        # torch's own half accumulation: .grad += each pass's, rounded to bf16 each time.
        half_ref = copy.deepcopy(ref).bfloat16()
        half_ref(X.bfloat16()).sum().backward()
        (half_ref(X.bfloat16()) * 3).sum().backward()
        (half_ref(X.bfloat16()) * 5).sum().backward()
        want = torch.cat([p.grad.float().reshape(-1) for p in half_ref.parameters()])
        got = torch.cat([torch.from_numpy(g.worker.pushed[u]) for u in (0, 1)])
        self.assertTrue(torch.equal(got, want))

    def test_changed_settings_go_before_the_forward(self):
        lr = [0.1]
        model, _, g = make(hyper=lambda: {"kind": "sgd", "lr": lr[0]})
        model(X)
        self.assertEqual(g.worker.named("set_optimizer"), [])
        g.step()
        lr[0] = 0.05
        model(X)
        self.assertEqual(g.worker.hyper, {"kind": "sgd", "lr": 0.05})

    def test_close_gives_the_full_values(self):
        model, ref, g = make()
        g.close()
        self.assertIsNone(g.worker)
        for p, q in zip(model.parameters(), ref.parameters()):
            self.assertTrue(torch.equal(p, q))


if __name__ == "__main__":
    unittest.main()
