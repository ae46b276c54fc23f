"""A transformer block trained with tensor and pipeline parallelism (tessel.torch.parallel).

    bazel build //tools:tessel-launch //python:tessel
    # DP2 x TP2: 2 replicas of the model, each split over 2 tensor ranks
    bazel-bin/tools/tessel-launch --nproc_per_node=4 --servers=2 -- \\
        /usr/bin/python3 examples/hybrid_attention.py --tp=2 --pp=1
    # PP2 x DP2: block 0 on stage 0, block 1 on stage 1, 4 micro-batches
    bazel-bin/tools/tessel-launch --nproc_per_node=4 --servers=2 -- \\
        /usr/bin/python3 examples/hybrid_attention.py --tp=1 --pp=2 --micro_batches=4

The model is two pre-norm transformer blocks (multi-head self-attention and a
GELU MLP, each with a residual) written as plain torch (`Block`). `parallelize`
turns a dense block into its tensor-parallel version in place: the query, key
and value projections become ColumnParallelLinear (each tensor rank computes
its own heads), the attention output projection RowParallelLinear (the heads'
contributions summed over the tensor ranks), and the MLP a column -> row pair;
the layer norms and the row-parallel biases stay replicated. Every process
builds the dense model from the same seed first, so the split model starts
exactly where the dense one does. With --pp=2 each stage holds one block and
Pipeline runs 1F1B over the micro-batches. The data is a fixed regression
task; rank 0 prints the loss, and --out=DIR writes each stage's dense
parameters (gathered over its tensor ranks) to DIR/stage<p>.pt.
"""
import argparse
import math
import os
import time

import torch
from torch import nn
from torch.nn import functional as F

EMBED, HEADS, HIDDEN, SEQ, BATCH = 16, 4, 32, 6, 8


class Block(nn.Module):
    """x + attention(ln1(x)), then + mlp(ln2(.)). The same code runs dense and split:
    a split block's projections return this rank's heads only."""

    def __init__(self, embed=EMBED, heads=HEADS, hidden=HIDDEN):
        super().__init__()
        self.head_dim = embed // heads
        self.ln1 = nn.LayerNorm(embed)
        self.q = nn.Linear(embed, embed)
        self.k = nn.Linear(embed, embed)
        self.v = nn.Linear(embed, embed)
        self.out = nn.Linear(embed, embed)
        self.ln2 = nn.LayerNorm(embed)
        self.fc1 = nn.Linear(embed, hidden)
        self.fc2 = nn.Linear(hidden, embed)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.ln1(x)

        def heads(t):  # [b, s, local heads * head_dim] -> [b, local heads, s, head_dim]
            return t.view(b, s, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1) @ v
        x = x + self.out(att.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def make_model(seed=0, embed=EMBED, heads=HEADS, hidden=HIDDEN):
    torch.manual_seed(seed)
    return nn.Sequential(Block(embed, heads, hidden), Block(embed, heads, hidden))


def parallelize(block):
    """Splits a dense Block over the tensor ranks, in place (heads across ranks)."""
    from tessel.torch import parallel as tp
    block.q = tp.ColumnParallelLinear.from_dense(block.q)
    block.k = tp.ColumnParallelLinear.from_dense(block.k)
    block.v = tp.ColumnParallelLinear.from_dense(block.v)
    block.out = tp.RowParallelLinear.from_dense(block.out)
    block.fc1 = tp.ColumnParallelLinear.from_dense(block.fc1)
    block.fc2 = tp.RowParallelLinear.from_dense(block.fc2)
    return block


def batch(step, rows=BATCH, seq=SEQ, embed=EMBED):
    """The global batch of step `step`: inputs [rows, seq, embed] and targets alike."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(rows, seq, embed, generator=g)
    y = torch.tanh(x.flip(1)) + 0.1 * torch.randn(rows, seq, embed, generator=g)
    return x, y


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr)
    raise ValueError(f"--optimizer={name}: sgd, adam, adamw, rmsprop or adagrad")


def train_dense(steps, optimizer="sgd", lr=0.05, rows=BATCH, seed=0):
    """The reference: one process, the dense model, the whole batch."""
    model = make_model(seed)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    for step in range(steps):
        x, y = batch(step, rows)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks per stage")
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages (1 or 2: one block each)")
    ap.add_argument("--micro_batches", type=int, default=2, help="per replica's batch (--pp=2)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rows", type=int, default=BATCH, help="rows of a global batch")
    ap.add_argument("--embed", type=int, default=EMBED, help="model width")
    ap.add_argument("--heads", type=int, default=HEADS, help="attention heads")
    ap.add_argument("--hidden", type=int, default=HIDDEN, help="MLP width")
    ap.add_argument("--seq", type=int, default=SEQ, help="sequence length")
    ap.add_argument("--warmup", type=int, default=0, help="steps left out of the timing")
    ap.add_argument("--plain", action="store_true",
                    help="no tensor or pipeline parallelism: tessel.torch's data parallelism "
                         "alone (the benchmark's baseline); --tp and --pp must be 1")
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--strategy", default="zero2", help="zero1 or zero2")
    ap.add_argument("--out", default="", help="write each stage's dense parameters here")
    ap.add_argument("--log_every", type=int, default=5, help="rank 0 prints the loss this often")
    ap.add_argument("--checkpoint_every_steps", type=int, default=0,
                    help="with N > 0: the shard servers checkpoint every partition every N "
                         "steps, and a lost shard server rolls every process back to the newest "
                         "checkpoint complete in every partition (they need --checkpoint_dir)")
    args = ap.parse_args()

    import tessel.torch as tt
    from tessel.torch import parallel as tp
    torch.set_num_threads(1)
    if args.pp not in (1, 2):
        raise SystemExit("--pp: 1 or 2 (the model has two blocks)")
    if args.plain and (args.tp, args.pp) != (1, 1):
        raise SystemExit("--plain takes --tp=1 --pp=1")
    if args.plain:
        tt.init()
    else:
        tt.init(tensor_parallel=args.tp, pipeline_parallel=args.pp)
    model = make_model(0, args.embed, args.heads, args.hidden)
    if not args.plain:
        for block in model:
            parallelize(block)
    stage = model if args.pp == 1 else model[tp.pipeline_stage()]
    dp, d = (tt.size(), tt.rank()) if args.plain else (tp.data_parallel_size(), tp.data_rank())
    per = args.rows // dp
    recovery = args.checkpoint_every_steps > 0
    # With recovery a Pipeline runs the step (also with one stage): it turns a lost
    # shard server into a rollback instead of an exception.
    pipe = tp.Pipeline(stage, micro_batches=args.micro_batches, loss_fn=F.mse_loss) \
        if args.pp > 1 or recovery else None
    opt = tt.DistributedOptimizer(make_optimizer(args.optimizer, stage.parameters(), args.lr),
                                  model=stage, strategy=args.strategy, recovery=recovery,
                                  checkpoint_every_steps=args.checkpoint_every_steps)
    if opt.step_count > 0:  # a restarted process, resumed from a checkpoint
        print(f"rank {tt.rank()}: resumed at step {opt.step_count}", flush=True)
    start = time.monotonic()
    while opt.step_count < args.steps:  # goes back on a rollback
        step, recoveries = opt.step_count, opt.recoveries
        if step == args.warmup:
            start = time.monotonic()
        x, y = batch(step, args.rows, args.seq, args.embed)
        x, y = x[d * per:(d + 1) * per], y[d * per:(d + 1) * per]
        opt.zero_grad()
        if pipe is not None:
            loss = pipe.step(x, y)  # None: the step was lost and every process rolled back
        else:
            loss = F.mse_loss(stage(x), y)
            loss.backward()
            loss = float(loss)
        opt.step()
        if opt.recoveries != recoveries:  # every process says so
            print(f"rank {tt.rank()} step {step}: rolled back to step {opt.step_count}",
                  flush=True)
        elif loss is not None and tt.rank() == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss:.6f}", flush=True)
    ms = (time.monotonic() - start) * 1000 / max(1, args.steps - args.warmup)
    if tt.rank() == 0:
        print(f"{dp} replicas x {args.pp} stages x {args.tp} tensor ranks: {ms:.2f} ms/step"
              f"{f', recoveries {opt.recoveries}' if recovery else ''}", flush=True)
    if args.plain:
        if args.out and d == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save(stage.state_dict(), os.path.join(args.out, "stage0.pt"))
    else:
        dense = tp.dense_state_dict(stage)  # collective over the tensor ranks
        if args.out and d == 0 and tp.tensor_rank() == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save(dense, os.path.join(args.out, f"stage{tp.pipeline_stage()}.pt"))
    tt.shutdown()


if __name__ == "__main__":
    main()
