"""The model and data of the exactness test: convolution, embedding, layer norm.

Shared by the worker script (exact_worker.py) and the single-process
reference (exact_test.py), so both build the same thing from the same seed.
"""
import torch
from torch import nn

VOCAB, SEQ, CLASSES, BATCH = 23, 12, 5, 16


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.conv = nn.Conv1d(8, 6, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(6)
        self.fc = nn.Linear(6 * SEQ, CLASSES)

    def forward(self, tokens):
        h = self.emb(tokens).transpose(1, 2)           # B x 8 x SEQ
        h = torch.relu(self.conv(h)).transpose(1, 2)   # B x SEQ x 6
        h = self.norm(h)
        return self.fc(h.reshape(h.shape[0], -1))


class HalfNet(nn.Module):
    """For fp16: only layers CPU torch 1.13 runs in float16 (it has no fp16 matmul,
    convolution or layer norm): an embedding, then an element-wise bilinear read-out."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.w = nn.Parameter(torch.randn(8, CLASSES) * 0.5)
        self.b = nn.Parameter(torch.zeros(CLASSES))

    def forward(self, tokens):
        h = self.emb(tokens).mean(1)                                  # B x 8
        return (h.unsqueeze(2) * self.w.unsqueeze(0)).sum(1) + self.b  # B x CLASSES


class BranchNet(nn.Module):
    """For parameters without a gradient (find_unused_parameters): `extra` is used by
    a slice only if one of its sequences starts with a repeated token (so one rank
    may use it and the other not, or neither), `rare` by nobody except every third step,
    and `never` by nobody ever (its .grad stays None: torch never updates it)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.trunk = nn.Linear(8, 8)
        self.head = nn.Linear(8, CLASSES)
        self.extra = nn.Linear(8, CLASSES)
        self.rare = nn.Linear(8, CLASSES)
        self.never = nn.Linear(8, CLASSES)

    def forward(self, tokens, step):
        h = torch.relu(self.trunk(self.emb(tokens).mean(1)))
        out = self.head(h)
        if bool((tokens[:, 0] == tokens[:, 1]).any()):
            out = out + self.extra(h)
        if step % 3 == 2:
            out = out + self.rare(h)
        return out


def make_branch_model():
    torch.manual_seed(0)
    return BranchNet()


# Optimizers whose update reads the per-parameter step or decays weights: a
# parameter without a gradient must keep both its value and its step.
UNUSED_OPTIMIZERS = ("adam", "sgd", "adagrad")


def make_half_model():
    torch.manual_seed(0)
    return HalfNet()


# Dynamic loss scaling in the fp16 runs: the first scale overflows these
# gradients in fp16 (steps are skipped and the scale backs off), and growth
# every 3 good steps overflows again now and then.
FP16_SCALER = dict(init_scale=2.0**20, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)


def make_model():
    torch.manual_seed(0)
    return Net()


def batch(step):
    """The whole batch of `step`: every rank takes its slice of it."""
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return tokens, labels


def _groups(model):
    """Two parameter groups: weights decay, biases and norms do not, at their own lr."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0, "lr": 3e-3}],
                             lr=1e-2, weight_decay=0.05)


# Each takes the model (parameter groups need its names).
OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, dampening=0.1,
                                     weight_decay=1e-3),
    "nesterov": lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, nesterov=True),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=1e-3),
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.05),
    "rmsprop": lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-3, momentum=0.5, centered=True),
    "adagrad": lambda m: torch.optim.Adagrad(m.parameters(), lr=0.05, lr_decay=1e-3, eps=1e-10,
                                             initial_accumulator_value=0.1),
    "groups": _groups,
    # With learning-rate schedules (SCHEDULES): the servers must follow them.
    "adam-steplr": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "sgd-warmup": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
    # Gradient clipping by the global norm (CLIP: max_norm; the norms here are 2-3.6,
    # so every step clips).
    "adam-clip": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "sgd-clip": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
}

CLIP = {"adam-clip": 0.25, "sgd-clip": 0.25}

# Made after the optimizer, stepped after each opt.step(), as torch users do.
SCHEDULES = {
    "adam-steplr": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    "sgd-warmup": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda k: min(1.0, (k + 1) / 4)),
}


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
