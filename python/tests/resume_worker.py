"""One rank of the resume test (under tessel-launch): a DDP script's resume habits.

    resume_worker.py OPT STRATEGY full DIR     train 8 steps; after step 4 every rank
                                               takes opt.state_dict() and rank 0 writes
                                               DIR/OPT.pt (torch.save of the optimizer's
                                               and the scheduler's state dicts); rank 0
                                               writes DIR/OPT-full.npy at the end
    resume_worker.py OPT STRATEGY resume DIR   a fresh model, torch optimizer, OneCycleLR
                                               and DistributedOptimizer; bad state dicts
                                               are refused with nothing changed; then
                                               torch.load, both load_state_dict, steps
                                               4-7, rank 0 writes
                                               DIR/OPT-resumed-STRATEGY-WxS.npy

OPT: "sgd" (momentum, OneCycleLR cycling it) or "adamw" (OneCycleLR cycling beta1),
both with two parameter groups (no weight decay on biases, norms and the embedding; their
own max_lr).
The scheduler is made on the torch optimizer before it is wrapped, and stepped after
every opt.step(), as a DDP script does. Every world size trains the same global batches.
"""
import copy
import os
import sys
import warnings

import torch

import exact_model
import rank_lib
import tessel.torch as tt

TOTAL, SAVE_AT = 8, 4

opt_name, strategy, mode, outdir = sys.argv[1:5]
r = rank_lib.Rank()
checks = rank_lib.Checks()


def make():
    model = exact_model.make_model()
    # Weight decay on the weights only, not on biases and norms, as a real script
    # does. The no-decay group is small: some shard servers own none of its
    # elements (they take no part in its steps, core/layout.h).
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    if opt_name == "sgd":
        base = torch.optim.SGD([{"params": decay}, {"params": rest, "weight_decay": 0.0}],
                               lr=0.05, momentum=0.9, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(base, max_lr=[0.2, 0.1], total_steps=TOTAL)
    else:
        base = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}],
                                 lr=1e-2, weight_decay=0.05)
        sched = torch.optim.lr_scheduler.OneCycleLR(base, max_lr=[0.03, 0.01], total_steps=TOTAL)
    opt = tt.DistributedOptimizer(base, model=model, strategy=strategy, bucket_bytes=512)
    return model, opt, sched


def train(model, opt, sched, step):
    r.train_step(opt, model, step)
    sched.step()


def refused(opt, model, state, fragment):
    """load_state_dict(state) raises ValueError naming the difference; nothing changed."""
    groups = copy.deepcopy([{k: v for k, v in g.items() if k != "params"}
                            for g in opt.param_groups])
    before = r.gathered_flat(opt, model)
    checks.raises(ValueError, fragment, lambda: opt.load_state_dict(state))
    checks.check(copy.deepcopy([{k: v for k, v in g.items() if k != "params"}
                                for g in opt.param_groups]) == groups,
                 "a refused load changed param_groups")
    checks.check(torch.equal(r.gathered_flat(opt, model), before),
                 "a refused load changed the parameters")
    checks.check(opt.step_count == 0, "a refused load changed the step")


model, opt, sched = make()
path = os.path.join(outdir, f"{opt_name}.pt")
if mode == "full":
    # opt.step() counts torch's optimizer._step_count: no "lr_scheduler.step() before
    # optimizer.step()" warning from the scheduler.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for s in range(TOTAL):
            if s == SAVE_AT:
                state = {"opt": opt.state_dict(), "sched": sched.state_dict()}
                pg = state["opt"]["param_groups"]
                checks.check(len(pg) == 2 and pg[1]["weight_decay"] == 0.0
                             and pg[0]["lr"] == opt.param_groups[0]["lr"],
                             "state_dict()['param_groups'] is torch's")
                checks.check(pg[0]["params"] == list(range(len(opt.param_groups[0]["params"]))),
                             "param_groups' params are torch's indices")
                if r.rank == 0:
                    torch.save(state, path)
            train(model, opt, sched, s)
    checks.check(not [w for w in seen if "before `optimizer.step()`" in str(w.message)],
                 "the scheduler warned that optimizer.step() was not called")
    r.save_flat(opt, model, os.path.join(outdir, f"{opt_name}-full.npy"))
else:
    saved = torch.load(path)
    first_lr = opt.param_groups[0]["lr"]
    bad = copy.deepcopy(saved["opt"])
    del bad["param_groups"][1]
    refused(opt, model, bad, "2 parameter group(s) in this optimizer, 1 in the state")
    bad = copy.deepcopy(saved["opt"])
    bad["param_groups"][1]["params"].pop()
    refused(opt, model, bad, "parameter group 1 has")
    bad = copy.deepcopy(saved["opt"])
    bad["groups"].pop()
    refused(opt, model, bad, "Tessel job(s)")
    bad = copy.deepcopy(saved["opt"])
    bad["groups"].reverse()  # each job's blob onto the other's parameters
    refused(opt, model, bad, "the state's job 0 holds")
    bad = copy.deepcopy(saved["opt"])
    del bad["param_groups"][0]["momentum" if opt_name == "sgd" else "betas"]
    refused(opt, model, bad, "lacks")
    checks.check(opt.param_groups[0]["lr"] == first_lr, "refusals kept the lr")
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    checks.check(opt.step_count == SAVE_AT, f"resumed at step {opt.step_count}")
    checks.check(opt.param_groups[0]["lr"] == saved["opt"]["param_groups"][0]["lr"]
                 and opt.param_groups[0]["lr"] != first_lr, "the saved lr is back")
    for s in range(SAVE_AT, TOTAL):
        train(model, opt, sched, s)
    servers = r.cfg["num_servers"]
    r.save_flat(opt, model, os.path.join(
        outdir, f"{opt_name}-resumed-{strategy}-{r.world}x{servers}.npy"))
print(f"rank {r.rank}: {opt_name} {strategy} {mode} done, {checks.passed} checks", flush=True)
tt.shutdown()
