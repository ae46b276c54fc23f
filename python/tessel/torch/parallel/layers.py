"""Tensor-parallel layers (Megatron-LM's split): ColumnParallelLinear,
RowParallelLinear, VocabParallelEmbedding, and the whole-model helpers
to_dense, dense_state_dict and shard_state_dict.

Contract. Tensor rank t of T holds a contiguous 1/T of each split tensor:
- ColumnParallelLinear(in, out): rows [t*out/T, (t+1)*out/T) of the weight and
  bias, so it computes that slice of the output. chunks=C (a fused layer, e.g.
  q, k and v as one Linear(E, 3E)): the output is C equal blocks and rank t
  holds its 1/T of each, so its output is C blocks of out/(C*T), in order
  (`q, k, v = layer(x).chunk(3, -1)` works split and dense). Its input's gradient is the
  sum of the ranks' partials (comm.copy_to); gather_output=True concatenates
  the output slices (the full output on every rank).
- RowParallelLinear(in, out): columns [t*in/T, (t+1)*in/T) of the weight; the
  partial outputs are summed over the group in rank order (comm.reduce_from),
  then the bias, which every rank holds whole (replicated), is added.
  input_is_parallel=False takes the full input and uses this rank's slice.
- VocabParallelEmbedding(n, d): rows [t*n/T, (t+1)*n/T) of the table; ids
  outside the slice give zeros and the group sums (one rank holds each row).
A layer's SPLIT names the parameters it splits and along which dimension
(split_parameters(model) finds them all); every other parameter of a model is
replicated over the tensor ranks (DistributedOptimizer makes it tensor rank 0's at construction;
it gets the same gradient on every rank, so it stays identical).

Sizes not divisible by T raise ValueError naming them; a layer made outside a
tensor-parallel job (tessel.torch.init without tensor_parallel or
pipeline_parallel) raises RuntimeError. A layer made directly draws the whole
dense layer's initialisation (nn.Linear's, nn.Embedding's: the same draws, so
it is from_dense of the dense layer made from the same RNG state; the whole
layer's memory once, on the CPU) and keeps its slice: with the same seed on
every rank the slices form one dense layer (equal slices would be a symmetry
between the ranks' units that training never breaks). from_dense(module) builds a layer from
a dense torch layer (this rank's slice of its values: start from the dense
twin's or a pretrained file's weights); to_dense() is collective over the
tensor group and returns the full dense torch layer (equal, bit for bit, to
what from_dense sliced).

Example:
    tt.init(tensor_parallel=2)
    fc1 = ColumnParallelLinear.from_dense(dense.fc1)   # [out/2, in]
    fc2 = RowParallelLinear.from_dense(dense.fc2)      # [out, in/2]
    y = fc2(torch.relu(fc1(x)))                        # y equals dense.fc2(relu(dense.fc1(x)))
    fc1.to_dense()                                     # nn.Linear(in, out), on every rank
"""
import copy
import math

import torch
from torch import nn
from torch.nn import functional as F

from tessel.torch import session as session_lib
from tessel.torch.parallel import comm


def hybrid_of(session, what):
    """The session's HybridMesh, or RuntimeError naming `what`."""
    s = session or session_lib.default_session()
    if not s.initialized or s.hybrid is None:
        raise RuntimeError(f"{what} needs a tensor- or pipeline-parallel job: call "
                           f"tessel.torch.init(tensor_parallel=T, pipeline_parallel=P) first")
    return s.hybrid


def _split(n, tp, what, name):
    if n % tp:
        raise ValueError(f"{what}: {name} {n} is not divisible by tensor_parallel={tp}")
    return n // tp


def _shard(h, full, dim, chunks=1):
    """This tensor rank's part of a dense tensor split along `dim`: the contiguous
    1/T, or with chunks > 1 (a fused layer, e.g. q, k and v in one) its 1/T of each of
    the `chunks` equal blocks along `dim`, concatenated."""
    if chunks == 1:
        return comm.own_slice(h, full, dim)
    n = full.shape[dim]
    blocks = full.unflatten(dim, (chunks, n // chunks))
    return comm.own_slice(h, blocks, dim + 1).flatten(dim, dim + 1)


def _gather(h, local, dim, chunks, what):
    """The dense tensor from every tensor rank's part (_shard's inverse; collective)."""
    if chunks == 1:
        return comm.all_gather(h, local, dim, what)
    n = local.shape[dim]
    blocks = local.unflatten(dim, (chunks, n // chunks))
    return comm.all_gather(h, blocks.contiguous(), dim + 1, what).flatten(dim, dim + 1)


def _dense_linear_init(in_features, out_features, bias):
    """The whole layer's nn.Linear initialisation: its draws from the RNG, in its
    order (nn.Linear.reset_parameters), so a layer keeps its slice of the same
    dense layer on every rank that has the same RNG state."""
    weight = torch.empty(out_features, in_features)
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if not bias:
        return weight, None
    bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
    return weight, torch.empty(out_features).uniform_(-bound, bound)


def _check_dense(module, kind, what):
    if not isinstance(module, kind):
        raise TypeError(f"{what}.from_dense takes a torch.nn.{kind.__name__}, got "
                        f"{type(module).__name__}")
    if module.weight.dtype != torch.float32:
        raise TypeError(f"{what}.from_dense: the weight is {module.weight.dtype}; tensor-parallel "
                        f"layers are float32")


class _ParallelLinear(nn.Module):
    """What both linear layers share: the weight split along SPLIT["weight"] (0: output
    rows, column-parallel; 1: input columns, row-parallel), the bias split with it or
    whole, initialisation, from_dense and to_dense."""

    SPLIT = {}

    def __init__(self, in_features, out_features, bias, session, init, chunks=1):
        super().__init__()
        self._session = session
        self.in_features, self.out_features = in_features, out_features
        self.chunks = chunks
        h = hybrid_of(session, self._what)
        dim = self.SPLIT["weight"]
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"{self._what}: chunks must be an int >= 1, got {chunks!r}")
        if chunks > 1 and out_features % (chunks * h.tp):
            raise ValueError(f"{self._what}: out_features {out_features} in chunks={chunks} is "
                             f"not divisible by chunks x tensor_parallel = {chunks} x {h.tp}")
        local = _split(out_features if dim == 0 else in_features, h.tp, self._what,
                       "out_features" if dim == 0 else "in_features")
        if init:  # the whole dense layer's draws, then this rank's part
            weight, full_bias = _dense_linear_init(in_features, out_features, bias)
            weight = _shard(h, weight, dim, chunks).clone()
            if bias and "bias" in self.SPLIT:
                full_bias = _shard(h, full_bias, 0, chunks).clone()
        else:  # from_dense fills them (no random numbers drawn)
            weight = torch.empty((local, in_features) if dim == 0 else (out_features, local))
            full_bias = (torch.empty(local if "bias" in self.SPLIT else out_features)
                         if bias else None)
        self.weight = nn.Parameter(weight)
        if bias:
            self.bias = nn.Parameter(full_bias)  # split with the weight, or whole
        else:
            self.register_parameter("bias", None)

    def shard_tensor(self, name, full):
        """This rank's part of the dense layer's tensor `name` ('weight' or 'bias')."""
        if name not in self.SPLIT:
            return full
        return _shard(hybrid_of(self._session, self._what), full, self.SPLIT[name], self.chunks)

    def gather_tensor(self, name, local):
        """The dense layer's tensor `name` from every rank's part (collective)."""
        if name not in self.SPLIT:
            return local
        return _gather(hybrid_of(self._session, self._what), local, self.SPLIT[name],
                       self.chunks, f"{self._what} {name}")

    @property
    def _what(self):
        return f"{type(self).__name__}({self.in_features}, {self.out_features})"

    @classmethod
    def _from_dense(cls, module, session, **options):
        _check_dense(module, nn.Linear, cls.__name__)
        layer = cls(module.in_features, module.out_features, module.bias is not None,
                    session=session, _init=False, **options)
        with torch.no_grad():
            layer.weight.copy_(layer.shard_tensor("weight", module.weight.detach()))
            if module.bias is not None:
                layer.bias.copy_(layer.shard_tensor("bias", module.bias.detach()))
        return layer

    def to_dense(self):
        """The dense nn.Linear (collective over the tensor group)."""
        out = nn.Linear(self.in_features, self.out_features, self.bias is not None,
                        device=self.weight.device)
        with torch.no_grad():
            out.weight.copy_(self.gather_tensor("weight", self.weight))
            if self.bias is not None:
                out.bias.copy_(self.gather_tensor("bias", self.bias))
        return out


class ColumnParallelLinear(_ParallelLinear):
    """y = x W^T + b with W's rows split over the tensor ranks (see the module's docs)."""

    SPLIT = {"weight": 0, "bias": 0}  # parameter -> the dimension split over tensor ranks

    def __init__(self, in_features, out_features, bias=True, gather_output=False, *,
                 chunks=1, session=None, _init=True):
        super().__init__(in_features, out_features, bias, session, _init, chunks)
        self.gather_output = bool(gather_output)

    def forward(self, x):
        h = hybrid_of(self._session, self._what)
        y = F.linear(comm.copy_to(h, x, self._what), self.weight, self.bias)
        if not self.gather_output:
            return y
        if self.chunks == 1:
            return comm.gather_from(h, y, self._what + " output")
        blocks = y.unflatten(-1, (self.chunks, y.shape[-1] // self.chunks))
        return comm.gather_from(h, blocks, self._what + " output").flatten(-2)

    @classmethod
    def from_dense(cls, module, gather_output=False, *, chunks=1, session=None):
        """This rank's rows of a dense nn.Linear (its 1/T of each of `chunks` blocks of
        rows); no random numbers drawn."""
        return cls._from_dense(module, session, gather_output=gather_output, chunks=chunks)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"(this rank: {self.weight.shape[0]}), bias={self.bias is not None}, "
                f"gather_output={self.gather_output}"
                + (f", chunks={self.chunks}" if self.chunks > 1 else ""))


class RowParallelLinear(_ParallelLinear):
    """y = x W^T + b with W's columns split over the tensor ranks (see the module's docs)."""

    SPLIT = {"weight": 1}  # the bias is replicated

    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True, *,
                 session=None, _init=True):
        super().__init__(in_features, out_features, bias, session, _init)
        self.input_is_parallel = bool(input_is_parallel)

    def forward(self, x):
        h = hybrid_of(self._session, self._what)
        if not self.input_is_parallel:
            x = comm.scatter_to(h, x, self._what + " input")
        elif x.shape[-1] != self.weight.shape[1]:
            raise ValueError(f"{self._what}: this rank's input has {x.shape[-1]} features; "
                             f"with input_is_parallel it takes its slice, "
                             f"{self.in_features}/{h.tp} = {self.weight.shape[1]}")
        y = comm.reduce_from(h, F.linear(x, self.weight), self._what + " output")
        return y + self.bias if self.bias is not None else y

    @classmethod
    def from_dense(cls, module, input_is_parallel=True, *, session=None):
        """This rank's columns of a dense nn.Linear, its bias whole (no random numbers)."""
        return cls._from_dense(module, session, input_is_parallel=input_is_parallel)

    def extra_repr(self):
        return (f"in_features={self.in_features} (this rank: {self.weight.shape[1]}), "
                f"out_features={self.out_features}, bias={self.bias is not None}, "
                f"input_is_parallel={self.input_is_parallel}")


class VocabParallelEmbedding(nn.Module):
    """An embedding table whose rows (the vocabulary) are split over the tensor ranks."""

    SPLIT = {"weight": 0}

    def __init__(self, num_embeddings, embedding_dim, *, session=None, _init=True):
        super().__init__()
        what = f"VocabParallelEmbedding({num_embeddings}, {embedding_dim})"
        self._session = session
        h = hybrid_of(session, what)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = _split(num_embeddings, h.tp, what, "num_embeddings")
        self.start, self.end = h.t * local, (h.t + 1) * local
        if _init:  # nn.Embedding's draws for the whole table, then this rank's rows
            full = torch.empty(num_embeddings, embedding_dim).normal_()
            self.weight = nn.Parameter(full[self.start:self.end].clone())
        else:  # from_dense fills it
            self.weight = nn.Parameter(torch.empty(local, embedding_dim))

    @property
    def _what(self):
        return f"VocabParallelEmbedding({self.num_embeddings}, {self.embedding_dim})"

    def shard_tensor(self, name, full):
        return full[self.start:self.end]

    def gather_tensor(self, name, local):
        return comm.all_gather(hybrid_of(self._session, self._what), local, 0,
                               f"{self._what} {name}")

    def forward(self, ids):
        h = hybrid_of(self._session, self._what)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            raise IndexError(f"{self._what}: ids must be in [0, {self.num_embeddings}), got "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        outside = (ids < self.start) | (ids >= self.end)
        local = (ids - self.start).masked_fill(outside, 0)
        y = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return comm.reduce_from(h, y, self._what + " output")

    @classmethod
    def from_dense(cls, module, *, session=None):
        _check_dense(module, nn.Embedding, "VocabParallelEmbedding")
        layer = cls(module.num_embeddings, module.embedding_dim, session=session, _init=False)
        with torch.no_grad():
            layer.weight.copy_(module.weight.detach()[layer.start:layer.end])
        return layer

    def to_dense(self):
        out = nn.Embedding(self.num_embeddings, self.embedding_dim, device=self.weight.device)
        with torch.no_grad():
            out.weight.copy_(self.gather_tensor("weight", self.weight))
        return out

    def extra_repr(self):
        return (f"{self.num_embeddings}, {self.embedding_dim} (this rank: rows "
                f"[{self.start}, {self.end}))")


PARALLEL_LAYERS = (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding)


def split_parameters(module):
    """{qualified name: (parameter, dimension split over tensor ranks, layer)} for every
    tensor-parallel layer's split parameters in `module` (the rest are replicated)."""
    out = {}
    for name, child in module.named_modules():
        if isinstance(child, PARALLEL_LAYERS):
            prefix = f"{name}." if name else ""
            for pname, dim in child.SPLIT.items():
                p = getattr(child, pname)
                if p is not None:
                    out[prefix + pname] = (p, dim, child)
    return out


def split_keys(module):
    """{state_dict key: (parameter, dimension, layer, name in the layer)} for every key
    that holds a tensor-parallel layer's split parameter, tied ones included: a module
    that shares the parameter (an output head tied to a VocabParallelEmbedding's weight)
    names it under its own key too, and that key is split the same way."""
    owners = {id(p): (p, dim, layer, pname.rpartition(".")[2])
              for pname, (p, dim, layer) in split_parameters(module).items()}
    out = {}
    for name, child in module.named_modules(remove_duplicate=False):
        prefix = f"{name}." if name else ""
        for pname, p in child._parameters.items():
            if p is not None and id(p) in owners:
                out[prefix + pname] = owners[id(p)]
    return out


def replicated_parameters(module, params):
    """The parameters of `params` that no tensor-parallel layer of `module` splits: the
    ones every tensor rank holds whole (HybridMesh.replicate makes them rank 0's)."""
    split = {id(p) for p, _, _ in split_parameters(module).values()}
    return [p for p in params if id(p) not in split]


def to_dense(module):
    """A copy of `module` with every tensor-parallel layer replaced by its dense torch
    layer (collective over the tensor group: every tensor rank calls it); `module`
    itself unchanged. The copy has no hooks (Tessel's or others) and no Tessel state."""
    if isinstance(module, PARALLEL_LAYERS):
        return module.to_dense()
    memo = {}
    for m in module.modules():  # what an open DistributedOptimizer hangs on the model
        for key, value in vars(m).items():
            if key.startswith("_tessel"):
                memo[id(value)] = None
            elif key.endswith("hooks") and isinstance(value, dict):
                memo[id(value)] = type(value)()
    out = copy.deepcopy(module, memo)
    dense = {}  # id(the copy's split parameter) -> its dense replacement
    for name, child in list(module.named_modules()):
        if isinstance(child, PARALLEL_LAYERS):
            parent_name, _, leaf = name.rpartition(".")
            parent = out.get_submodule(parent_name) if parent_name else out
            copied = getattr(parent, leaf)
            replacement = child.to_dense()
            for pname in child.SPLIT:
                if getattr(copied, pname, None) is not None:
                    dense[id(getattr(copied, pname))] = getattr(replacement, pname)
            setattr(parent, leaf, replacement)
    # Ties kept: a module that shared a split parameter shares the dense one.
    for child in out.modules():
        for pname, p in list(child._parameters.items()):
            if p is not None and id(p) in dense:
                child._parameters[pname] = dense[id(p)]
    return out


def dense_state_dict(module):
    """`module`'s state_dict with every split tensor gathered whole: the keys and shapes
    of its dense twin (collective over the tensor group)."""
    split = split_keys(module)
    out = {}
    for key, value in module.state_dict().items():
        if key in split:
            _, _, layer, pname = split[key]
            value = layer.gather_tensor(pname, value)
        out[key] = value.detach().clone()
    return out


def shard_state_dict(module, dense):
    """This tensor rank's state_dict of `module` cut from `dense` (a dense twin's
    state_dict, e.g. dense_state_dict's or a pretrained file's): split tensors
    sliced, the rest as they are. Load it with module.load_state_dict (before the
    optimizer) or DistributedOptimizer.load_model_state_dict. KeyError naming a key
    `dense` lacks."""
    out = {}
    split = split_keys(module)
    for key, value in module.state_dict().items():
        if key not in dense:
            raise KeyError(f"shard_state_dict: the dense state_dict has no {key!r}")
        full = dense[key]
        if key in split:
            _, _, layer, pname = split[key]
            full = layer.shard_tensor(pname, full)
        if tuple(full.shape) != tuple(value.shape):
            raise ValueError(f"shard_state_dict: {key!r} is {tuple(dense[key].shape)} in the "
                             f"dense state_dict; this rank's slice would be {tuple(full.shape)}, "
                             f"the module holds {tuple(value.shape)}")
        out[key] = full.clone()
    return out
