"""What the test workers share: one rank under tessel-launch training exact_model
on its slice of each global batch.

Contract. Rank() calls tessel.torch.init() from tessel-launch's environment,
keeps torch to one thread (ranks share the machine's cores), and knows this
rank's slice of exact_model's batches, so every world size trains on the
same global batches. train_step() is one plain step (zero_grad, forward,
backward, step); gathered_flat() the model's parameters as one vector (fsdp:
gathered for the moment); save_flat() writes them on rank 0. The Checks
object counts a worker's checks and raises AssertionError at the first that
fails.

Example:
    r = rank_lib.Rank()
    model = exact_model.make_model()
    opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters()), model=model)
    for step in range(3):
        r.train_step(opt, model, step)
    r.save_flat(opt, model, os.path.join(outdir, "final.npy"))
"""
import numpy as np
import torch

import exact_model
import tessel.torch as tt


class Rank:
    """This process's rank and its slice of the data (see the module's docs)."""

    def __init__(self, batch=exact_model.BATCH):
        """batch: the rows of a global batch (exact_model's by default)."""
        self.cfg = tt.init()
        self.rank, self.world = tt.rank(), tt.size()
        torch.set_num_threads(1)
        self.per = batch // self.world
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def rows(self):
        """This rank's rows of a global batch."""
        return slice(self.rank * self.per, (self.rank + 1) * self.per)

    def batch(self, step):
        """(tokens, labels) of this rank's slice of global batch `step`."""
        tokens, labels = exact_model.batch(step)
        return tokens[self.rows()], labels[self.rows()]

    def backward(self, opt, model, step):
        """zero_grad, then forward and backward on this rank's slice of batch `step`."""
        tokens, labels = self.batch(step)
        opt.zero_grad()
        self.loss_fn(model(tokens), labels).backward()

    def train_step(self, opt, model, step):
        self.backward(opt, model, step)
        opt.step()

    @staticmethod
    def gathered_flat(opt, model):
        with opt.gathered():
            return exact_model.flat(model).clone()

    def save_flat(self, opt, model, path):
        """The parameters (gathered on every rank), saved by rank 0."""
        flat = self.gathered_flat(opt, model)
        if self.rank == 0:
            np.save(path, flat.float().numpy())


class Checks:
    """Counts passed checks; raises AssertionError at the first failure."""

    def __init__(self):
        self.passed = 0

    def check(self, cond, what):
        if not cond:
            raise AssertionError(what)
        self.passed += 1

    def raises(self, kind, fragment, fn):
        """fn() raises `kind` with `fragment` in its message."""
        try:
            fn()
        except kind as e:
            if fragment not in str(e):
                raise AssertionError(f"{kind.__name__} without {fragment!r}: {e}") from e
            self.passed += 1
            return
        raise AssertionError(f"expected {kind.__name__} ({fragment!r}); nothing was raised")
