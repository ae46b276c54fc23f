"""The model and data of the BatchNorm integration test: convolutions with
BatchNorm2d, a linear layer with BatchNorm1d, 8x8 images, global batch 8.

Shared by the worker script (sync_bn_worker.py) and the single-process
references (sync_bn_test.py), so both build the same thing from the same seed.
Each top-level module is an fsdp unit (every BatchNorm is a unit of its own).
"""
import torch
from torch import nn

BATCH, CLASSES, STEPS = 8, 3, 6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(6)
        self.fc1 = nn.Linear(6 * 4 * 4, 8)
        self.bn3 = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, CLASSES)
        with torch.no_grad():  # not the default ones and zeros
            for bn in (self.bn1, self.bn2, self.bn3):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = torch.relu(self.bn3(self.fc1(h.reshape(h.shape[0], -1))))
        return self.fc2(h)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step):
    """(images, labels) of global batch `step`: not centred, so the statistics matter."""
    g = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(BATCH, 3, 8, 8, generator=g) * 1.5 + 0.7,
            torch.randint(0, CLASSES, (BATCH,), generator=g))


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_stats(model):
    """running_mean and running_var of every BatchNorm, one vector."""
    return torch.cat([b.detach().reshape(-1).float() for n, b in model.named_buffers()
                      if not n.endswith("num_batches_tracked")])


def batches_tracked(model):
    return [int(b) for n, b in model.named_buffers() if n.endswith("num_batches_tracked")]
