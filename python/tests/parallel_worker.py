"""One rank of a TP2 x PP2 job (4 processes) checking tessel.torch.parallel's layers,
state dicts and refusals with real peers (run by parallel_test.py under tessel-launch).

Each check raises AssertionError at once if it fails; rank 0 prints how many passed.
"""
import struct
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import tessel
import tessel.torch as tt
from tessel.torch import parallel as tp

checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(f"rank {tt.rank()}: {what}")
    checks += 1


def raises(kind, fn, *needles):
    try:
        fn()
    except kind as e:
        for n in needles:
            check(n in str(e), f"{kind.__name__} {str(e)!r} names {n!r}")
        return str(e)
    raise AssertionError(f"rank {tt.rank()}: expected {kind.__name__} from {fn}")


def main():
    torch.set_num_threads(1)
    tt.init(tensor_parallel=2, pipeline_parallel=2)
    h = tt.default_session().hybrid
    t, p = tp.tensor_rank(), tp.pipeline_stage()
    check((tp.data_rank(), p, t) == (tt.rank() // 4, (tt.rank() // 2) % 2, tt.rank() % 2),
          "ranks as worker/hybrid.h numbers them")
    check(tp.data_parallel_size() == 1 and tp.tensor_parallel_size() == 2, "sizes")

    # The mesh's all_reduce_sum sums in place: an array it would have to convert (and
    # then sum a copy of) is refused, and nothing is sent.
    for bad in (np.ones(3), np.ones((3, 2), np.float32)[:, 0], [1.0, 2.0]):
        raises(TypeError, lambda: h.mesh.all_reduce_sum(
            h.tensor_group, h.tensor_tag("forward_sum"), bad, "a bad array"), "float32")
    a = np.full(3, t + 1.0, np.float32)
    h.mesh.all_reduce_sum(h.tensor_group, h.tensor_tag("forward_sum"), a, "the good one")
    check(a.tolist() == [3.0, 3.0, 3.0], f"all_reduce_sum in place: {a}")

    # Sizes the tensor ranks do not divide.
    raises(ValueError, lambda: tp.ColumnParallelLinear(4, 3), "out_features 3",
           "tensor_parallel=2")
    raises(ValueError, lambda: tp.RowParallelLinear(5, 4), "in_features 5", "tensor_parallel=2")
    raises(ValueError, lambda: tp.VocabParallelEmbedding(7, 4), "num_embeddings 7")
    raises(TypeError, lambda: tp.ColumnParallelLinear.from_dense(nn.Conv1d(2, 2, 1)), "Linear")

    # Each layer against its dense twin, forward and backward.
    torch.manual_seed(3)
    dense1, dense2 = nn.Linear(6, 8), nn.Linear(8, 5)
    emb = nn.Embedding(10, 6)
    ids = torch.tensor([[0, 9, 4], [5, 5, 1]])
    x = torch.randn(4, 6, requires_grad=True)
    col = tp.ColumnParallelLinear.from_dense(dense1, gather_output=True)
    row = tp.RowParallelLinear.from_dense(dense2, input_is_parallel=False)
    vemb = tp.VocabParallelEmbedding.from_dense(emb)
    check(torch.equal(vemb(ids), emb(ids)), "VocabParallelEmbedding equals nn.Embedding bitwise")
    raises(IndexError, lambda: vemb(torch.tensor([10])), "[0, 10)")
    xs = x.detach().clone().requires_grad_(True)
    want = dense2(torch.relu(dense1(x)))
    got = row(torch.relu(col(xs)))
    check(torch.allclose(got, want, rtol=1e-6, atol=1e-6),
          f"column(gather_output) -> row(input_is_parallel=False) equals the dense pair "
          f"({(got - want).abs().max().item():.2e})")
    want.sum().backward()
    got.sum().backward()
    check(torch.allclose(xs.grad, x.grad, rtol=1e-6, atol=1e-6), "input gradients equal")
    check(torch.allclose(col.weight.grad, tp.layers.comm.own_slice(h, dense1.weight.grad, 0),
                         rtol=1e-6, atol=1e-6), "column-parallel weight gradient is the slice")
    for layer, dense in ((col, dense1), (row, dense2), (vemb, emb)):
        back = layer.to_dense()
        check(all(torch.equal(a, b) for a, b in zip(back.state_dict().values(),
                                                    dense.state_dict().values())),
              f"{type(layer).__name__}.to_dense() is the dense layer bitwise")

    # Parallel layers outside Tessel: the model's own state dicts.
    block = nn.Sequential(nn.LayerNorm(6), tp.ColumnParallelLinear(6, 8), nn.GELU(),
                          tp.RowParallelLinear(8, 6))
    with torch.no_grad():
        block[0].weight.fill_(1.0 + t)  # replicated, but different on each tensor rank
    dsd = tp.dense_state_dict(block)
    check(tuple(dsd["1.weight"].shape) == (8, 6) and tuple(dsd["3.weight"].shape) == (6, 8),
          "dense_state_dict has the dense shapes")
    ssd = tp.shard_state_dict(block, dsd)
    check(all(torch.equal(ssd[k], v) for k, v in block.state_dict().items()),
          "shard_state_dict(dense_state_dict(m)) is m's state_dict bitwise")
    raises(KeyError, lambda: tp.shard_state_dict(block, {}), "0.weight")

    # Strategies a hybrid partition cannot take; replicated parameters made tensor rank 0's.
    for strategy in ("ddp", "fsdp"):
        raises(ValueError, lambda: tt.DistributedOptimizer(
            torch.optim.SGD(block.parameters(), lr=0.1), model=block, strategy=strategy),
            strategy, "zero1 or zero2")
    opt = tt.DistributedOptimizer(torch.optim.SGD(block.parameters(), lr=0.1), model=block,
                                  job=f"blk{p}")
    theirs = h.mesh.all_gather(h.tensor_group, h.tensor_tag("gather"),
                               block[0].weight.detach().numpy(), "ln weights")
    check(theirs[0] == theirs[1] and block[0].weight[0].item() == 1.0,
          "the replicated LayerNorm holds tensor rank 0's values on both tensor ranks")
    start = tp.dense_state_dict(block)
    xb = torch.randn(3, 6, generator=torch.Generator().manual_seed(5))
    opt.zero_grad()
    block(xb).pow(2).mean().backward()
    opt.step()
    check(not torch.equal(tp.dense_state_dict(block)["1.weight"], start["1.weight"]),
          "the step changed the weights")
    theirs = h.mesh.all_gather(h.tensor_group, h.tensor_tag("gather"),
                               torch.cat([block[0].weight.detach(), block[3].bias.detach()]
                                         ).numpy(), "replicated after a step")
    check(theirs[0] == theirs[1] and not torch.equal(block[0].weight.detach(),
                                                     torch.ones(6)),
          "the replicated LayerNorm and row-parallel bias stay bitwise equal over the tensor "
          "ranks after a step (and the step changed them)")
    opt.load_model_state_dict(tp.shard_state_dict(block, start))
    check(all(torch.equal(v, start[k]) for k, v in tp.dense_state_dict(block).items()),
          "opt.load_model_state_dict(shard_state_dict(dense)) puts the dense values back")
    opt.close()

    # Stages that disagree on micro-batches.
    stage = nn.Linear(4, 4)
    raises(ValueError, lambda: tp.Pipeline(stage, micro_batches=2 + p, loss_fn=F.mse_loss),
           "micro_batches=2", "micro_batches=3")
    raises(ValueError, lambda: tp.Pipeline(stage, micro_batches=0), "micro_batches")

    # Stages that disagree on the activation: stage 0 sends 16 features, stage 1 takes 8.
    stage = nn.Linear(4, 16) if p == 0 else nn.Linear(8, 2)
    pipe = tp.Pipeline(stage, micro_batches=2, loss_fn=F.mse_loss)
    x, y = torch.randn(4, 4), torch.randn(4, 2)
    if p == 1:
        raises(RuntimeError, lambda: pipe.step(None, y), "stage 1", "[2, 16]", "from stage 0")
    else:
        raises(tp.StageError, lambda: pipe.step(x, None), "stage 1", "[2, 16]")
        raises(ValueError, lambda: pipe.step(x[:3], None), "3 rows", "micro_batches=2")
    tt.shutdown()
    if tt.default_session().initialized:
        raise AssertionError("shutdown left the session initialized")
    print(f"rank {h.rank}: {checks} checks passed", flush=True)


if __name__ == "__main__":
    sys.exit(main())
