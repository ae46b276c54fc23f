"""The tensor-parallel group's communication as autograd functions (Megatron-LM's
four): copy_to (identity forward, sum of the gradients backward), reduce_from
(sum forward, identity backward), gather_from (concatenate the last dimension
forward, this rank's slice backward) and scatter_to (this rank's slice forward,
concatenate backward).

Contract. Sums run through tessel.Mesh.all_reduce_sum: member order, so every
tensor rank gets the same bits and a run is bitwise reproducible. Tensors
travel as float32 (other dtypes: TypeError naming it); a CUDA tensor goes
through host memory and comes back on its device. With one tensor rank every
function is the identity. Every call is collective over the tensor group.

Threads: the training thread's (forward; backward on autograd's, which is the
caller's for CPU tensors).

Example:
    x = copy_to(h, x)                 # before a column-parallel matmul
    y = reduce_from(h, partial, "attn.out")  # after a row-parallel one
"""
import numpy as np
import torch


def _float32(t, what):
    if t.dtype != torch.float32:
        raise TypeError(f"{what}: tensor-parallel layers compute in float32; got {t.dtype}")
    return t


def all_reduce(h, t, kind, what):
    """A new tensor: the sum over the tensor group of `t`, in rank order."""
    _float32(t, what)
    buf = t.detach().to("cpu", copy=True).contiguous()
    h.mesh.all_reduce_sum(h.tensor_group, h.tensor_tag(kind), buf.numpy(), what)
    return buf.to(t.device)


def all_gather(h, t, dim, what):
    """The tensor group's `t`s concatenated along `dim`, in rank order."""
    _float32(t, what)
    mine = t.detach().to("cpu").contiguous()
    parts = h.mesh.all_gather(h.tensor_group, h.tensor_tag("gather"), mine.numpy(), what)
    out = [torch.from_numpy(np.frombuffer(b, dtype=np.float32).copy()).reshape(mine.shape)
           for b in parts]
    return torch.cat(out, dim=dim).to(t.device)


def own_slice(h, t, dim=-1):
    """This tensor rank's contiguous 1/tp of `t` along `dim`."""
    n = t.shape[dim]
    if n % h.tp:
        raise ValueError(f"a dimension of size {n} does not split over tensor_parallel={h.tp}")
    k = n // h.tp
    return t.narrow(dim, h.t * k, k)


class _CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h, what):
        ctx.h, ctx.what = h, what
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return all_reduce(ctx.h, g, "backward_sum", ctx.what + " (input gradient)"), None, None


class _ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h, what):
        return all_reduce(h, x, "forward_sum", what)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class _GatherFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h, what):
        ctx.h = h
        return all_gather(h, x, -1, what)

    @staticmethod
    def backward(ctx, g):
        return own_slice(ctx.h, g).contiguous(), None, None


class _ScatterTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h, what):
        ctx.h, ctx.what = h, what
        return own_slice(h, x).contiguous()

    @staticmethod
    def backward(ctx, g):
        return all_gather(ctx.h, g, -1, ctx.what + " (input gradient)"), None, None


def copy_to(h, x, what):
    return x if h.tp == 1 else _CopyTo.apply(x, h, what)


def reduce_from(h, x, what):
    return x if h.tp == 1 else _ReduceFrom.apply(x, h, what)


def gather_from(h, x, what):
    return x if h.tp == 1 else _GatherFrom.apply(x, h, what)


def scatter_to(h, x, what):
    return x if h.tp == 1 else _ScatterTo.apply(x, h, what)
