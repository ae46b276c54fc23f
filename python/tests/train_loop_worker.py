"""One rank of the training-loop test (under tessel-launch): for each strategy,
no_sync() accumulation, model.state_dict(), sharded_state_dict(), and loading
a state dict onto the servers (good and bad), each checked here; rank 0 writes
what the driver compares with single-process torch.

    train_loop_worker.py OUTDIR STRATEGY...

Per strategy, from exact_model's initial parameters with Adam:
  - 3 steps of 2 micro-batches each (the first backward inside no_sync());
  - nesting no_sync() and step() inside it are refused;
  - model.state_dict() holds the full parameters (fsdp too) equal to what
    opt.gathered() shows; rank 0 saves it as OUTDIR/STRATEGY-trained.pt and
    every rank its sharded_state_dict() as OUTDIR/STRATEGY-partR.pt;
  - bad state dicts (missing, unexpected, mis-shaped keys; one bad rank) are
    refused with ValueError naming the keys, and nothing changes anywhere;
  - opt.load_model_state_dict(initial) puts the initial parameters back
    (the step count stays), model.load_state_dict(trained) the trained ones,
    and a step after it still trains;
  - peak gradient bytes of a step with 1 and with 4 micro-batches (fsdp in
    bf16 too: with 4 it is the largest unit's, the parts summed on the servers).
"""
import json
import os
import sys

import torch

import exact_model
import rank_lib
import tessel.torch as tt

outdir, strategies = sys.argv[1], sys.argv[2:]
r = rank_lib.Rank()
checks = rank_lib.Checks()
rank = r.rank
loss_fn = torch.nn.CrossEntropyLoss()
MICRO = 2  # micro-batches per rank per step


def micro_batches(step, count):
    tokens, labels = r.batch(step)
    n = tokens.shape[0] // count
    return [(tokens[m * n:(m + 1) * n], labels[m * n:(m + 1) * n]) for m in range(count)]


def accumulate_step(opt, model, step, count):
    """One step of `count` micro-batches: all but the last backward in no_sync()."""
    opt.zero_grad()
    parts = micro_batches(step, count)
    with opt.no_sync():
        for tokens, labels in parts[:-1]:
            loss_fn(model(tokens), labels).backward()
    tokens, labels = parts[-1]
    loss_fn(model(tokens), labels).backward()
    opt.step()


def flat_now(opt, model):
    with opt.gathered():
        return exact_model.flat(model).clone()


def sd_flat(sd, model):
    return torch.cat([sd[n].reshape(-1) for n, _ in model.named_parameters()])


def make(strategy, tag, precision="fp32"):
    model = exact_model.make_model()
    opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                                  strategy=strategy, bucket_bytes=512, precision=precision,
                                  job=f"{r.cfg['job']}-{strategy}-{tag}")
    return model, opt


def refused_everywhere(opt, model, bad_on, state, fragment):
    """Loading `state` (on the ranks in bad_on; the good initial one elsewhere) fails on
    every rank, this rank's error naming `fragment` if it was bad, and changes nothing."""
    before = flat_now(opt, model)
    step = opt.step_count
    if rank in bad_on:
        checks.raises(ValueError, fragment, lambda: opt.load_model_state_dict(state))
    else:
        checks.raises(RuntimeError, "another rank",
                      lambda: opt.load_model_state_dict(initial))
    checks.check(torch.equal(flat_now(opt, model), before), f"a refused load changed {fragment}")
    checks.check(opt.step_count == step, "a refused load moved the step")


def peak_grad_bytes(strategy, count, precision="fp32"):
    model, opt = make(strategy, f"mem{count}{precision}", precision)
    accumulate_step(opt, model, 0, count)
    return opt.workers[0].memory()["peak_grads_bytes"]


def largest_unit_bytes(strategy, precision):
    """Gradient bytes of the largest fsdp unit in `precision`."""
    _, opt = make(strategy, f"units{precision}", precision)
    w = opt.workers[0]
    return max(e - b for b, e in (w.unit_range(u) for u in range(w.num_units))) * (
        4 if precision == "fp32" else 2)


report = {}
for strategy in strategies:
    model, opt = make(strategy, "loop")
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    for step in range(3):
        accumulate_step(opt, model, step, MICRO)

    # Misuse of no_sync().
    def nested():
        with opt.no_sync():
            with opt.no_sync():
                pass

    def step_inside():
        with opt.no_sync():
            opt.step()
    checks.raises(RuntimeError, "does not nest", nested)
    checks.raises(RuntimeError, "inside no_sync", step_inside)

    # The full state dict, under every strategy.
    sd = model.state_dict()
    checks.check(list(sd) == list(initial), f"{strategy}: state_dict keys {list(sd)}")
    checks.check(all(sd[k].shape == initial[k].shape for k in sd),
                 f"{strategy}: state_dict shapes differ from the model's")
    trained = flat_now(opt, model)
    checks.check(torch.equal(sd_flat(sd, model), trained),
                 f"{strategy}: state_dict is not the gathered parameters")
    saved = {k: v.clone() for k, v in sd.items()}
    if rank == 0:
        torch.save(sd, os.path.join(outdir, f"{strategy}-trained.pt"))
    torch.save(opt.sharded_state_dict(), os.path.join(outdir, f"{strategy}-part{rank}.pt"))

    # Bad loads: refused on every rank, nothing changed.
    bad = dict(initial)
    del bad["fc.bias"]
    bad["head.weight"] = torch.zeros(2)
    refused_everywhere(opt, model, (0, 1), bad, "missing keys: fc.bias")
    refused_everywhere(opt, model, (0, 1), bad, "unexpected keys: head.weight")
    shaped = dict(initial)
    shaped["conv.weight"] = torch.zeros(6, 8, 2)
    refused_everywhere(opt, model, (1,), shaped, "conv.weight is [6, 8, 2], the model's [6, 8, 3]")
    checks.raises(ValueError, "mapping", lambda: opt.load_model_state_dict([1, 2]))

    # Good loads: the initial parameters back, then the trained ones by torch's call.
    step = opt.step_count
    opt.load_model_state_dict(initial)
    checks.check(torch.equal(flat_now(opt, model), sd_flat(initial, model)),
                 f"{strategy}: load_model_state_dict did not load the initial parameters")
    checks.check(opt.step_count == step, "load_model_state_dict moved the step")
    # (sd's tensors are the parameters themselves under ddp/zero, as in torch: a copy.)
    result = model.load_state_dict(saved)
    checks.check(not result.missing_keys and not result.unexpected_keys, f"{result}")
    checks.check(torch.equal(flat_now(opt, model), trained),
                 f"{strategy}: model.load_state_dict did not load the trained parameters")
    accumulate_step(opt, model, 3, MICRO)
    checks.check(not torch.equal(flat_now(opt, model), trained), "no step after a load")

    report[strategy] = {"peak_grads_bytes_1": peak_grad_bytes(strategy, 1),
                        "peak_grads_bytes_4": peak_grad_bytes(strategy, 4)}
    if strategy == "fsdp":  # bf16 parts are summed on the servers too: one unit's buffer
        unit = largest_unit_bytes(strategy, "bf16")
        peaks = {"peak_grads_bytes_1": peak_grad_bytes(strategy, 1, "bf16"),
                 "peak_grads_bytes_4": peak_grad_bytes(strategy, 4, "bf16"),
                 "largest_unit_bytes": unit}
        checks.check(peaks["peak_grads_bytes_4"] == unit,
                     f"fsdp bf16: peak gradient bytes with 4 micro-batches "
                     f"{peaks['peak_grads_bytes_4']}, the largest unit's {unit}")
        report["fsdp-bf16"] = peaks
    print(f"rank {rank}: {strategy}: {checks.passed} checks passed", flush=True)

if rank == 0:
    with open(os.path.join(outdir, "memory.json"), "w") as f:
        json.dump(report, f)
print(f"rank {rank}: {checks.passed} checks passed", flush=True)
tt.shutdown()
