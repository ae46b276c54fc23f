"""One rank of the straggler report test (straggler_report_test.py): trains
exact_model with zero2 under tessel-launch, each step standing in FAST_S of
compute (time.sleep), in three phases:
  fault-free  FAULT_FREE_STEPS steps, every rank alike;
  slowed      rank SLOW sleeps SLOW_S a step, until rank 0 and rank SLOW have
              each had their StragglerWarning (or MAX_SLOWED steps);
  recovered   every rank alike again, until both had the warning that it
              ended (or MAX_RECOVERED steps).
The ranks agree on when a phase ends through worker.all_reduce_mean (a side
job of the servers', not the job the servers score). Warnings are printed as
usual (the launcher's worker<R>.log) and recorded; rank R writes
OUTDIR/rank<R>.json: its pid, the phases' step ranges, every warning with its
step, and last_step_report()'s fields at chosen steps.
Usage (under tessel-launch): straggler_report_worker.py OUTDIR SLOW
"""
import dataclasses
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

import exact_model
import rank_lib
import tessel.torch as tt

FAST_S, SLOW_S = 0.02, 0.2
FAULT_FREE_STEPS, MAX_SLOWED, MAX_RECOVERED = 120, 80, 300

outdir, slow = sys.argv[1], int(sys.argv[2])
r = rank_lib.Rank()
torch.manual_seed(0)
model = exact_model.Net()
opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), model=model,
                              strategy="zero2", bucket_bytes=1024)
said = []
show = warnings.showwarning


def record(message, category, *args, **kwargs):
    if issubclass(category, tt.StragglerWarning):
        said.append({"step": opt.step_count, "text": str(message)})
    show(message, category, *args, **kwargs)


warnings.showwarning = record
out = {"rank": r.rank, "pid": os.getpid(), "phases": {}, "reports": {}}
step = 0


def train(sleep_s):
    global step
    time.sleep(sleep_s)
    r.train_step(opt, model, step)
    step += 1


def report(name):
    rep = opt.last_step_report()
    out["reports"][name] = dict(dataclasses.asdict(rep), repr=repr(rep))


def agreed(mine):
    """Whether rank 0 and rank `slow` both say yes (a collective)."""
    v = np.zeros(r.world, dtype=np.float32)
    v[r.rank] = 1.0 if mine else 0.0
    opt.workers[0].all_reduce_mean(v)
    return v[0] > 0 and v[slow] > 0


def heard(text):
    return any(text in s["text"] for s in said)


start = opt.step_count
for _ in range(FAULT_FREE_STEPS):
    train(FAST_S)
report("fault_free_end")
out["phases"]["fault_free"] = [start + 1, opt.step_count]

start = opt.step_count
mark = "this rank (%d) is the job's straggler" % slow if r.rank == slow else \
    "rank %d is the job's straggler" % slow
for _ in range(MAX_SLOWED):
    train(SLOW_S if r.rank == slow else FAST_S)
    if agreed(heard(mark)):
        break
report("slowed_named")
out["phases"]["slowed"] = [start + 1, opt.step_count]

start = opt.step_count
for _ in range(MAX_RECOVERED):
    train(FAST_S)
    if agreed(heard("no longer the job's straggler")):
        break
report("recovered_end")
out["phases"]["recovered"] = [start + 1, opt.step_count]
out["said"] = said
with open(os.path.join(outdir, f"rank{r.rank}.json"), "w") as f:
    json.dump(out, f, indent=1)
if r.rank == 0:
    print(f"trained {opt.step_count} steps", flush=True)
tt.shutdown()
