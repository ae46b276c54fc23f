"""tessel.torch equals torch: a model with embedding, convolution, layer norm
and linear layers, trained by 2 workers (tessel-launch, 2 shard servers) on
half-batches through DistributedOptimizer, ends where torch's own
single-process training on the whole batches ends, for every strategy
(ddp, zero1, zero2) and optimizer (SGD with momentum, SGD nesterov, Adam,
AdamW, RMSprop centered with momentum, Adagrad), within 1e-5 relative to the
parameters' largest magnitude; and a second launch reproduces the bits.

Not bitwise against torch: torch's CPU kernels fuse multiply-adds (FMA)
where Tessel's (the same on servers and workers, bitwise across strategies)
do not, and the mean of two half-batch gradients rounds differently from the
whole batch's. Both are last-bit effects; the table prints the measured
differences.

Usage: exact_test.py --launch=tessel-launch --worker=exact_worker.py [--steps=8]
"""
import argparse
import copy
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import driver  # noqa: E402
import exact_model  # noqa: E402

STRATEGIES = ["ddp", "zero1", "zero2", "fsdp"]
TOLERANCE = 1e-5


def reference(opt_name, steps):
    torch.manual_seed(0)
    model = exact_model.make_model()
    opt = exact_model.OPTIMIZERS[opt_name](model)
    make_schedule = exact_model.SCHEDULES.get(opt_name)
    schedule = make_schedule(opt) if make_schedule else None
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        tokens, labels = exact_model.batch(step)
        opt.zero_grad()
        loss_fn(model(tokens), labels).backward()
        if opt_name in exact_model.CLIP:
            torch.nn.utils.clip_grad_norm_(model.parameters(), exact_model.CLIP[opt_name])
        opt.step()
        if schedule:
            schedule.step()
    return exact_model.flat(model).numpy()


def rank_grads(master, dtype, step, world, scale=1.0):
    """Each rank's gradient of its slice of batch `step`, computed in `dtype` by a
    copy of the fp32 masters rounded to it (the loss times `scale`), widened."""
    half = copy.deepcopy(master).to(dtype)
    tokens, labels = exact_model.batch(step)
    per = exact_model.BATCH // world
    grads = []
    for r in range(world):
        half.zero_grad()
        loss = torch.nn.CrossEntropyLoss()(half(tokens[r * per:(r + 1) * per]).float(),
                                           labels[r * per:(r + 1) * per])
        (loss * torch.tensor(scale, dtype=torch.float32) if scale != 1.0 else loss).backward()
        grads.append([p.grad.float() for p in half.parameters()])
    return grads


def reference_bf16(opt_name, steps, strategy, world=2):
    """Mixed precision as Tessel defines it, in torch: the model computes in bf16
    (the fp32 masters rounded), each rank's bf16 gradient is widened and the mean
    taken in fp32 (ddp: the mean rounded to bf16 again, as its servers return it),
    and torch's optimizer updates the fp32 masters. Returns the masters rounded
    to bf16, what the workers hold."""
    master = exact_model.make_model()
    opt = exact_model.OPTIMIZERS[opt_name](master)
    for step in range(steps):
        grads = rank_grads(master, torch.bfloat16, step, world)
        for i, p in enumerate(master.parameters()):
            mean = (grads[0][i] + grads[1][i]) / 2
            p.grad = mean.to(torch.bfloat16).float() if strategy == "ddp" else mean
        opt.step()
    return exact_model.flat(master).to(torch.bfloat16).float().numpy()


def reference_fp16(opt_name, steps, strategy, world=2):
    """fp16 with dynamic loss scaling as Tessel defines it, in torch (torch's
    GradScaler rules): the model computes in fp16 (the fp32 masters rounded) on
    the loss times the scale; if any rank's fp16 gradient holds an inf or NaN the
    step is skipped everywhere and the scale backs off, otherwise the widened
    gradients' fp32 mean (ddp: rounded to fp16 again) times float32(1 / scale) is
    torch's optimizer's gradient, and the scale grows after growth_interval good
    steps. With clipping (exact_model.CLIP), torch's recipe: unscale, then
    torch.nn.utils.clip_grad_norm_ on the unscaled fp32 gradients, then step.
    Returns the masters rounded to fp16, which steps were applied, the final
    scale and how many steps clipped."""
    master = exact_model.make_half_model()
    opt = exact_model.OPTIMIZERS[opt_name](master)
    cfg = exact_model.FP16_SCALER
    scale, good, applied, clipped = cfg["init_scale"], 0, "", 0
    for step in range(steps):
        grads = rank_grads(master, torch.float16, step, world, scale)
        if not all(bool(torch.isfinite(g).all()) for rank in grads for g in rank):
            applied += "0"
            scale *= cfg["backoff_factor"]
            good = 0
            continue
        applied += "1"
        inv = torch.tensor(np.float32(1.0 / scale))
        for i, p in enumerate(master.parameters()):
            mean = (grads[0][i] + grads[1][i]) / 2
            if strategy == "ddp":
                mean = mean.to(torch.float16).float()
            p.grad = mean * inv
        if opt_name in exact_model.CLIP:
            norm = torch.nn.utils.clip_grad_norm_(master.parameters(), exact_model.CLIP[opt_name])
            clipped += int(float(norm) > exact_model.CLIP[opt_name])
        opt.step()
        good += 1
        if good == cfg["growth_interval"]:
            scale *= cfg["growth_factor"]
            good = 0
    return exact_model.flat(master).to(torch.float16).float().numpy(), applied, scale, clipped


def reference_unused(opt_name, steps, set_to_none, world=2):
    """torch on the whole batch with exact_model.BranchNet, whose slices decide
    on their own which branches to use: the loss is the mean of the slices'
    losses (the whole batch's mean), and torch's optimizer leaves every
    parameter whose .grad is None alone."""
    model = exact_model.make_branch_model()
    opt = exact_model.OPTIMIZERS[opt_name](model)
    loss_fn = torch.nn.CrossEntropyLoss()
    per = exact_model.BATCH // world
    for step in range(steps):
        tokens, labels = exact_model.batch(step)
        opt.zero_grad(set_to_none=set_to_none)
        loss = sum(loss_fn(model(tokens[r * per:(r + 1) * per], step),
                           labels[r * per:(r + 1) * per]) for r in range(world)) / world
        loss.backward()
        opt.step()
    return model


def launch(args, outdir, job, combos):
    return driver.launch(args.launch, job,
                         ["/usr/bin/python3", args.worker, str(args.steps), outdir] + combos,
                         timeout_s=300, wait_s=400)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    # fsdp clips on held steps (its gradients go out during backward): the
    # servers measure the norm, so its bits are not ddp's (compared with torch).
    combos = [f"{s}:{o}" for s in STRATEGIES for o in exact_model.OPTIMIZERS]
    # Clipping with overlap on (held steps, as fsdp's).
    held = [f"{s}:{o}:overlap" for s in ("ddp", "zero1", "zero2") for o in exact_model.CLIP]
    combos += held
    # Mixed precision: bf16 on the workers and the wire, fp32 masters on the servers.
    bf16 = [f"{s}:{o}:bf16" for s in ("ddp", "zero2", "fsdp") for o in ("sgd", "adam")]
    combos += bf16
    # fp16 with dynamic loss scaling (a model of fp16-capable CPU layers).
    fp16 = [f"{s}:{o}:fp16" for s in STRATEGIES for o in ("sgd", "adam")]
    # ... with clipping by the global norm of the unscaled gradients (not fsdp).
    fp16 += [f"{s}:{o}:fp16" for s in STRATEGIES if s != "fsdp" for o in exact_model.CLIP]
    combos += fp16
    # Parameters without gradients (find_unused_parameters), with
    # zero_grad(set_to_none=True), and Adam with zero_grad() keeping zeros.
    unused = [f"{s}:{o}:unused" for s in STRATEGIES for o in exact_model.UNUSED_OPTIMIZERS]
    unused += [f"{s}:adam:unused-keep" for s in STRATEGIES]
    combos += unused
    # The CUDA path's staging (the model's own tensors, copied to and from the
    # worker's buffers; fsdp: copies of each gathered unit) run on CPU models:
    # the bits of the bound runs above.
    staged = ["zero2:adam:staged", "ddp:sgd:staged", "zero1:rmsprop:staged",
              "zero2:adam-clip:staged", "ddp:adam:bf16-staged", "zero2:adam:fp16-staged",
              "zero2:adam:unused-staged", "zero2:groups:staged", "fsdp:adamw:staged",
              "fsdp:adam:bf16-staged", "fsdp:adam:fp16-staged", "fsdp:sgd:unused-staged"]
    combos += staged
    first = tempfile.mkdtemp(prefix="exact-1-")
    second = tempfile.mkdtemp(prefix="exact-2-")
    out, secs = launch(args, first, "exact", combos)
    print(f"launch 1: {len(combos)} runs of {args.steps} steps in {secs:.1f} s")
    for line in out.splitlines():
        if "gradient norms" in line and line.startswith("zero2"):
            print("  rank 0,", line)
    again = ["zero2:adam", "ddp:rmsprop", "zero1:sgd", "fsdp:adamw", "zero2:adam:bf16",
             "fsdp:adam:fp16"]
    _, secs2 = launch(args, second, "exact-again", again)
    print(f"launch 2: {len(again)} runs in {secs2:.1f} s")
    failures = []
    print(f"{'strategy':9} {'optimizer':9} {'max|d|/max|w|':>14} {'worst elem rel':>15} "
          f"{'moved':>8}  bitwise vs strategies")
    init = exact_model.flat(exact_model.make_model()).numpy()
    worst = {}
    for opt_name in exact_model.OPTIMIZERS:
        want = reference(opt_name, args.steps)
        base = None
        for strategy in STRATEGIES:
            if f"{strategy}:{opt_name}" not in combos:
                continue
            got = np.load(os.path.join(first, f"{strategy}-{opt_name}.npy"))
            d = np.abs(got - want)
            rel = float(d.max() / np.abs(want).max())
            elem = float((d / np.maximum(np.abs(want), 1e-2)).max())
            moved = float(np.abs(want - init).max())
            held_norm = strategy == "fsdp" and opt_name in exact_model.CLIP
            same = ("-" if base is None else "held" if held_norm else
                    "yes" if np.array_equal(got, base) else "NO")
            base = got if base is None else base
            worst[(strategy, opt_name)] = rel
            print(f"{strategy:9} {opt_name:9} {rel:14.3g} {elem:15.3g} {moved:8.3f}  {same}")
            if not rel < TOLERANCE:
                failures.append(f"{strategy} {opt_name}: relative difference {rel:.3g} >= "
                                f"{TOLERANCE}")
            if moved < 1e-3:
                failures.append(f"{strategy} {opt_name}: training did not move the parameters")
            if same == "NO":
                failures.append(f"{strategy} {opt_name}: differs from ddp's bits")
    for combo in held:
        strategy, opt_name, _ = combo.split(":")
        want = reference(opt_name, args.steps)
        got = np.load(os.path.join(first, f"{combo.replace(':', '-')}.npy"))
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        worst[(strategy, opt_name + ":overlap")] = rel
        same = ""
        if strategy == "ddp":  # the mean measured where its workers apply it: overlap=False's bits
            base = np.load(os.path.join(first, f"ddp-{opt_name}.npy"))
            same = " bitwise = overlap=False" if np.array_equal(got, base) else " NOT overlap=False's"
            if not np.array_equal(got, base):
                failures.append(f"{combo}: differs from ddp:{opt_name} (overlap=False)")
        print(f"{strategy:9} {opt_name:9} {rel:14.3g}  (clipped with overlap{', held steps' if strategy != 'ddp' else ''}){same}")
        if not rel < TOLERANCE:
            failures.append(f"{combo}: relative difference {rel:.3g} >= {TOLERANCE}")
    print(f"{'bf16':9} {'optimizer':9} {'vs torch bf16 compute + fp32 masters':>38}")
    for combo in bf16:
        strategy, opt_name, _ = combo.split(":")
        want = reference_bf16(opt_name, args.steps, strategy)
        got = np.load(os.path.join(first, f"{combo.replace(':', '-')}.npy"))
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        worst[(strategy, opt_name + ":bf16")] = rel
        print(f"{strategy:9} {opt_name:9} {'bitwise equal' if np.array_equal(got, want) else f'{rel:.3g}':>38}")
        if not rel < TOLERANCE:
            failures.append(f"{combo}: relative difference {rel:.3g} >= {TOLERANCE}")
    print(f"{'fp16':9} {'optimizer':9} {'vs torch fp16 compute + GradScaler rules':>42}  "
          f"applied steps, final scale")
    for combo in fp16:
        strategy, opt_name, _ = combo.split(":")
        want, want_applied, want_scale, clipped = reference_fp16(opt_name, args.steps, strategy)
        got = np.load(os.path.join(first, f"{combo.replace(':', '-')}.npy"))
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        worst[(strategy, opt_name + ":fp16")] = rel
        line = next((l for l in out.splitlines() if l.startswith(combo + ":")), "")
        got_applied = line.split("applied ")[1].split()[0] if "applied " in line else "?"
        got_scale = float(line.split("loss scale ")[1]) if "loss scale " in line else None
        verdict = "bitwise equal" if np.array_equal(got, want) else f"{rel:.3g}"
        note = f", clipped {clipped} of {want_applied.count('1')}" if opt_name in exact_model.CLIP else ""
        print(f"{strategy:9} {opt_name:9} {verdict:>42}  {got_applied}, {got_scale:g}{note}")
        if opt_name in exact_model.CLIP and clipped == 0:
            failures.append(f"{combo}: no step clipped; the test would not see clipping")
        if not rel < TOLERANCE:
            failures.append(f"{combo}: relative difference {rel:.3g} >= {TOLERANCE}")
        if got_applied != want_applied or got_scale != want_scale:
            failures.append(f"{combo}: applied {got_applied} scale {got_scale}, torch's rules "
                            f"give {want_applied} scale {want_scale}")
        if "0" not in want_applied or "1" not in want_applied:
            failures.append(f"{combo}: the run must both skip and apply steps ({want_applied})")
    print(f"{'unused':9} {'optimizer':9} {'max|d|/max|w|':>14}  never used: kept bitwise; "
          f"bitwise vs ddp; updates left out")
    branch = exact_model.make_branch_model()
    sizes = [p.numel() for p in branch.parameters()]
    names = [n for n, _ in branch.named_parameters()]
    never = [i for i, n in enumerate(names) if n.startswith("never.")]
    offsets = np.cumsum([0] + sizes)
    init_branch = exact_model.flat(branch).numpy()
    for variant in ("unused", "unused-keep"):
        for opt_name in exact_model.UNUSED_OPTIMIZERS:
            base = None
            for strategy in STRATEGIES:
                combo = f"{strategy}:{opt_name}:{variant}"
                if combo not in combos:
                    continue
                want = exact_model.flat(
                    reference_unused(opt_name, args.steps, variant == "unused")).numpy()
                got = np.load(os.path.join(first, f"{combo.replace(':', '-')}.npy"))
                rel = float(np.abs(got - want).max() / np.abs(want).max())
                kept = all(np.array_equal(got[offsets[i]:offsets[i + 1]],
                                          init_branch[offsets[i]:offsets[i + 1]]) for i in never)
                same = "-" if base is None else ("yes" if np.array_equal(got, base) else "NO")
                base = got if base is None else base
                line = next((l for l in out.splitlines() if l.startswith(combo + ":")), "")
                left = line.split(", ")[-1].split()[0] if "left out" in line else "?"
                worst[(strategy, f"{opt_name}:{variant}")] = rel
                print(f"{strategy:9} {opt_name + ('' if variant == 'unused' else '-keep'):9} "
                      f"{rel:14.3g}  {'yes' if kept else 'NO':>4} {same:>4} {left:>4}")
                if not rel < TOLERANCE:
                    failures.append(f"{combo}: relative difference {rel:.3g} >= {TOLERANCE}")
                if not kept:
                    failures.append(f"{combo}: a parameter that never had a gradient changed")
                if same == "NO":
                    failures.append(f"{combo}: differs from ddp's bits")
    for combo in staged:
        bound = combo[:-len(":staged")] if combo.endswith(":staged") else combo[:-len("-staged")]
        a = np.load(os.path.join(first, combo.replace(":", "-") + ".npy"))
        b = np.load(os.path.join(first, bound.replace(":", "-") + ".npy"))
        ok = np.array_equal(a, b)
        print(f"staged like a CUDA model, {bound}: {'bitwise equal' if ok else 'DIFFERENT'}")
        if not ok:
            failures.append(f"{combo}: staging changed the bits of {bound}")
    for combo in again:
        name = combo.replace(":", "-") + ".npy"
        a = np.load(os.path.join(first, name))
        b = np.load(os.path.join(second, name))
        ok = np.array_equal(a, b)
        print(f"run to run, {combo}: {'bitwise equal' if ok else 'DIFFERENT'}")
        if not ok:
            failures.append(f"{combo}: a second launch gave different bits")
    print(f"worst relative difference: {max(worst.values()):.3g} "
          f"({max(worst, key=worst.get)}); tolerance {TOLERANCE}")
    driver.finish(failures)


if __name__ == "__main__":
    main()
