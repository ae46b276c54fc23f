#!/usr/bin/python3
"""Writes core/testdata/optim_golden.json: torch.optim trajectories for optimizer_test.

Runs real torch.optim (SGD, Adam, AdamW, RMSprop, Adagrad; single-tensor path,
foreach=False) for a few steps on a small fixed fp32 vector with fixed gradients
and records the parameters and optimizer state after every step.
core/optimizer_test.cc replays the same gradients through tessel::ApplyUpdate
and compares.

Hyperparameters are rounded to float32 before torch sees them: tessel keeps them
as float, torch as Python (double) floats, and torch does its scalar arithmetic
(1 - beta1, lr / (1 - beta1**step), 1 - lr * wd, 1 - alpha,
lr / (1 + (step - 1) * lr_decay)) in double. With float32-exact inputs both
sides compute the same scalars, so the comparison tests the kernels rather than
the rounding of 0.9 vs 0.9f.

Operation order. Alongside torch, every case is replayed through a NumPy model
of torch's per-element float32 arithmetic, one line per ATen call of torch's
Python code (see model_step). The model runs twice:
  - fused, as torch's AVX2 kernels compute: ATen's vectorised add(a, b, alpha)
    is fmadd(b, alpha, a) and GCC contracts addcmul's `self + value * t1 * t2`
    into fma(value * t1, t2, self). This run must reproduce torch bit for bit
    (the script fails otherwise), which proves the model's operation order is
    torch's.
  - unfused, every product rounded before the add: tessel's kernels (built with
    -ffp-contract=off). Recorded as "unfused_params"/"unfused_state"; the C++
    test requires ApplyUpdate to reproduce them bit for bit.

Usage (from the repository root; needs Debian's python3-torch):
  /usr/bin/python3 tools/gen_optim_golden.py [--out core/testdata/optim_golden.json]
"""

import argparse
import ctypes
import json
import math
import os
import re

import numpy as np
import torch

NUM_ELEMS = 37
NUM_STEPS = 5
SEED = 20240611

F32 = np.float32


def f32(x):
    """The float32 value nearest to x, as a Python float."""
    return float(F32(x))


# name, kind, hyperparameters (tessel::OptimizerParams field names).
CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1)),
    ("sgd_momentum_dampening_wd", "sgd",
     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov_wd", "sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam_wd", "adam", dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)),
    ("adam_no_wd", "adam", dict(lr=1e-3, beta1=0.8, beta2=0.99, eps=1e-6)),
    ("adamw_wd", "adamw", dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)),
    ("rmsprop_plain", "rmsprop", dict(lr=0.01, alpha=0.99, eps=1e-8)),
    ("rmsprop_centered", "rmsprop", dict(lr=0.01, alpha=0.9, eps=1e-8, centered=True)),
    ("rmsprop_momentum_wd", "rmsprop",
     dict(lr=0.01, alpha=0.99, eps=1e-8, momentum=0.9, weight_decay=0.01)),
    ("rmsprop_centered_momentum_wd", "rmsprop",
     dict(lr=0.01, alpha=0.95, eps=1e-6, momentum=0.8, weight_decay=0.05, centered=True)),
    ("adagrad_plain", "adagrad", dict(lr=0.05, eps=1e-10)),
    ("adagrad_lr_decay_init_wd", "adagrad",
     dict(lr=0.1, eps=1e-10, lr_decay=0.05, initial_accumulator_value=0.1, weight_decay=0.01)),
]

# tessel::OptimizerParams defaults.
DEFAULTS = dict(lr=1e-3, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0,
                beta1=0.9, beta2=0.999, eps=1e-8, alpha=0.99, centered=False, lr_decay=0.0,
                initial_accumulator_value=0.0)


def make_inputs(gen):
    params = torch.randn(NUM_ELEMS, generator=gen, dtype=torch.float32)
    grads = []
    for _ in range(NUM_STEPS):
        # Gradients over several orders of magnitude, with a few exact zeros.
        scale = torch.pow(10.0, torch.empty(NUM_ELEMS).uniform_(-3.0, 1.0, generator=gen))
        g = torch.randn(NUM_ELEMS, generator=gen, dtype=torch.float32) * scale
        g[::11] = 0.0
        grads.append(g.to(torch.float32))
    return params, grads


def make_optimizer(kind, hp, param):
    if kind == "sgd":
        return torch.optim.SGD([param], lr=hp["lr"], momentum=hp["momentum"],
                               dampening=hp["dampening"], nesterov=hp["nesterov"],
                               weight_decay=hp["weight_decay"], foreach=False)
    if kind == "rmsprop":
        return torch.optim.RMSprop([param], lr=hp["lr"], alpha=hp["alpha"], eps=hp["eps"],
                                   weight_decay=hp["weight_decay"], momentum=hp["momentum"],
                                   centered=hp["centered"], foreach=False)
    if kind == "adagrad":
        return torch.optim.Adagrad([param], lr=hp["lr"], lr_decay=hp["lr_decay"],
                                   weight_decay=hp["weight_decay"],
                                   initial_accumulator_value=hp["initial_accumulator_value"],
                                   eps=hp["eps"], foreach=False)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls([param], lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
               weight_decay=hp["weight_decay"], amsgrad=False, foreach=False)


def state_slots(kind, opt, param):
    """torch's state in tessel's slot order (core/optimizer.h)."""
    st = opt.state[param]
    if kind == "sgd":
        buf = st.get("momentum_buffer")
        return [] if buf is None else [buf]
    if kind == "rmsprop":
        return [st[k] for k in ("square_avg", "momentum_buffer", "grad_avg") if k in st]
    if kind == "adagrad":
        return [st["sum"]]
    return [st["exp_avg"], st["exp_avg_sq"]]


# --- NumPy model of torch's float32 arithmetic -------------------------------

_libm = ctypes.CDLL("libm.so.6")
_libm.fmaf.restype = ctypes.c_float
_libm.fmaf.argtypes = [ctypes.c_float] * 3


def fma(a, b, c):
    """Element-wise float32 a * b + c with a single rounding (C fmaf)."""
    a, b, c = np.broadcast_arrays(F32(a), F32(b), F32(c))
    return np.array([_libm.fmaf(x, y, z) for x, y, z in zip(a, b, c)], dtype=F32)


class Arith:
    """torch's elementwise kernels for fp32 CPU tensors, fused or not."""

    def __init__(self, fused):
        self.fused = fused

    def mul_add(self, a, b, c):
        """a * b + c."""
        return fma(a, b, c) if self.fused else F32(a) * F32(b) + F32(c)

    def add(self, t, other, alpha):
        """t.add(other, alpha=alpha): ufunc_add, vectorised as fmadd(other, alpha, t)."""
        return self.mul_add(other, F32(alpha), t)

    def addcmul(self, t, t1, t2, value):
        """t.addcmul(t1, t2, value=value): t + value * t1 * t2, i.e. fma(value * t1, t2, t)."""
        return self.mul_add(F32(value) * t1, t2, t)

    @staticmethod
    def addcdiv(t, t1, t2, value):
        """t.addcdiv(t1, t2, value=value): t + value * t1 / t2 (nothing to fuse)."""
        return t + (F32(value) * t1) / t2


def model_step(kind, hp, ar, step, param, grad, slots):
    """One torch.optim step; returns the new (param, slots). Scalars are Python
    (double) arithmetic as in torch/optim/*.py, converted to float32 once."""
    lr, wd, eps = hp["lr"], hp["weight_decay"], hp["eps"]
    slots = [s.copy() for s in slots]
    g = grad
    if kind == "adamw":
        param = param * F32(1 - lr * wd)
    elif wd != 0:
        g = ar.add(g, param, wd)
    if kind == "sgd":
        d_p = g
        if hp["momentum"] != 0:
            if step == 1:
                buf = d_p.copy()
            else:
                buf = ar.add(slots[0] * F32(hp["momentum"]), d_p, 1 - hp["dampening"])
            slots[0] = buf
            d_p = ar.add(d_p, buf, hp["momentum"]) if hp["nesterov"] else buf
        return ar.add(param, d_p, -lr), slots
    if kind in ("adam", "adamw"):
        b1, b2 = hp["beta1"], hp["beta2"]
        m = ar.add(slots[0] * F32(b1), g, 1 - b1)
        v = ar.addcmul(slots[1] * F32(b2), g, g, 1 - b2)
        step_size = lr / (1 - b1**float(step))
        denom = np.sqrt(v) / F32(math.sqrt(1 - b2**float(step))) + F32(eps)
        return ar.addcdiv(param, m, denom, -step_size), [m, v]
    if kind == "rmsprop":
        alpha, momentum = hp["alpha"], hp["momentum"]
        sq = ar.addcmul(slots[0] * F32(alpha), g, g, 1 - alpha)
        new = [sq]
        if hp["centered"]:
            ga = ar.add(slots[-1] * F32(alpha), g, 1 - alpha)
            avg = np.sqrt(ar.addcmul(sq, ga, ga, -1))
        else:
            avg = np.sqrt(sq)
        avg = avg + F32(eps)
        if momentum > 0:
            buf = ar.addcdiv(slots[1] * F32(momentum), g, avg, 1)
            new.append(buf)
            param = ar.add(param, buf, -lr)
        else:
            param = ar.addcdiv(param, g, avg, -lr)
        if hp["centered"]:
            new.append(ga)
        return param, new
    if kind == "adagrad":
        # torch's state['step'] is a float32 tensor: it stops at 2**24.
        t = float(F32(min(step, 2**24)))
        clr = lr / (1 + (t - 1) * hp["lr_decay"])
        s = ar.addcmul(slots[0], g, g, 1)
        std = np.sqrt(s) + F32(eps)
        return ar.addcdiv(param, g, std, -clr), [s]
    raise ValueError(kind)


def initial_slots(kind, hp):
    n = {"sgd": 1 if hp["momentum"] != 0 else 0, "adam": 2, "adamw": 2, "adagrad": 1,
         "rmsprop": 1 + (hp["momentum"] > 0) + hp["centered"]}[kind]
    fill = hp["initial_accumulator_value"] if kind == "adagrad" else 0.0
    return [np.full(NUM_ELEMS, F32(fill), dtype=F32) for _ in range(n)]


def model_trajectory(kind, hp, fused, params0, grads):
    ar = Arith(fused)
    param, slots = params0.numpy().copy(), initial_slots(kind, hp)
    out_params, out_state = [], []
    for step, g in enumerate(grads, start=1):
        param, slots = model_step(kind, hp, ar, step, param, g.numpy(), slots)
        out_params.append(param.astype(F32))
        out_state.append([s.astype(F32) for s in slots])
    return out_params, out_state


def bits(x):
    return np.asarray(x, dtype=F32).view(np.uint32)


def same_bits(a, b):
    return all(np.array_equal(bits(x), bits(y)) for x, y in zip(a, b)) and len(a) == len(b)


# --- Output ------------------------------------------------------------------

def as_list(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return [float(x) for x in np.asarray(t, dtype=F32)]


def run_case(name, kind, overrides, params0, grads, fused):
    hp = dict(DEFAULTS)
    hp.update(overrides)
    hp = {k: (v if isinstance(v, bool) else f32(v)) for k, v in hp.items()}
    param = torch.nn.Parameter(params0.clone())
    opt = make_optimizer(kind, hp, param)
    out_params, out_state = [], []
    for g in grads:
        param.grad = g.clone()
        opt.step()
        out_params.append(param.detach().numpy().copy())
        out_state.append([s.detach().numpy().copy() for s in state_slots(kind, opt, param)])

    model_params, model_state = model_trajectory(kind, hp, fused, params0, grads)
    for s in range(len(grads)):
        if not (same_bits(model_params[s], out_params[s]) and
                same_bits(model_state[s], out_state[s])):
            raise SystemExit("%s: the %s model differs from torch at step %d; the operation "
                             "order in model_step (and core/optimizer.cc) is wrong" %
                             (name, "fused" if fused else "unfused", s + 1))
    unfused_params, unfused_state = model_trajectory(kind, hp, False, params0, grads)
    differ = sum(int(np.sum(bits(a) != bits(b))) for a, b in zip(unfused_params, out_params))
    print("  %-30s torch == fused model bit for bit; unfused: %3d/%d params differ" %
          (name, differ, len(grads) * NUM_ELEMS))

    case = dict(name=name, kind=kind)
    case.update(hp)
    case.update(params0=as_list(params0), grads=[as_list(g) for g in grads],
                params=[as_list(p) for p in out_params],
                state=[[as_list(x) for x in s] for s in out_state],
                unfused_params=[as_list(p) for p in unfused_params],
                unfused_state=[[as_list(x) for x in s] for s in unfused_state])
    return case


def cpu_capability():
    """The ATen kernel flavour in use (AVX2 kernels use FMA in add_(x, alpha=a))."""
    m = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def to_json(doc):
    """Indented JSON with every list of numbers kept on one line."""
    text = json.dumps(doc, indent=1)
    return re.sub(r"\[\s+([-+.0-9eE,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                  text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "core", "testdata",
                                                      "optim_golden.json"))
    args = parser.parse_args()

    torch.set_num_threads(1)
    capability = cpu_capability()
    # ATen's DEFAULT kernels are built without FMA; the AVX2/AVX512 ones with.
    fused = capability != "DEFAULT"
    gen = torch.Generator().manual_seed(SEED)
    params0, grads = make_inputs(gen)
    print("torch %s, CPU capability %s" % (torch.__version__, capability))
    doc = dict(
        generator="tools/gen_optim_golden.py",
        torch_version=torch.__version__,
        cpu_capability=capability,
        num_elems=NUM_ELEMS,
        num_steps=NUM_STEPS,
        note="params[s] and state[s] are after step s+1 (torch); unfused_params and "
             "unfused_state are torch's operation order without FMA; hyperparameters are "
             "float32-exact",
        cases=[run_case(name, kind, hp, params0, grads, fused) for name, kind, hp in CASES],
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(to_json(doc) + "\n")
    print("wrote %s (%d cases x %d steps x %d elements, torch %s)" %
          (args.out, len(CASES), NUM_STEPS, NUM_ELEMS, torch.__version__))


if __name__ == "__main__":
    main()
