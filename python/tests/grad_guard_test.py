"""A gradient changed in place after backward handed it to Tessel is refused
(flat.py, fsdp.py): torch.nn.utils.clip_grad_norm_, p.grad.mul_() or
model.zero_grad() between backward and step make the step's collect_grads raise
RuntimeError naming tt.clip_grad_norm_, with or without overlap, under fsdp too
(whose pushed parameters keep an empty .grad until the step). What Tessel
itself writes, tt.clip_grad_norm_'s path, no_sync() passes, changes before the
last backward pass and opt.zero_grad() are not refused. Over a fake worker."""
import unittest

import torch

import fakes
from tessel.torch.flat import FlatGroup
from tessel.torch.fsdp import FsdpGroup, plan_units
from tessel.torch.group import Settings

X = torch.linspace(-1, 1, 15).view(5, 3)
CLIP = "tt.clip_grad_norm_"


def hyper():
    return {"kind": "sgd", "lr": 0.1}


def flat(overlap=True, passes=1):
    model = fakes.TwoLayers()
    settings = Settings("zero2", "fp32", torch.device("cpu"), False, passes, overlap, True)
    g = FlatGroup(0, list(model.parameters()), [n for n, _ in model.named_parameters()], hyper,
                  settings)
    g.worker = fakes.FakeFlatWorker()
    g.bind()
    return model, g


def fsdp(push_in_backward=True):
    model = fakes.TwoLayers()
    settings = Settings("fsdp", "fp32", torch.device("cpu"), False, 1, False, push_in_backward)
    g = FsdpGroup(0, list(model.parameters()), [n for n, _ in model.named_parameters()], hyper,
                  settings)
    plan = plan_units(model, [g])[0]
    g.worker = fakes.FakeWorker(units=[first for first, _ in plan])
    g.bind(plan)
    return model, g


def backward(model):
    model(X).pow(2).sum().backward()


def step(g):
    g.collect_grads()
    g.step()
    g.end_step()


def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)


class FlatTest(unittest.TestCase):
    def test_torch_clip_after_backward_is_refused(self):
        for overlap in (True, False):
            model, g = flat(overlap)
            backward(model)
            clip(model)
            with self.assertRaisesRegex(RuntimeError, CLIP):
                g.collect_grads()

    def test_any_in_place_change_is_refused(self):
        for change in (lambda m: m.a.weight.grad.mul_(2.0),
                       lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9),
                       lambda m: m.zero_grad(set_to_none=False)):
            model, g = flat()
            backward(model)
            change(model)
            with self.assertRaisesRegex(RuntimeError, "changed in place after backward"):
                g.collect_grads()

    def test_untouched_steps_and_the_next_step_starts_over(self):
        model, g = flat()
        for _ in range(2):
            g.zero_grad(False)
            backward(model)
            step(g)
        self.assertEqual(len(g.worker.named("gradients_ready")), 2 * len(g.params))

    def test_tessel_clip_path_and_its_own_writes_pass(self):
        model, g = flat(overlap=False)
        backward(model)
        model.b.bias.grad = None  # collect_grads zeroes its range: not the user's change
        g.mean_gradients()  # tt.clip_grad_norm_'s path
        step(g)

    def test_changes_before_the_hand_over_are_torch_s_business(self):
        model, g = flat(passes=2)
        backward(model)
        model.a.weight.grad.mul_(0.5)  # between passes: not handed over yet
        backward(model)
        step(g)
        model, g = flat()
        g.settings.sync = False  # inside no_sync()
        backward(model)
        model.a.weight.grad.mul_(0.5)
        g.settings.sync = True
        backward(model)
        step(g)

    def test_opt_zero_grad_starts_over(self):
        model, g = flat()
        backward(model)
        g.zero_grad(False)
        g.end_step()
        backward(model)
        step(g)


class FsdpTest(unittest.TestCase):
    def test_torch_clip_after_pushes_is_refused(self):
        model, g = fsdp()
        backward(model)
        self.assertTrue(all(p.grad is not None and p.grad.numel() == 0
                            for p in model.parameters()), "pushed: an empty .grad each")
        clip(model)
        with self.assertRaisesRegex(RuntimeError, CLIP):
            g.collect_grads()

    def test_torch_clip_under_loss_scaling_is_refused(self):
        model, g = fsdp(push_in_backward=False)
        backward(model)
        clip(model)
        with self.assertRaisesRegex(RuntimeError, CLIP):
            g.collect_grads()

    def test_untouched_steps_and_grads_go_back_to_none(self):
        for push in (True, False):
            model, g = fsdp(push)
            for _ in range(2):
                g.zero_grad(False)
                backward(model)
                step(g)
                self.assertTrue(all(p.grad is None for p in model.parameters()))


if __name__ == "__main__":
    unittest.main()
