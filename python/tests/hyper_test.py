"""The mapping of torch optimizers' parameter groups to Tessel's settings."""
import unittest

import torch

from tessel.torch.hyper import kind_of, tessel_hyper, torch_hyper


def params():
    return [torch.nn.Parameter(torch.zeros(2))]


class HyperTest(unittest.TestCase):
    def test_each_optimizer(self):
        cases = [
            (torch.optim.SGD(params(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=False,
                             weight_decay=1e-4),
             {"kind": "sgd", "lr": 0.1, "weight_decay": 1e-4, "momentum": 0.9,
              "dampening": 0.1, "nesterov": False}),
            (torch.optim.Adam(params(), lr=1e-3, betas=(0.8, 0.99), eps=1e-7),
             {"kind": "adam", "lr": 1e-3, "weight_decay": 0.0, "beta1": 0.8, "beta2": 0.99,
              "eps": 1e-7}),
            (torch.optim.AdamW(params(), lr=2e-3),
             {"kind": "adamw", "lr": 2e-3, "weight_decay": 1e-2, "beta1": 0.9, "beta2": 0.999,
              "eps": 1e-8}),
            (torch.optim.RMSprop(params(), lr=1e-2, alpha=0.9, momentum=0.5, centered=True),
             {"kind": "rmsprop", "lr": 1e-2, "weight_decay": 0.0, "alpha": 0.9, "eps": 1e-8,
              "momentum": 0.5, "centered": True}),
            (torch.optim.Adagrad(params(), lr=0.1, lr_decay=0.01, initial_accumulator_value=0.2),
             {"kind": "adagrad", "lr": 0.1, "weight_decay": 0.0, "lr_decay": 0.01,
              "eps": 1e-10, "initial_accumulator_value": 0.2}),
        ]
        for opt, want in cases:
            got = torch_hyper(opt, opt.param_groups[0])
            self.assertEqual(got, want, type(opt).__name__)
            self.assertTrue(all(type(v) in (str, float, bool) for v in got.values()), got)

    def test_each_group_its_own(self):
        a, b = params(), params()
        opt = torch.optim.SGD([{"params": a}, {"params": b, "lr": 0.5}], lr=0.1)
        self.assertEqual([torch_hyper(opt, g)["lr"] for g in opt.param_groups], [0.1, 0.5])

    def test_a_schedule_changes_the_settings(self):
        opt = torch.optim.SGD(params(), lr=0.1)
        before = torch_hyper(opt, opt.param_groups[0])
        opt.param_groups[0]["lr"] = 0.05  # as an lr_scheduler does
        self.assertNotEqual(torch_hyper(opt, opt.param_groups[0]), before)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "SGD, Adam, AdamW, RMSprop and Adagrad; got Adadelta"):
            opt = torch.optim.Adadelta(params())
            torch_hyper(opt, opt.param_groups[0])
        opt = torch.optim.Adam(params(), amsgrad=True)
        with self.assertRaisesRegex(ValueError, r"Adam\(amsgrad=True\) is not supported"):
            torch_hyper(opt, opt.param_groups[0])
        opt = torch.optim.SGD(params(), lr=0.1, maximize=True)
        with self.assertRaisesRegex(ValueError, r"SGD\(maximize=True\) is not supported"):
            torch_hyper(opt, opt.param_groups[0])

    def test_kind_of_adamw_is_not_adam(self):
        self.assertEqual(kind_of(torch.optim.AdamW(params())), "adamw")

    def test_grad_scale_only_when_given(self):
        opt = torch.optim.SGD(params(), lr=0.1)
        self.assertNotIn("grad_scale", tessel_hyper(opt, opt.param_groups[0]))
        self.assertEqual(tessel_hyper(opt, opt.param_groups[0], 0.25)["grad_scale"], 0.25)


if __name__ == "__main__":
    unittest.main()
