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

import numpy as np
import torch

import exact_model
import tessel.torch as tt

mode, strategy, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = tt.init()
rank, world = tt.rank(), tt.size()
torch.set_num_threads(1)
model = exact_model.make_model()
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy=strategy, bucket_bytes=512)
loss_fn = torch.nn.CrossEntropyLoss()
per = exact_model.BATCH // world


def train(step):
    tokens, labels = exact_model.batch(step)
    sl = slice(rank * per, (rank + 1) * per)
    opt.zero_grad()
    loss_fn(model(tokens[sl]), labels[sl]).backward()
    opt.step()


def save_params(name):
    with opt.gathered():
        flat = exact_model.flat(model).numpy()
    if rank == 0:
        np.save(os.path.join(outdir, name), flat)


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
