"""tessel.torch.parallel with real processes (tessel-launch, 2 shard servers):

  - examples/hybrid_attention.py (two transformer blocks, heads split over
    tensor ranks) trained with DP2 x TP2 (a plain loop), PP2 x DP2 and
    DP2 x TP2 x PP2 (Pipeline, 2 micro-batches), SGD with momentum: every
    parameter within 1e-5 of the largest update of single-process training of
    the dense model on the whole batch; DP2 x TP2 and DP2 x TP2 x PP2 run twice
    end bitwise equal;
  - TP2 x PP2 (4 micro-batches, zero1) with Adam, AdamW, RMSprop and Adagrad:
    within 1e-4 of the largest update (they divide each element by its own
    gradient's size, which magnifies last-bit differences where a gradient is
    near zero) for every parameter except the key projections' biases,
    whose exact gradient is zero (softmax ignores a constant added to every
    key's score), so each run's last-bit noise there is all a sign-normalising
    optimizer sees: their difference is printed, not bounded;
  - parallel_worker.py (TP2 x PP2): the layers against dense torch, state
    dicts, and what is refused, with real peers;
  - refusals that need no cluster: T*P not dividing the world size, a
    parallel layer outside a tensor-parallel job, Pipeline outside one.

Usage: parallel_test.py --launch=tessel-launch --example=hybrid_attention.py
       --worker=parallel_worker.py
"""
import argparse
import os
import sys
import tempfile

import torch

import driver
import tessel.torch as tt
from tessel.torch import parallel as tp

SGD_CONFIGS = (  # name, tp, pp, micro-batches, processes, runs
    ("DP2xTP2", 2, 1, 1, 4, 2),
    ("PP2xDP2", 1, 2, 2, 4, 1),
    ("DP2xTP2xPP2", 2, 2, 2, 8, 2),
)
ADAPTIVE = ("adam", "adamw", "rmsprop", "adagrad")
STEPS = 8
ZERO_GRADIENT = (".k.bias",)  # softmax's shift invariance: the exact gradient is 0


def load_run(out, pp):
    got = {}
    for p in range(pp):
        for k, v in torch.load(os.path.join(out, f"stage{p}.pt")).items():
            got[f"{p}.{k}" if pp > 1 else k] = v
    return got


def compare(got, ref, init, skip=()):
    """(worst |got - ref| / largest |ref - init| over the parameters not skipped,
    the name of the worst, the skipped ones' worst ratio)."""
    upd = max((ref[k] - init[k]).abs().max().item() for k in ref)
    worst, name, skipped = 0.0, "", 0.0
    for k in ref:
        r = (got[k] - ref[k]).abs().max().item() / upd
        if any(k.endswith(s) for s in skip):
            skipped = max(skipped, r)
        elif r >= worst:
            worst, name = r, k
    return worst, name, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.example)))
    import hybrid_attention as ha
    torch.set_num_threads(1)
    failures = []
    root = tempfile.mkdtemp(prefix="parallel-", dir=os.environ.get("TEST_TMPDIR"))
    init = ha.make_model().state_dict()

    def run(name, tp_, pp, micro, nproc, optimizer="sgd", lr=0.05, strategy="zero2"):
        out = os.path.join(root, name)
        log, secs = driver.launch(
            args.launch, name.replace("x", "-").lower(),
            ["/usr/bin/python3", args.example, f"--tp={tp_}", f"--pp={pp}",
             f"--micro_batches={micro}", f"--steps={STEPS}", f"--optimizer={optimizer}",
             f"--lr={lr}", f"--strategy={strategy}", f"--out={out}"],
            nproc=nproc, timeout_s=180, what=name)
        ms = [l for l in log.splitlines() if "ms/step" in l]
        return load_run(out, pp), secs, ms[-1] if ms else "?"

    ref = ha.train_dense(STEPS, "sgd", lr=0.05).state_dict()
    for name, tp_, pp, micro, nproc, runs in SGD_CONFIGS:
        got, secs, ms = run(name, tp_, pp, micro, nproc)
        worst, where, _ = compare(got, ref, init)
        line = (f"{name} (SGD momentum 0.9, {STEPS} steps, M={micro}): worst difference from "
                f"dense single-process training {worst:.2e} of the largest update (at {where}); "
                f"{ms}; launch {secs:.1f} s")
        if runs > 1:
            again, _, _ = run(name + "-again", tp_, pp, micro, nproc)
            same = all(torch.equal(got[k], again[k]) for k in got)
            line += f"; a second run {'bitwise equal' if same else 'DIFFERS'}"
            if not same:
                failures.append(f"{name}: two runs differ")
        print(line, flush=True)
        if worst > 1e-5:
            failures.append(f"{name}: {worst:.2e} of the update from the dense model (> 1e-5)")

    for optimizer in ADAPTIVE:
        lr = 0.01
        ref_o = ha.train_dense(STEPS, optimizer, lr=lr).state_dict()
        got, secs, ms = run(f"TP2xPP2-{optimizer}", 2, 2, 4, 4, optimizer, lr, "zero1")
        worst, where, skipped = compare(got, ref_o, init, ZERO_GRADIENT)
        print(f"TP2xPP2 {optimizer} (zero1, M=4): worst {worst:.2e} of the largest update (at "
              f"{where}); key biases (exact gradient 0) {skipped:.2e}; {ms}", flush=True)
        if worst > 1e-4:
            failures.append(f"TP2xPP2 {optimizer}: {worst:.2e} of the update (> 1e-4)")

    log, _ = driver.launch(args.launch, "parallel-checks", ["/usr/bin/python3", args.worker],
                           nproc=4, timeout_s=180, what="parallel_worker")
    print(next((l for l in log.splitlines() if "checks passed" in l), "no checks line"))

    # Refused before anything connects.
    s = tt.Session()
    try:
        s.init(registry="127.0.0.1:1", job="x", rank=0, world_size=6, tensor_parallel=4)
        failures.append("tensor_parallel=4 with 6 processes was accepted")
    except ValueError as e:
        print("refused:", e)
        if "tensor_parallel=4" not in str(e) or "world size 6" not in str(e):
            failures.append(f"the refusal does not name the numbers: {e}")
    if s.initialized:
        failures.append("a refused init left the session initialized")
    for what, make in (("ColumnParallelLinear", lambda: tp.ColumnParallelLinear(4, 4)),
                       ("Pipeline", lambda: tp.Pipeline(torch.nn.Linear(2, 2), 2))):
        try:
            make()
            failures.append(f"{what} outside a tensor-parallel job was accepted")
        except RuntimeError as e:
            print("refused:", e)
    driver.finish(failures)


if __name__ == "__main__":
    main()
