"""One rank of attack_test's `launch` scenario, as a user's script would be:
tessel.torch from tessel-launch's environment (no flag, no token: the
launcher's TESSEL_TOKEN_FILE), a small MLP trained with Adam (zero2, 16 KiB
buckets, so the job has several) on this rank's half of each seeded global
batch; rank 0 saves the final parameters, gathered, as one float32 vector.

Usage (under tessel-launch): attack_torch_worker.py STEPS OUT.npy
"""
import sys

import numpy as np
import torch

import tessel.torch as tt

BATCH, IN, HIDDEN, CLASSES = 64, 32, 128, 4

steps, out = int(sys.argv[1]), sys.argv[2]
tt.init()
rank, world = tt.rank(), tt.size()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                            torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                            torch.nn.Linear(HIDDEN, CLASSES))
opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2), model=model,
                              strategy="zero2", bucket_bytes=16384)
loss_fn = torch.nn.CrossEntropyLoss()
per = BATCH // world
for step in range(steps):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, IN, generator=g)
    y = x[:, :CLASSES].argmax(1)  # learnable: the loss falls
    rows = slice(rank * per, (rank + 1) * per)
    opt.zero_grad()
    loss = loss_fn(model(x[rows]), y[rows])
    loss.backward()
    opt.step()
    if rank == 0 and (step + 1) % 50 == 0:
        print("step %d/%d loss %.4f" % (step + 1, steps, loss.item()), flush=True)
with opt.gathered():
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
if rank == 0:
    np.save(out, flat.float().numpy())
    print("saved %d parameters" % flat.numel(), flush=True)
opt.close()
tt.shutdown()
