"""Hyper-parameter mapping: a torch optimizer's parameter group -> the settings of
Tessel's optimizer (the `optimizer=` dict of tessel.Worker, SetOptimizer).

Contract. torch_hyper(optimizer, group) reads the optimizer's class and one
param_groups entry and returns {"kind", "lr", "weight_decay", ...} with the
kind's own fields (SGD: momentum, dampening, nesterov; Adam/AdamW: beta1,
beta2, eps; RMSprop: alpha, eps, momentum, centered; Adagrad: lr_decay, eps,
initial_accumulator_value), every value a Python float, bool or str. It raises
ValueError for any other optimizer class, maximize=True and amsgrad=True.
tessel_hyper() adds the step's gradient multiplier ("grad_scale": loss
unscaling and clipping, see scaler.py), when there is one. A changed setting
(an lr scheduler) is noticed by comparing these dicts. Pure functions: any thread.

Example:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch_hyper(opt, opt.param_groups[0])
    # {"kind": "sgd", "lr": 0.1, "weight_decay": 0.0, "momentum": 0.9,
    #  "dampening": 0.0, "nesterov": False}
"""
import torch

# In this order: the first class the optimizer is an instance of names its rule.
_KINDS = ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"), (torch.optim.SGD, "sgd"),
          (torch.optim.RMSprop, "rmsprop"), (torch.optim.Adagrad, "adagrad"))


def kind_of(optimizer):
    """Tessel's name for the torch optimizer's update rule (ValueError if none)."""
    for cls, kind in _KINDS:
        if isinstance(optimizer, cls):
            return kind
    raise ValueError(f"tessel.torch supports torch.optim SGD, Adam, AdamW, RMSprop and "
                     f"Adagrad; got {type(optimizer).__name__}")


def torch_hyper(optimizer, group):
    """The Tessel optimizer settings of one torch parameter group."""
    name = type(optimizer).__name__
    if group.get("maximize", False):
        raise ValueError(f"{name}(maximize=True) is not supported")
    kind = kind_of(optimizer)
    h = {"kind": kind, "lr": float(group["lr"]), "weight_decay": float(group["weight_decay"])}
    if kind == "sgd":
        h.update(momentum=float(group["momentum"]), dampening=float(group["dampening"]),
                 nesterov=bool(group["nesterov"]))
    elif kind in ("adam", "adamw"):
        if group.get("amsgrad", False):
            raise ValueError(f"{name}(amsgrad=True) is not supported")
        b1, b2 = group["betas"]
        h.update(beta1=float(b1), beta2=float(b2), eps=float(group["eps"]))
    elif kind == "rmsprop":
        h.update(alpha=float(group["alpha"]), eps=float(group["eps"]),
                 momentum=float(group["momentum"]), centered=bool(group["centered"]))
    else:
        h.update(lr_decay=float(group["lr_decay"]), eps=float(group["eps"]),
                 initial_accumulator_value=float(group["initial_accumulator_value"]))
    return h


def tessel_hyper(optimizer, group, grad_scale=None):
    """torch_hyper plus the step's gradient multiplier (None: none this step)."""
    h = torch_hyper(optimizer, group)
    if grad_scale is not None:
        h["grad_scale"] = grad_scale
    return h
