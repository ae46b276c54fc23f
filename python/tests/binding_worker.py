"""One rank of the binding test (under tessel-launch, 2 ranks): bad input gets
a clear Python exception and changes nothing; state_dict round-trips
bitwise; synchronize_gradients, should_early_stop and shutdown behave.
Prints "rank R: N checks passed" or raises."""
import os
import sys

import numpy as np
import torch

import exact_model
import rank_lib
import tessel
import tessel.torch as tt

checks = rank_lib.Checks()
check, expect_raises = checks.check, checks.raises
expect_raises(ValueError, "rank 5 is outside [0, 2)", lambda: tt.init(rank=5, world_size=2))
expect_raises(RuntimeError, "call tessel.torch.init() first", tt.rank)
r = rank_lib.Rank()
cfg, rank, world, per, loss_fn = r.cfg, r.rank, r.world, r.per, r.loss_fn
check(tt.rank() == rank and tt.size() == world == 2, "launched with 2 ranks")

model = exact_model.make_model()
# Bad input: nothing is created, nothing changes.
expect_raises(ValueError, "is torch.float64", lambda: tt.DistributedOptimizer(
    torch.optim.SGD(exact_model.make_model().double().parameters(), lr=0.1)))
expect_raises(ValueError, "supports torch.optim SGD, Adam, AdamW, RMSprop and Adagrad; got Adadelta",
              lambda: tt.DistributedOptimizer(torch.optim.Adadelta(model.parameters())))
expect_raises(ValueError, "amsgrad=True", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters(), amsgrad=True)))
expect_raises(ValueError, "strategy 'fsdp'", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), strategy="fsdp"))
expect_raises(ValueError, "backward_passes_per_step", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), backward_passes_per_step=0))
frozen = exact_model.make_model()
frozen.fc.bias.requires_grad_(False)
expect_raises(ValueError, "parameter fc.bias does not require a gradient", lambda:
              tt.DistributedOptimizer(torch.optim.SGD(frozen.parameters(), lr=0.1), model=frozen))
expect_raises(ValueError, "fp32, bf16 or fp16", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), precision="fp8"))
expect_raises(ValueError, "may hold only letters, digits", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), job="../elsewhere"))
expect_raises(ValueError, "loss scaling needs overlap=False", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), precision="fp16", overlap=True))
expect_raises(ValueError, "the loss scale must be a finite number > 0", lambda:
              tt.DistributedOptimizer(torch.optim.Adam(model.parameters()), loss_scale=0.0))
expect_raises(ValueError, "loss_scale 'auto'", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), loss_scale="auto"))
expect_raises(ValueError, "backoff_factor must be in (0, 1)", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), precision="fp16", backoff_factor=1.5))
expect_raises(ValueError, "recovery needs strategy zero1, zero2 or fsdp", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(model.parameters()), strategy="ddp", recovery=True, checkpoint_every_steps=2))
meta = exact_model.make_model().to("meta")
expect_raises(ValueError, "Tessel trains CPU and CUDA models", lambda: tt.DistributedOptimizer(
    torch.optim.Adam(meta.parameters()), model=meta))
# Parameter group g's job, by the one grammar of derived names (core/job_name.h).
check(tessel.group_job_name("mlp", 0) == "mlp" and tessel.group_job_name("mlp", 2) == "mlp.g2",
      "group_job_name: the job itself for group 0, JOB.g<N> otherwise")
expect_raises(ValueError, "group must be >= 0", lambda: tessel.group_job_name("mlp", -1))
expect_raises(tessel.TesselError, "UNAVAILABLE", lambda: tessel.Worker(
    "127.0.0.1:1", "nowhere", 0, 1, connect_timeout_s=0.5))
before = exact_model.flat(model).clone()

# This test's buckets are 512 bytes: have them go as descriptors too (by
# default only payloads of 16 KiB and up do), so the in-place path is used.
os.environ["TESSEL_UCX_IN_PLACE_MIN_BYTES"] = "0"
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy="zero2", bucket_bytes=512, job=cfg["job"] + "-binding")
check(torch.equal(exact_model.flat(model), before), "joining keeps rank 0's initial parameters")


def train(step):
    r.train_step(opt, model, step)


for s in range(3):
    train(s)
check(opt._groups[0].worker.data_path() == "in place",
      "one host: gradients reduced where they lie, parameters read from the servers' memory")
agg = opt._groups[0].worker.aggregation()
check(agg.startswith("flat ("), "one host with its servers: flat aggregation, and why (%s)" % agg)
expect_raises(ValueError, "unknown aggregation 'tree'", lambda: tessel.Worker(
    "127.0.0.1:1", "nowhere", 0, 1, aggregation="tree", connect_timeout_s=0.5))
state = opt.state_dict()
at3 = exact_model.flat(model).clone()
# A negative learning rate is refused at the step; nothing changed; the fix goes on.
opt.param_groups[0]["lr"] = -1.0
tokens, labels = exact_model.batch(3)
opt.zero_grad()
expect_raises(ValueError, "lr", lambda: (loss_fn(model(tokens[:per]), labels[:per]).backward(),
                                         opt.step()))
check(torch.equal(exact_model.flat(model), at3), "a refused setting changes no parameter")
opt.param_groups[0]["lr"] = 1e-2
for s in range(3, 5):
    train(s)
at5 = exact_model.flat(model).clone()
check(not torch.equal(at5, at3), "training moved the parameters")
opt.load_state_dict(state)
check(torch.equal(exact_model.flat(model), at3), "load_state_dict restores step 3 bitwise")
for s in range(3, 5):
    train(s)
check(torch.equal(exact_model.flat(model), at5), "steps 3-4 again give the same bits")
expect_raises(ValueError, "not a tessel.torch", lambda: opt.load_state_dict({"x": 1}))

# Collective queries.
tokens, labels = exact_model.batch(9)
opt.zero_grad()
loss_fn(model(tokens[rank * per:(rank + 1) * per]), labels[rank * per:(rank + 1) * per]).backward()
mean = opt.synchronize_gradients()
check([tuple(g.shape) for g in mean] == [tuple(p.shape) for p in model.parameters()],
      "synchronize_gradients: one tensor per parameter")
check(all(torch.isfinite(g).all() for g in mean), "finite mean gradients")
opt.step()
stop = opt.should_early_stop(1.0 + rank)
check(isinstance(stop, bool), "should_early_stop answers a bool")

# Overlap on, steps that did not clip: the next step's update is not held for a
# factor, and clip_grad_norm_ says how to clip from any step (nothing changes).
expect_raises(RuntimeError, "hold_for_clipping=True", lambda: tt.clip_grad_norm_(opt, 1.0))
expect_raises(ValueError, "norm types 1, 2 and inf", lambda: tt.clip_grad_norm_(opt, 1.0, 3.0))
expect_raises(ValueError, "hold_for_clipping must be", lambda: tt.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1), model=model, hold_for_clipping="yes"))
expect_raises(ValueError, "overlap=False clip_grad_norm_ needs no held step",
              lambda: tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              model=model, overlap=False, hold_for_clipping=True))

# A parameter replaced behind the optimizer's back is refused.
w = model.fc.weight
saved = w.data
w.data = torch.zeros(3, 3)
expect_raises(ValueError, "was replaced or reshaped", opt.step)
w.data = saved

# A parameter without a gradient: torch leaves it alone. Without
# find_unused_parameters that is refused by name before anything is pushed,
# and the next step goes on; with it, the parameter keeps its bits (and .grad
# stays None, as torch's), and the counter says how many were left out.
for unused in (False, True):
    umodel = exact_model.make_branch_model()
    uopt = tt.DistributedOptimizer(torch.optim.AdamW(umodel.parameters(), lr=1e-2), model=umodel,
                                   strategy="zero2", overlap=False, find_unused_parameters=unused,
                                   job=f"{cfg['job']}-unused-{unused}")
    check(all(p.grad is None for p in umodel.parameters()), "a fresh model's .grad stays None")
    tokens, labels = exact_model.batch(0)  # step 0: `extra`, `rare` and `never` unused

    def fwd(step=0):
        uopt.zero_grad(set_to_none=True)
        loss_fn(umodel(tokens[rank * per:(rank + 1) * per], step),
                labels[rank * per:(rank + 1) * per]).backward()

    before = exact_model.flat(umodel).clone()
    fwd()
    if not unused:
        expect_raises(ValueError, "extra.weight, extra.bias, rare.weight, rare.bias, never.weight",
                      uopt.step)
        check(torch.equal(exact_model.flat(umodel), before), "a refused step changes nothing")
        for m in (umodel.extra, umodel.rare, umodel.never):  # given by hand: all have one
            for p in m.parameters():
                p.grad = torch.zeros_like(p)
        check(uopt.step() is True and uopt.step_count == 1, "with every gradient the step goes on")
    else:
        never = umodel.never.weight.detach().clone()
        check(uopt.step() is True, "the step with unused parameters is applied")
        check(torch.equal(umodel.never.weight.detach(), never) and umodel.never.weight.grad is None,
              "an unused parameter keeps its bits and its None .grad")
        check(uopt.skipped_tensors == 6, f"6 parameters left out, not {uopt.skipped_tensors}")
        check(not torch.equal(exact_model.flat(umodel), before), "the used ones moved")
    uopt.close()

# A DDP script's torch.nn.utils.clip_grad_norm_ between backward and step clips this
# rank's gradients, not the job's mean: step() refuses it (overlap=False: before
# anything is pushed) naming tt.clip_grad_norm_, and nothing changes; with the
# gradients made again and tt.clip_grad_norm_ the step goes on.
cmodel = exact_model.make_model()
copt = tt.DistributedOptimizer(torch.optim.SGD(cmodel.parameters(), lr=0.1), model=cmodel,
                               strategy="zero2", overlap=False, job=cfg["job"] + "-clip")


def clip_backward():
    copt.zero_grad()
    tokens, labels = exact_model.batch(0)
    loss_fn(cmodel(tokens[rank * per:(rank + 1) * per]),
            labels[rank * per:(rank + 1) * per]).backward()


clip_backward()
torch.nn.utils.clip_grad_norm_(cmodel.parameters(), 0.1)
before = exact_model.flat(cmodel).clone()
expect_raises(RuntimeError, "tt.clip_grad_norm_", copt.step)
check(torch.equal(exact_model.flat(cmodel), before) and copt.step_count == 0,
      "a refused step changes nothing")
clip_backward()
tt.clip_grad_norm_(copt, 0.1)
check(copt.step() is True and copt.step_count == 1, "tt.clip_grad_norm_, then the step goes on")
copt.close()

# fsdp: between steps the worker holds no parameters; gathered() holds them all.
fmodel = exact_model.make_model()
fopt = tt.DistributedOptimizer(torch.optim.SGD(fmodel.parameters(), lr=0.1), model=fmodel,
                               strategy="fsdp", job=cfg["job"] + "-fsdp")
check(all(p.numel() == 0 for p in fmodel.parameters()), "fsdp: no parameters held after joining")
for s in range(2):
    tokens, labels = exact_model.batch(s)
    fopt.zero_grad()
    loss_fn(fmodel(tokens[rank * per:(rank + 1) * per]),
            labels[rank * per:(rank + 1) * per]).backward()
    check(all(p.numel() == 0 for p in fmodel.parameters()),
          "fsdp: every unit released once backward pushed it")
    fopt.step()
with fopt.gathered():
    full = exact_model.flat(fmodel).clone()
    check(full.numel() == exact_model.flat(exact_model.make_model()).numel(),
          "fsdp: gathered() holds every parameter")
check(all(p.numel() == 0 for p in fmodel.parameters()), "fsdp: released after gathered()")
expect_raises(RuntimeError, "hold_for_clipping=True", lambda: tt.clip_grad_norm_(fopt, 1.0))
other = exact_model.make_model()
expect_raises(ValueError, "to hold exactly model.parameters()", lambda: tt.DistributedOptimizer(
    torch.optim.SGD(other.fc.parameters(), lr=0.1), model=other, strategy="fsdp"))

tt.shutdown()
check(torch.equal(exact_model.flat(fmodel), full), "fsdp: shutdown leaves the full model")
after = exact_model.flat(model)  # still readable: copied out of the workers' buffers
check(after.shape == at5.shape and torch.isfinite(after).all(), "the model survives shutdown")
expect_raises(RuntimeError, "closed", opt.step)
expect_raises(RuntimeError, "call tessel.torch.init() first", tt.rank)  # the session is reset
print(f"rank {rank}: {checks.passed} checks passed", flush=True)
