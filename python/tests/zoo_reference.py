"""torch's own training of the model zoo's cases: what zoo_test compares
Tessel's against. Each run saves (params, buffers) after every step in
zoo_models.CHECKED under zoo_models.ref_path's names.

single_process(folder, tag, model_name, opt_name, accumulation, perturbed):
one process on the whole of each micro-batch, the micro-batches' losses
backwarded one after the other (their gradients summed) before the step:
torch DDP's meaning of accumulation over equal slices (the mean over ranks of
each rank's sum). For ResNet-18 the BatchNorms are plain ones over the whole
micro-batch, which is what SyncBatchNorm over the ranks' slices computes.

torch_ddp(folder, runs): torch DistributedDataParallel over gloo, 2
processes on the same slices as Tessel's workers, `no_sync()` for every
micro-batch but the last; each run is (tag, model_name, opt_name,
accumulation, broadcast_buffers, perturbed), and each rank saves its own.
torch 1.13 DDP with broadcast_buffers=True broadcasts rank 0's buffers before
a forward that follows a synchronised one: with accumulation, before the
first micro-batch of each step only.

perturbed: the initial weights scaled by zoo_models.perturb() (every side's
initial weights are rank 0's, so this is the same on every rank).

Example:
    zoo_reference.single_process(folder, "single-lm-adam-nosync", "lm", "adam", "nosync")
    zoo_reference.torch_ddp(folder, [("ddp-resnet-bn-sgd-step", "resnet-bn", "sgd",
                                      "step", False, False)])
"""
import os
import socket

import numpy as np
import torch

import zoo_models as zm

WORLD = 2


def _train(model, opt, model_name, accumulation, rows, save, no_sync=None):
    """zm.STEPS steps; save(step, model) after each step in zm.CHECKED."""
    micro = list(zm.micro_batches(accumulation))
    for step in range(1, zm.STEPS + 1):
        opt.zero_grad()
        for m in micro:
            inputs, targets = zm.batch(model_name, step - 1, m)
            inputs, targets = inputs[rows], targets[rows]
            if m < micro[-1] and no_sync is not None:
                with no_sync():
                    zm.loss(model, inputs, targets).backward()
            else:
                zm.loss(model, inputs, targets).backward()
        opt.step()
        if step in zm.CHECKED:
            save(step, model)


def _saver(folder, tag, rank):
    def save(step, model):
        for what, array in zip(("params", "buffers"), zm.snapshot(model)):
            np.save(zm.ref_path(folder, tag, step, rank, what), array)
    return save


def single_process(folder, tag, model_name, opt_name, accumulation, perturbed=False):
    torch.set_num_threads(1)
    model = zm.make_model(model_name)
    if perturbed:
        zm.perturb(model)
    opt = zm.OPTIMIZERS[opt_name](model)
    _train(model, opt, model_name, accumulation, slice(None), _saver(folder, tag, None))


def _ddp_rank(rank, port, folder, runs):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    per = zm.BATCH // WORLD
    rows = slice(rank * per, (rank + 1) * per)
    for tag, model_name, opt_name, accumulation, broadcast, perturbed in runs:
        model = zm.make_model(model_name)
        if perturbed:
            zm.perturb(model)
        ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=broadcast)
        opt = zm.OPTIMIZERS[opt_name](model)
        _train(ddp, opt, model_name, accumulation, rows, _saver(folder, tag, rank),
               no_sync=ddp.no_sync)
    dist.barrier()
    # No teardown: torch 1.13's ~ProcessGroupGloo can deadlock when DDP's Reducer
    # drops the last reference to it at exit (seen in benchmarks/zoo_bench.py).
    os._exit(0)


def torch_ddp(folder, runs):
    """Trains every run under torch DDP (2 gloo processes on loopback)."""
    import torch.multiprocessing as mp
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_ddp_rank, args=(port, folder, list(runs)), nprocs=WORLD, join=True,
                       start_method="spawn")
