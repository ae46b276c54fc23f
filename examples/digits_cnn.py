"""Train a small CNN on scikit-learn's handwritten digits with Tessel.

    bazel build //tools:tessel-launch //python:tessel
    bazel-bin/tools/tessel-launch --nproc_per_node=2 --servers=2 -- \\
        /usr/bin/python3 examples/digits_cnn.py

Each of the N workers takes its slice of every batch; tessel.torch's
DistributedOptimizer averages the gradients on the shard servers and runs
Adam there (zero2), so every worker holds the same model after each step.
Rank 0 prints progress and the test accuracy (>= 95% after 12 epochs).

--backend=gloo trains the same model the same way under torch's own
DistributedDataParallel (gloo) instead, for the speed comparison the
example's test prints (tessel-launch sets RANK and WORLD_SIZE; give
MASTER_ADDR and MASTER_PORT).
"""
import argparse
import contextlib
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def data():
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    split = int(0.8 * len(y))
    return (x[:split], y[:split]), (x[split:], y[split:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64, help="global batch (all workers)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--strategy", default="zero2", choices=["ddp", "zero1", "zero2", "fsdp"])
    ap.add_argument("--backend", default="tessel", choices=["tessel", "gloo"])
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.backend == "tessel":
        import tessel.torch as tt
        tt.init()
        rank, world = tt.rank(), tt.size()
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch={args.batch} must be a multiple of the {world} workers")

    (x_train, y_train), (x_test, y_test) = data()
    torch.manual_seed(0)
    model = Net()
    adam = torch.optim.Adam(model.parameters(), lr=args.lr)
    if args.backend == "tessel":
        opt = tt.DistributedOptimizer(adam, model=model, strategy=args.strategy)
        net = model
        full_model = opt.gathered  # fsdp: every unit's parameters, for evaluation
    else:
        net = torch.nn.parallel.DistributedDataParallel(model)
        opt = adam
        full_model = contextlib.nullcontext
    loss_fn = nn.CrossEntropyLoss()
    per = args.batch // world
    steps_per_epoch = len(y_train) // args.batch
    step_times = []
    for epoch in range(args.epochs):
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch))
        total = 0.0
        for i in range(steps_per_epoch):
            idx = order[i * args.batch + rank * per: i * args.batch + (rank + 1) * per]
            start = time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(net(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
            step_times.append(time.perf_counter() - start)
            total += loss.item()
        if rank == 0:
            with torch.no_grad(), full_model():
                acc = (model(x_test).argmax(1) == y_test).float().mean().item()
            print(f"epoch {epoch + 1:2d}/{args.epochs}: loss {total / steps_per_epoch:.4f}, "
                  f"test accuracy {100 * acc:.2f}%", flush=True)
    if rank == 0:
        with torch.no_grad(), full_model():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        ms = 1e3 * float(np.median(step_times[steps_per_epoch:] or step_times))
        print(f"digits_cnn: backend {args.backend}, {world} workers, "
              f"{args.epochs * steps_per_epoch} steps, median step {ms:.2f} ms, "
              f"test accuracy {100 * acc:.2f}% ({len(y_test)} test images)", flush=True)
    if args.backend == "tessel":
        tt.shutdown()
    else:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
