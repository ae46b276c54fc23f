"""SyncBatchNorm: batch normalization over the job's global batch, through
Tessel's collectives; convert_sync_batchnorm: a model's BatchNorm*d made so.

Contract. SyncBatchNorm takes torch.nn.SyncBatchNorm's constructor
arguments (process_group must be None: Tessel synchronizes the whole job) and
is a torch.nn.modules.batchnorm._BatchNorm. In training mode, bound to a
worker of a job of W > 1 ranks, its statistics are those of the global batch:
  forward   each rank's per-channel (count, mean, sum of squared deviations),
            computed in float64, travel in one all_reduce_mean, each rank in
            its own slot (the others' zeros: the mean times W gives every
            rank's values back); every rank combines them alike (Chan's
            parallel variance, float64) into the global mean and biased
            variance that normalize, and updates running_mean and
            running_var with the global mean and unbiased variance (torch's
            rule and momentum, momentum=None: the cumulative average);
  backward  one all_reduce_mean of (sum_dy, sum_dy_xmu, count) per channel:
            the mean's 1/W cancels in sum / count, so no all-reduce sum is
            needed. The input's gradient is torch's SyncBatchNorm's; the
            weight's and bias's are this rank's (the optimizer averages them).
So W ranks each on a slice equal single-process BatchNorm on the whole batch
(within rounding). Every rank calls the collectives in the same order (forward
and backward order are the same on every rank). In eval mode, with one rank,
or with batch statistics off, it is F.batch_norm with the running statistics.

Which worker: DistributedOptimizer(model=m) binds every SyncBatchNorm of m to
its first parameter group's worker (bind_sync_batchnorm) and unbinds them when
closed. Unbound, a training-mode forward is plain batch norm when tessel.torch
is not initialized or its world size is 1, and a RuntimeError otherwise.

Each distinct channel count C makes two helper reduce jobs on the shard
servers (vectors of W * (2C + 1) and 2C + 1 floats, JobCollectives keeps one
per size): ResNet-18's four widths make eight, each a few KiB.

Threads: the training thread's (forward and backward; on a CUDA model the
backward's collective runs on autograd's thread while the training thread
waits in backward).

Example:
    model = tt.convert_sync_batchnorm(Net())     # BatchNorm2d -> tt.SyncBatchNorm
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    loss_fn(model(x), y).backward(); opt.step()  # statistics over every rank's x
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from tessel.torch import session as session_lib


def _stats_of_ranks(wire, world, channels):
    """(counts [W], means [W, C], m2s [W, C]) in float64 from the reduced slots."""
    per = 2 * channels + 1
    stats = torch.from_numpy(wire).double().view(world, per) * world
    return stats[:, 0].round(), stats[:, 1:channels + 1], stats[:, channels + 1:]


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, factor, worker):
        x = x.contiguous()
        channels = x.shape[1]
        x3 = x.reshape(x.shape[0], channels, -1).double()
        count = x3.shape[0] * x3.shape[2]
        world, rank = worker.world_size, worker.rank
        per = 2 * channels + 1
        wire = np.zeros(world * per, dtype=np.float32)
        if count > 0:
            mean = x3.mean((0, 2))
            m2 = ((x3 - mean[None, :, None]) ** 2).sum((0, 2))
            slot = wire[rank * per:(rank + 1) * per]
            slot[0] = count
            slot[1:channels + 1] = mean.cpu().numpy()
            slot[channels + 1:] = m2.cpu().numpy()
        worker.all_reduce_mean(wire)
        counts, means, m2s = _stats_of_ranks(wire, world, channels)
        total = float(counts.sum())
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got "
                             f"{int(total)} over the job's batch (input size {list(x.shape)} "
                             f"on this rank)")
        gmean = (counts[:, None] * means).sum(0) / total
        gm2 = (m2s + counts[:, None] * (means - gmean[None, :]) ** 2).sum(0)
        var = gm2 / total
        dev = x.device
        with torch.no_grad():
            if running_mean is not None:
                running_mean.copy_(factor * gmean.to(dev) + (1 - factor) * running_mean.double())
            if running_var is not None:
                unbiased = (gm2 / (total - 1)).to(dev)
                running_var.copy_(factor * unbiased + (1 - factor) * running_var.double())
        mean32, var32 = gmean.to(dev, x.dtype), var.to(dev, x.dtype)
        invstd = (1.0 / torch.sqrt(var + eps)).to(dev, x.dtype)
        ctx.save_for_backward(x, weight, mean32, invstd)
        ctx.worker = worker
        ctx.count = count
        # torch's own normalization with the global statistics.
        return F.batch_norm(x, mean32, var32, weight, bias, False, 0.0, eps)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, mean, invstd = ctx.saved_tensors
        channels = x.shape[1]
        dy3 = grad_out.contiguous().reshape(x.shape[0], channels, -1)
        xmu = x.reshape(x.shape[0], channels, -1) - mean[None, :, None]
        sum_dy = dy3.double().sum((0, 2))
        sum_dy_xmu = (dy3.double() * xmu.double()).sum((0, 2))
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_weight = (sum_dy_xmu * invstd.double()).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(x.dtype)
        if ctx.needs_input_grad[0]:
            wire = np.empty(2 * channels + 1, dtype=np.float32)
            wire[:channels] = sum_dy.cpu().numpy()
            wire[channels:2 * channels] = sum_dy_xmu.cpu().numpy()
            wire[2 * channels] = ctx.count
            ctx.worker.all_reduce_mean(wire)
            w = torch.from_numpy(wire).double().to(x.device)
            mean_dy = w[:channels] / w[2 * channels]
            mean_dy_xmu = w[channels:2 * channels] / w[2 * channels]
            k = (mean_dy_xmu * invstd.double() ** 2).to(x.dtype)
            scale = invstd if weight is None else invstd * weight
            grad_input = ((dy3 - mean_dy.to(x.dtype)[None, :, None] - xmu * k[None, :, None])
                          * scale[None, :, None]).reshape(x.shape)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the global batch of a Tessel job (see the module's docs)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        if process_group is not None:
            raise ValueError("tessel.torch.SyncBatchNorm synchronizes over the whole job: "
                             "process_group must be None")
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self._tessel_comm = None  # set by bind_sync_batchnorm: () -> the worker

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def __getstate__(self):  # pickling leaves the binding to a live optimizer out
        state = self.__dict__.copy()
        state["_tessel_comm"] = None
        return state

    def _worker(self):
        """The bound worker of a job of more than one rank, or None (plain batch norm)."""
        comm = self._tessel_comm
        if comm is None:
            s = session_lib.default_session()
            if s.initialized and s.size() > 1:
                raise RuntimeError(
                    f"tessel.torch.SyncBatchNorm: a training-mode forward in a job of {s.size()} "
                    f"ranks before a DistributedOptimizer bound it: make the DistributedOptimizer "
                    f"with model= the module holding it first (or call model.eval())")
            return None
        worker = comm()
        return worker if worker.world_size > 1 else None

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        running_mean = self.running_mean if use_running else None
        running_var = self.running_var if use_running else None
        worker = self._worker() if (bn_training and self.training) else None
        if worker is None:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                bn_training, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean,
                                            running_var, self.eps, factor, worker)


def convert_sync_batchnorm(module, process_group=None):
    """`module` with every BatchNorm*d in it (recursively) replaced by a SyncBatchNorm
    holding the same weight and bias Parameters (requires_grad kept), the same
    buffers and the same training flag, as torch.nn.SyncBatchNorm.convert_sync_batchnorm.
    Returns the converted module (a new one if `module` itself was a BatchNorm)."""
    out = module
    if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
        out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
        if module.affine:
            with torch.no_grad():
                out.weight = module.weight
                out.bias = module.bias
        out.running_mean = module.running_mean
        out.running_var = module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
    for name, child in module.named_children():
        out.add_module(name, convert_sync_batchnorm(child, process_group))
    return out


class _Comm:
    """A SyncBatchNorm's way to its optimizer's worker."""

    def __init__(self, opt):
        self.opt = opt

    def __call__(self):
        g = self.opt._groups[0]
        if g.worker is None:
            raise RuntimeError("tessel.torch.SyncBatchNorm: its DistributedOptimizer was closed")
        return g.worker


def sync_batchnorms(model):
    return [] if model is None else [m for m in model.modules() if isinstance(m, SyncBatchNorm)]


def bind_sync_batchnorm(model, opt):
    """Binds every SyncBatchNorm of `model` to `opt`'s first group's worker; returns them."""
    found = sync_batchnorms(model)
    for m in found:
        m._tessel_comm = _Comm(opt)
    return found


def unbind_sync_batchnorm(modules):
    for m in modules:
        m._tessel_comm = None
