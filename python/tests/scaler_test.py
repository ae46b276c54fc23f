"""LossScaler: torch GradScaler's rules, checked arguments, float32 arithmetic."""
import unittest

import numpy as np
import torch

from tessel.torch.scaler import LossScaler


class ScalerTest(unittest.TestCase):
    def test_disabled(self):
        s = LossScaler(None)
        self.assertFalse(s.enabled)
        loss = torch.tensor(3.0)
        self.assertIs(s.scale_loss(loss), loss)
        self.assertIsNone(s.grad_scale(None))
        self.assertEqual(s.grad_scale(0.3), float(np.float32(0.3)), "clipping alone")
        t = [torch.ones(2)]
        self.assertIs(s.unscale(t)[0], t[0])

    def test_static(self):
        s = LossScaler(8)
        self.assertEqual(s.scale, 8.0)
        self.assertEqual(float(s.scale_loss(torch.tensor(1.5))), 12.0)
        s.stepped()
        s.skipped()
        self.assertEqual(s.scale, 8.0, "a static scale stays")
        self.assertEqual(s.skipped_steps, 1)

    def test_dynamic_growth_and_backoff(self):
        s = LossScaler("dynamic", init_scale=4.0, growth_factor=2.0, backoff_factor=0.25,
                       growth_interval=3)
        for _ in range(2):
            s.stepped()
        self.assertEqual(s.scale, 4.0)
        s.stepped()
        self.assertEqual((s.scale, s.good_steps), (8.0, 0))
        s.stepped()
        s.skipped()
        self.assertEqual((s.scale, s.good_steps, s.skipped_steps), (2.0, 0, 1))

    def test_defaults_are_torchs(self):
        s = LossScaler("dynamic")
        self.assertEqual((s.scale, s.growth_factor, s.backoff_factor, s.growth_interval),
                         (2.0**16, 2.0, 0.5, 2000))

    def test_grad_scale_is_float32_arithmetic(self):
        s = LossScaler(3.0)
        inv = np.float32(1.0 / 3.0)
        self.assertEqual(s.grad_scale(None), float(inv))
        self.assertEqual(s.grad_scale(0.7), float(np.float32(float(inv) * 0.7)))
        g = torch.tensor([1.0, 2.0])
        self.assertTrue(torch.equal(s.unscale([g])[0], g * torch.tensor(inv)))

    def test_refusals(self):
        for bad, msg in [(dict(loss_scale=0.0), "finite number > 0"),
                         (dict(loss_scale=float("inf")), "finite number > 0"),
                         (dict(loss_scale=1e-40), "inverse is a normal float32"),
                         (dict(loss_scale="auto"), "loss_scale 'auto'"),
                         (dict(loss_scale="dynamic", growth_factor=1.0), "growth_factor"),
                         (dict(loss_scale="dynamic", backoff_factor=1.5), "backoff_factor"),
                         (dict(loss_scale="dynamic", growth_interval=2.5), "growth_interval")]:
            with self.assertRaisesRegex(ValueError, msg):
                LossScaler(**bad)

    def test_state_round_trip(self):
        s = LossScaler("dynamic", growth_interval=5)
        s.stepped()
        s.skipped()
        s.stepped()
        t = LossScaler("dynamic", growth_interval=5)
        t.load_state_dict(s.state_dict())
        self.assertEqual(t.state_dict(), s.state_dict())
        with self.assertRaisesRegex(ValueError, "not a finite number > 0"):
            t.load_state_dict({"scale": float("nan"), "good_steps": 0, "skipped_steps": 0})
        self.assertEqual(t.state_dict(), s.state_dict(), "a refused state changes nothing")


if __name__ == "__main__":
    unittest.main()
