"""BufferSync: every rank ends a step holding rank 0's buffers (torch DDP's
broadcast_buffers).

Contract. BufferSync(model) broadcasts the model's buffers (model.buffers():
BatchNorm's running_mean, running_var and int64 num_batches_tracked, any
registered buffer, whatever its dtype and device) from the root rank with one
Worker.broadcast of all of them concatenated as bytes, so every dtype arrives
exactly. The buffers are listed again at each sync (a module may have
replaced one). Nothing travels with one rank, no model or no buffers. Every
rank calls sync() at the same point (a collective): DistributedOptimizer
does at its construction and at the end of each step() (not before forward as
torch DDP does: an in-place copy between two forwards and one backward breaks
autograd's version check, pytorch#22095). `syncs` counts the broadcasts.

Threads: the training thread's.

Example:
    bs = BufferSync(model)
    bs.sync(worker)          # model's buffers are now rank 0's on every rank
"""
import torch


class BufferSync:
    """One model's buffers kept equal to rank 0's (see the module's docs)."""

    def __init__(self, model):
        self.model = model
        self.syncs = 0

    def buffers(self):
        return [] if self.model is None else list(self.model.buffers())

    def sync(self, worker, root=0):
        """Rank `root`'s buffers onto every rank. Returns the bytes broadcast (0: none)."""
        bufs = self.buffers()
        if worker.world_size == 1 or not bufs:
            return 0
        with torch.no_grad():
            parts = [b.detach().reshape(-1).contiguous().view(torch.uint8).cpu() for b in bufs]
            flat = torch.cat(parts)
            if flat.numel() == 0:
                return 0
            worker.broadcast(flat.numpy(), root)
            self.syncs += 1
            if worker.rank != root:
                at = 0
                for b, part in zip(bufs, parts):
                    n = part.numel()
                    # A copy: a slice of the bytes need not be aligned for b's dtype.
                    b.copy_(flat[at:at + n].clone().view(b.dtype).view(b.shape))
                    at += n
        return flat.numel()
