"""The loop a torch user writes, through tessel.torch, for ddp, zero1, zero2 and
fsdp (2 workers, 2 shard servers; train_loop_worker.py checks the rest):
  - no_sync() accumulation over 2 micro-batches per rank equals single-process
    torch on the whole batch (the loss of each micro-batch summed, averaged over
    ranks: torch DDP's meaning) within 1e-5 of the largest parameter;
  - every strategy ends bitwise where ddp ends (fsdp's micro-batches summed on
    the shard servers, each rank's in order, then over ranks in rank order);
  - every strategy's model.state_dict() after training is that model, and
    merge_sharded_state_dicts() of the ranks' sharded_state_dict() equals it
    bitwise;
  - peak gradient bytes of a step with 4 micro-batches against 1 (printed);
    fsdp in bf16 with 4 micro-batches holds the largest unit's gradients only.

Usage: train_loop_test.py --launch=tessel-launch --worker=train_loop_worker.py
"""
import argparse
import json
import os
import tempfile

import torch

import driver
import exact_model
import tessel.torch as tt

STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
WORLD, MICRO, STEPS = 2, 2, 3


def reference():
    """Single-process torch: the same steps, loss = sum over ranks and micro-batches
    of each micro-batch's mean loss, divided by the world size."""
    torch.set_num_threads(1)
    model = exact_model.make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = torch.nn.CrossEntropyLoss()
    per = exact_model.BATCH // WORLD
    n = per // MICRO
    for step in range(STEPS):
        tokens, labels = exact_model.batch(step)
        opt.zero_grad()
        loss = 0
        for r in range(WORLD):
            for m in range(MICRO):
                rows = slice(r * per + m * n, r * per + (m + 1) * n)
                loss = loss + loss_fn(model(tokens[rows]), labels[rows])
        (loss / WORLD).backward()
        opt.step()
    return model.state_dict()


def flat(sd):
    return torch.cat([v.reshape(-1) for v in sd.values()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="train-loop-")
    out, secs = driver.launch(args.launch, "loop", ["/usr/bin/python3", args.worker, d,
                                                    *STRATEGIES], nproc=WORLD)
    print("\n".join(line for line in out.splitlines() if "checks passed" in line))
    ref = reference()
    want = flat(ref)
    failures = []
    print(f"{'strategy':8} {'no_sync vs single process':>26} {'sharded merge':>14}")
    for s in STRATEGIES:
        sd = torch.load(os.path.join(d, f"{s}-trained.pt"))
        if list(sd) != list(ref):
            failures.append(f"{s}: state_dict keys {list(sd)}")
            continue
        rel = float((flat(sd) - want).abs().max() / want.abs().max())
        parts = [torch.load(os.path.join(d, f"{s}-part{r}.pt")) for r in range(WORLD)]
        merged = tt.merge_sharded_state_dicts(parts)
        same = list(merged) == list(sd) and all(torch.equal(merged[k], sd[k]) for k in sd)
        print(f"{s:8} {rel:26.3g} {'bitwise' if same else 'DIFFERENT':>14}")
        if not rel < 1e-5:
            failures.append(f"{s}: no_sync training differs by {rel:.3g} (tolerance 1e-5)")
        if not same:
            failures.append(f"{s}: merged sharded state dict differs from state_dict()")
    first = torch.load(os.path.join(d, f"{STRATEGIES[0]}-trained.pt"))
    for s in STRATEGIES[1:]:
        sd = torch.load(os.path.join(d, f"{s}-trained.pt"))
        if not all(torch.equal(sd[k], first[k]) for k in first):
            failures.append(f"{s} does not end bitwise where {STRATEGIES[0]} ends")
    print(f"every strategy ends bitwise where {STRATEGIES[0]} ends: "
          f"{'yes' if not any('bitwise where' in f for f in failures) else 'NO'}")
    with open(os.path.join(d, "memory.json")) as f:
        memory = json.load(f)
    print("peak gradient bytes per worker, 1 micro-batch -> 4 micro-batches:")
    for s, m in memory.items():
        unit = f"  (largest unit {m['largest_unit_bytes']})" if "largest_unit_bytes" in m else ""
        print(f"  {s:9} {m['peak_grads_bytes_1']:>8} -> {m['peak_grads_bytes_4']:>8}{unit}")
    half = memory.get("fsdp-bf16")
    if "fsdp" in STRATEGIES and (half is None or
                                 half["peak_grads_bytes_4"] != half["largest_unit_bytes"]):
        failures.append(f"fsdp bf16 with 4 micro-batches: peak gradient bytes {half} are not "
                        "the largest unit's")
    print(f"(the launch took {secs:.1f} s)")
    driver.finish(failures)


if __name__ == "__main__":
    main()
