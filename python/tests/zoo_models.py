"""The model zoo's models, data and optimizers: ResNet-18 (torchvision) on
3x32x32 images and a small Transformer language model.

Shared by the Tessel worker (zoo_worker.py), torch's references
(zoo_reference.py) and the benchmark's sizes, so every side builds the same
model from the same seed and reads the same global batches.

A case is "MODEL:STRATEGY:OPTIMIZER:ACCUMULATION":
  MODEL         lm             the Transformer LM (no buffers)
                resnet-bn      ResNet-18 with plain BatchNorm, each rank keeping its own
                               running statistics (torch DDP's broadcast_buffers=False)
                resnet-bcast   ResNet-18 with plain BatchNorm and broadcast_buffers=True
                resnet-syncbn  ResNet-18 with its BatchNorms made SyncBatchNorm
  STRATEGY      ddp, zero1, zero2, fsdp (the ResNets: ddp, fsdp; STRATEGIES_OF)
  OPTIMIZER     sgd (momentum 0.9) or adam
  ACCUMULATION  step    one micro-batch per step
                nosync  two: `with opt.no_sync(): loss(mb0).backward()`, then
                        `loss(mb1).backward(); opt.step()`

Each micro-batch is a global batch of BATCH rows, rank r's slice the rows
[r * BATCH / world, (r + 1) * BATCH / world). What a case has after steps
CHECKED is compared with its reference's (reference_of), whose arrays live in
a folder under ref_path's names.
"""
import os

import numpy as np
import torch
from torch import nn

BATCH, STEPS = 8, 3
CHECKED = (1, STEPS)  # the steps after which a case is compared with its reference
PERTURBATION = 2.0**-23  # one rounding of float32, relative: see perturb()
VOCAB, SEQ, D_MODEL, NHEAD, LAYERS = 50, 16, 32, 2, 2
IMAGE, CLASSES = 32, 10

MODELS = ("lm", "resnet-bn", "resnet-bcast", "resnet-syncbn")
STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
# The strategies each model runs. The Transformer runs all four (and must end
# with the same bits under each); the ResNets run the two ends, ddp (state on
# the workers) and fsdp (parameters gathered per unit), since what they add
# (buffers, BatchNorm, SyncBatchNorm) is strategy-blind in tessel.torch
# (buffers.py, sync_bn.py) and zero1/zero2 differ from those two only in
# where the optimizer runs, which exact_test and //tests:strategy_matrix_test
# check bitwise for every strategy. Halves the ResNets' CI time.
STRATEGIES_OF = {"lm": STRATEGIES}
STRATEGIES_OF.update({m: ("ddp", "fsdp") for m in ("resnet-bn", "resnet-bcast", "resnet-syncbn")})
OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-3),
}
ACCUMULATIONS = {"step": 1, "nosync": 2}  # micro-batches per step


class TransformerLM(nn.Module):
    """Token and learned position embeddings, a causal TransformerEncoder
    (dropout 0: deterministic) and a linear read-out over the vocabulary. The
    test's sizes by default; benchmarks/zoo_bench.py makes larger ones."""

    def __init__(self, vocab=VOCAB, seq=SEQ, d_model=D_MODEL, nhead=NHEAD, layers=LAYERS):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        self.emb = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq),
                             persistent=False)

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos
        return self.head(self.encoder(h, mask=self.mask))


def family(model_name):
    return "lm" if model_name == "lm" else "resnet"


def make_model(model_name):
    """The model (rank 0's initial values: every rank and reference seeds the same)."""
    torch.manual_seed(0)
    if family(model_name) == "lm":
        return TransformerLM()
    import torchvision
    return torchvision.models.resnet18(num_classes=CLASSES)


def batch(model_name, step, micro):
    """Global micro-batch `micro` of step `step`: (inputs, targets)."""
    g = torch.Generator().manual_seed(1000 * step + micro + 1)
    if family(model_name) == "lm":
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        return tokens[:, :SEQ], tokens[:, 1:]
    images = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g)
    return images, torch.randint(0, CLASSES, (BATCH,), generator=g)


def loss(model, inputs, targets):
    """The mean cross-entropy over the rows (and, for the LM, the positions)."""
    out = model(inputs)
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))


def micro_batches(accumulation):
    return range(ACCUMULATIONS[accumulation])


def perturb(model):
    """Scales every parameter by (1 + PERTURBATION * N(0, 1)), a fixed draw: about
    one rounding, for measuring how far torch's own training moves when its
    numbers move by that much (zoo_test's spread)."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + PERTURBATION * torch.randn(p.shape, generator=g))


def reference_of(case):
    """(kind, tag) of the torch run `case` is compared with: kind "single" (one
    process on the whole micro-batches, the same for every rank) or "ddp" (torch
    DDP over gloo, each rank against its own)."""
    model_name, _, opt_name, accumulation = case.split(":")
    kind = "ddp" if model_name in ("resnet-bn", "resnet-bcast") else "single"
    return kind, f"{kind}-{model_name}-{opt_name}-{accumulation}"


def ref_path(folder, tag, step, rank, what):
    """Where a reference run keeps `what` ("params" or "buffers") after `step`;
    rank None: the same for every rank."""
    who = "all" if rank is None else f"r{rank}"
    return os.path.join(folder, f"{tag}-s{step}-{who}-{what}.npy")


def reference_rank(case, rank):
    """Whose reference arrays rank `rank` of `case` is compared with. With
    broadcast_buffers Tessel's ranks end each step() holding rank 0's buffers
    where torch DDP broadcasts them before the next forward (the forwards see
    the same buffers either way): every rank is compared with torch's rank 0."""
    return 0 if case.split(":")[0] == "resnet-bcast" else rank


def load_reference(folder, tag, step, rank):
    """(params, buffers) of reference `tag` after `step` as rank `rank` has them."""
    out = []
    for what in ("params", "buffers"):
        path = ref_path(folder, tag, step, rank, what)
        if not os.path.exists(path):
            path = ref_path(folder, tag, step, None, what)
        out.append(np.load(path))
    return tuple(out)


def rel(got, want):
    """exact_test's metric: max |got - want| / max |want| (None when empty)."""
    if want.size == 0:
        return None
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def flat_params(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def flat_buffers(model):
    """The running statistics (and batch counts) as one float64 vector; empty for
    the LM (whose causal mask is a constant)."""
    bufs = [b.detach().reshape(-1).double() for n, b in model.named_buffers()
            if n.rsplit(".", 1)[-1] != "mask"]
    return torch.cat(bufs) if bufs else torch.zeros(0, dtype=torch.float64)


def snapshot(model):
    """(params, buffers) as numpy arrays of their own."""
    return flat_params(model).numpy().copy(), flat_buffers(model).numpy()


# --- tessel.torch features that land on main after this test --------------------
FEATURE_OF = {"resnet-bcast": "broadcast_buffers", "resnet-syncbn": "SyncBatchNorm",
              "nosync": "no_sync"}


def tessel_features():
    """{feature: available} for the features some cases need."""
    import inspect

    import tessel.torch as tt
    params = inspect.signature(tt.DistributedOptimizer.__init__).parameters
    return {
        "no_sync": hasattr(tt.DistributedOptimizer, "no_sync"),
        "SyncBatchNorm": hasattr(tt, "convert_sync_batchnorm") or hasattr(tt, "SyncBatchNorm"),
        "broadcast_buffers": "broadcast_buffers" in params,
    }


def missing_feature(case, features):
    """The first feature `case` needs that `features` lacks, or None."""
    model_name, _, _, accumulation = case.split(":")
    for part in (model_name, accumulation):
        need = FEATURE_OF.get(part)
        if need and not features[need]:
            return need
    return None


def convert_sync_batchnorm(model):
    """The model with every BatchNorm a tessel.torch.SyncBatchNorm."""
    import tessel.torch as tt
    if hasattr(tt, "convert_sync_batchnorm"):
        return tt.convert_sync_batchnorm(model)
    return tt.SyncBatchNorm.convert_sync_batchnorm(model)
