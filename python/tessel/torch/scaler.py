"""LossScaler: loss scaling for half-precision training, as torch's GradScaler.

Contract. A scaler is disabled (scale None: loss_scale=None, the default for
fp32 and bf16), static (a number) or dynamic ("dynamic", the default for
fp16; init_scale 2**16, growth_factor 2, backoff_factor 0.5, growth_interval
2000, torch.cuda.amp.GradScaler's rules and defaults). The constructor
checks its arguments (ValueError) and the scale: a finite number > 0 whose
float32 inverse is a normal float32.
  - scale_loss(loss): loss * scale (float32), or loss itself when disabled.
  - skipped(): a step was skipped because a rank's gradients overflowed: a
    dynamic scale is multiplied by backoff_factor and its run of good steps
    starts again; skipped_steps counts every skip.
  - stepped(): a step was applied: after growth_interval in a row a dynamic
    scale is multiplied by growth_factor.
  - grad_scale(clip_coef): the multiplier the servers apply to the mean
    gradient this step, float32 arithmetic as torch's: float32(1 / scale),
    times a clipping factor (clip_grad_norm_) when given; without scaling the
    clipping factor alone; None when neither.
  - unscale(tensors): each tensor times float32(1 / scale) (torch's unscale_),
    for measuring a norm.
  - state_dict()/load_state_dict(): scale, good steps and skipped steps;
    check_state() validates a state before anything is loaded.
Threads: not thread-safe; the training thread's.

Example:
    s = LossScaler("dynamic", growth_interval=2)
    s.scale_loss(loss).backward()      # loss * 65536
    s.stepped(); s.stepped()           # two good steps: scale 131072
    s.skipped()                        # an overflow: scale 65536, skipped_steps 1
    s.grad_scale(None)                 # float32(1 / 65536)
"""
import numpy as np
import torch


class LossScaler:
    """A loss scale and its dynamic rules (see the module's docs)."""

    def __init__(self, loss_scale=None, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        self.dynamic = loss_scale == "dynamic"
        if self.dynamic:
            scale = init_scale
            if not growth_factor > 1.0:
                raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
            if not 0.0 < backoff_factor < 1.0:
                raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
            if int(growth_interval) != growth_interval or growth_interval < 1:
                raise ValueError(f"growth_interval must be an integer >= 1, got {growth_interval}")
        elif loss_scale is None:
            scale = None
        elif isinstance(loss_scale, str):
            raise ValueError(f"loss_scale {loss_scale!r}: 'dynamic', a number or None")
        else:
            scale = loss_scale
        if scale is not None:
            scale = float(scale)
            if not (np.isfinite(scale) and scale > 0 and np.isfinite(np.float32(1.0 / scale))
                    and np.float32(1.0 / scale) > 0):
                raise ValueError(f"the loss scale must be a finite number > 0 whose inverse is "
                                 f"a normal float32, got {scale}")
        self.scale = scale
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.good_steps = 0
        self.skipped_steps = 0

    @property
    def enabled(self):
        return self.scale is not None

    def scale_loss(self, loss):
        """loss times the current scale (as GradScaler.scale); backward that."""
        if self.scale is None:
            return loss
        return loss * torch.tensor(self.scale, dtype=torch.float32)

    def skipped(self):
        """Every rank dropped this step's gradients: a dynamic scale backs off."""
        self.skipped_steps += 1
        if self.dynamic:
            self.scale *= self.backoff_factor
            self.good_steps = 0

    def stepped(self):
        """A step was applied: a dynamic scale grows after growth_interval of them."""
        if self.dynamic:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self.scale *= self.growth_factor
                self.good_steps = 0

    def grad_scale(self, clip_coef=None):
        """The servers' multiplier of this step's mean gradient, or None."""
        if self.scale is None:
            return None if clip_coef is None else float(np.float32(clip_coef))
        inv = float(np.float32(1.0 / self.scale))  # grad * float32(1 / scale)
        if clip_coef is not None:  # and clip (clip_grad_norm_), this step
            inv = float(np.float32(inv * clip_coef))
        return inv

    def unscale(self, tensors):
        """Each tensor times float32(1 / scale) (torch's unscale_); as given when disabled."""
        if self.scale is None:
            return list(tensors)
        inv = torch.tensor(np.float32(1.0 / self.scale))
        return [t * inv for t in tensors]

    def state_dict(self):
        return {"scale": self.scale, "good_steps": self.good_steps,
                "skipped_steps": self.skipped_steps}

    @staticmethod
    def check_state(state):
        """ValueError unless `state` (a state_dict()) holds a usable scale."""
        scale = float(state["scale"])
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"the state's loss scale {scale} is not a finite number > 0")

    def load_state_dict(self, state):
        self.check_state(state)
        self.scale = float(state["scale"])
        self.good_steps = int(state["good_steps"])
        self.skipped_steps = int(state["skipped_steps"])
