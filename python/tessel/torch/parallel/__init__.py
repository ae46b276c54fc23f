"""tessel.torch.parallel: tensor and pipeline parallelism for your own torch model.

    import tessel.torch as tt
    from tessel.torch import parallel as tp
    tt.init(tensor_parallel=2, pipeline_parallel=2)   # world = dp * 2 * 2 processes
    block = MyBlock(...)                               # the dense model, same seed everywhere
    block.qkv = tp.ColumnParallelLinear.from_dense(block.qkv)
    block.out = tp.RowParallelLinear.from_dense(block.out)
    stage = [block, head][tp.pipeline_stage()]
    pipe = tp.Pipeline(stage, micro_batches=4, loss_fn=torch.nn.MSELoss())
    opt = tt.DistributedOptimizer(torch.optim.Adam(stage.parameters()), model=stage)
    for x, y in my_replicas_batches:                   # replica tp.data_rank()'s rows
        opt.zero_grad(); loss = pipe.step(x, y); opt.step()
    dense = tp.dense_state_dict(stage)                 # this stage, gathered whole

What it does. init(tensor_parallel=T, pipeline_parallel=P) makes the world's
processes dp = world / (T*P) replicas of P pipeline stages of T tensor ranks
(ranks as worker/hybrid.h numbers them: tensor_rank() = rank % T,
pipeline_stage() = (rank / T) % P, data_rank() = rank / (T*P)) and joins the
job's worker-to-worker mesh (UCX; the session holds it as a HybridMesh,
tessel/torch/hybrid_mesh.py, one floor below this package). Each (stage,
tensor rank) partition is its own Tessel job on the shard servers
(JOB.p<stage>.t<rank>); its dp replicas
reduce gradients there (DistributedOptimizer with strategy zero1 or zero2;
every torch optimizer Tessel supports), exactly as tessel-hybrid-train does.
The layers (layers.py) split their weights Megatron-style and sum forward and
backward partials worker to worker in fixed rank order, so runs are bitwise
reproducible; Pipeline (pipeline.py) runs the 1F1B schedule with activations
and their gradients over UCX. docs/hybrid.md is the user's guide.
"""
from tessel.torch import session as _session
from tessel.torch.parallel.layers import (ColumnParallelLinear, RowParallelLinear,
                                          VocabParallelEmbedding, dense_state_dict,
                                          shard_state_dict, split_parameters, to_dense)
from tessel.torch.parallel.pipeline import Pipeline, StageError


def _hybrid(what):
    s = _session.default_session()
    if not s.initialized or s.hybrid is None:
        raise RuntimeError(f"tessel.torch.parallel.{what}(): call tessel.torch.init("
                           f"tensor_parallel=T, pipeline_parallel=P) first")
    return s.hybrid


def data_rank():
    """This process's data-parallel replica d, in [0, data_parallel_size())."""
    return _hybrid("data_rank").d


def tensor_rank():
    """This process's tensor rank t, in [0, tensor_parallel_size())."""
    return _hybrid("tensor_rank").t


def pipeline_stage():
    """This process's pipeline stage p, in [0, pipeline_parallel_size())."""
    return _hybrid("pipeline_stage").p


def data_parallel_size():
    return _hybrid("data_parallel_size").dp


def tensor_parallel_size():
    return _hybrid("tensor_parallel_size").tp


def pipeline_parallel_size():
    return _hybrid("pipeline_parallel_size").pp


__all__ = ["ColumnParallelLinear", "Pipeline", "RowParallelLinear", "StageError",
           "VocabParallelEmbedding", "data_parallel_size", "data_rank", "dense_state_dict",
           "pipeline_parallel_size", "pipeline_stage", "shard_state_dict", "split_parameters",
           "tensor_parallel_size", "tensor_rank", "to_dense"]
