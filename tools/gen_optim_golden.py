#!/usr/bin/python3
"""Writes core/testdata/optim_golden.json: torch.optim trajectories for optimizer_test.

Runs real torch.optim (SGD, Adam, AdamW; single-tensor path, foreach=False) for a
few steps on a small fixed fp32 vector with fixed gradients and records the
parameters and optimizer state after every step. core/optimizer_test.cc replays
the same gradients through tessel::ApplyUpdate and compares.

Hyperparameters are rounded to float32 before torch sees them: tessel keeps them
as float, torch as Python (double) floats, and torch does its scalar arithmetic
(1 - beta1, lr / (1 - beta1**step), 1 - lr * wd) in double. With float32-exact
inputs both sides compute the same scalars, so the comparison tests the kernels
rather than the rounding of 0.9 vs 0.9f.

Usage (from the repository root; needs Debian's python3-torch):
  /usr/bin/python3 tools/gen_optim_golden.py [--out core/testdata/optim_golden.json]
"""

import argparse
import json
import os
import re

import numpy as np
import torch

NUM_ELEMS = 37
NUM_STEPS = 5
SEED = 20240611


def f32(x):
    """The float32 value nearest to x, as a Python float."""
    return float(np.float32(x))


# name, kind, hyperparameters (tessel::OptimizerParams field names).
CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1)),
    ("sgd_momentum_dampening_wd", "sgd",
     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov_wd", "sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam_wd", "adam", dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)),
    ("adam_no_wd", "adam", dict(lr=1e-3, beta1=0.8, beta2=0.99, eps=1e-6)),
    ("adamw_wd", "adamw", dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)),
]

DEFAULTS = dict(lr=1e-3, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0,
                beta1=0.9, beta2=0.999, eps=1e-8)


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
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls([param], lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
               weight_decay=hp["weight_decay"], amsgrad=False, foreach=False)


def state_slots(kind, opt, param):
    st = opt.state[param]
    if kind == "sgd":
        buf = st.get("momentum_buffer")
        return [] if buf is None else [buf]
    return [st["exp_avg"], st["exp_avg_sq"]]


def as_list(t):
    return [float(x) for x in t.detach().cpu().numpy().astype(np.float32)]


def run_case(name, kind, overrides, params0, grads):
    hp = dict(DEFAULTS)
    hp.update(overrides)
    hp = {k: (v if isinstance(v, bool) else f32(v)) for k, v in hp.items()}
    param = torch.nn.Parameter(params0.clone())
    opt = make_optimizer(kind, hp, param)
    out_params, out_state = [], []
    for g in grads:
        param.grad = g.clone()
        opt.step()
        out_params.append(as_list(param))
        out_state.append([as_list(s) for s in state_slots(kind, opt, param)])
    case = dict(name=name, kind=kind)
    case.update(hp)
    case.update(params0=as_list(params0), grads=[as_list(g) for g in grads],
                params=out_params, state=out_state)
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
    gen = torch.Generator().manual_seed(SEED)
    params0, grads = make_inputs(gen)
    doc = dict(
        generator="tools/gen_optim_golden.py",
        torch_version=torch.__version__,
        cpu_capability=cpu_capability(),
        num_elems=NUM_ELEMS,
        num_steps=NUM_STEPS,
        note="params[s] and state[s] are after step s+1; hyperparameters are float32-exact",
        cases=[run_case(name, kind, hp, params0, grads) for name, kind, hp in CASES],
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(to_json(doc) + "\n")
    print("wrote %s (%d cases x %d steps x %d elements, torch %s)" %
          (args.out, len(CASES), NUM_STEPS, NUM_ELEMS, torch.__version__))


if __name__ == "__main__":
    main()
