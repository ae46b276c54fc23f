"""One rank of the state-dict test (under tessel-launch).

    state_worker.py save STRATEGY DIR   train 4 steps, rank 0 writes DIR/state.pt
                                        (opt.state_dict()), train 3 more, rank 0
                                        writes DIR/uninterrupted.npy
    state_worker.py load STRATEGY DIR   load DIR/state.pt, train steps 4-6,
                                        rank 0 writes DIR/resumed-STRATEGY-WORLD.npy

Every run trains on the same global batches (each rank its slice), so a
resume in another world size or strategy continues the same training.
"""
import os
import sys

import torch

import exact_model
import rank_lib
import tessel.torch as tt

mode, strategy, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
r = rank_lib.Rank()
rank, world = r.rank, r.world
model = exact_model.make_model()
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy=strategy, bucket_bytes=512)


def train(step):
    r.train_step(opt, model, step)


def save_params(name):
    r.save_flat(opt, model, os.path.join(outdir, name))


if mode == "save":
    for s in range(4):
        train(s)
    state = opt.state_dict()
    if rank == 0:
        torch.save(state, os.path.join(outdir, "state.pt"))
    for s in range(4, 7):
        train(s)
    save_params("uninterrupted.npy")
else:
    opt.load_state_dict(torch.load(os.path.join(outdir, "state.pt")))
    for s in range(4, 7):
        train(s)
    save_params(f"resumed-{strategy}-{world}.npy")
print(f"rank {rank}: {mode} {strategy} x{world} done", flush=True)
tt.shutdown()
