"""One rank of the export test (under tessel-launch --registry, servers with
--checkpoint_dir).

    export_worker.py OUTDIR

Trains ExportNet (Linear+BatchNorm1d+ReLU+Linear and a 0-d scale) for 6 steps with
zero2 and Adam, in two parameter groups (jobs J and J.g1), the servers
checkpointing every 3 steps. Rank 0 saves the model's state_dict (parameters
and buffers) after steps 3 and 6 (OUTDIR/step3.pt, OUTDIR/step6.pt): what the
checkpoints of those steps must hold; and its eval-mode output on
eval_input() (OUTDIR/eval3.pt, eval6.pt).
"""
import os
import sys

import torch

import tessel.torch as tt

STEPS, EVERY, BATCH = 6, 3, 16


class ExportNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.bn = torch.nn.BatchNorm1d(32)  # buffers: running_mean/var, int64 num_batches_tracked
        self.fc2 = torch.nn.Linear(32, 4)
        self.scale = torch.nn.Parameter(torch.tensor(1.5))  # 0-d: registered as [1]

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x)))) * self.scale


def eval_input():
    """The batch rank 0's model and the exported ones are evaluated on."""
    return torch.randn(16, 8, generator=torch.Generator().manual_seed(7))


def make_model(seed=0):
    torch.manual_seed(seed)
    return ExportNet()


def main():
    outdir = sys.argv[1]
    tt.init()
    torch.set_num_threads(1)
    rank, world = tt.rank(), tt.size()
    model = make_model()
    groups = [{"params": [model.fc1.weight, model.fc1.bias, model.scale]},
              {"params": list(model.fc2.parameters()) + list(model.bn.parameters()), "lr": 5e-3}]
    opt = tt.DistributedOptimizer(torch.optim.Adam(groups, lr=1e-2), model=model,
                                  strategy="zero2", bucket_bytes=512,
                                  checkpoint_every_steps=EVERY)
    gen = torch.Generator().manual_seed(1)
    per = BATCH // world
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(STEPS):
        x = torch.randn(BATCH, 8, generator=gen)
        y = torch.randint(0, 4, (BATCH,), generator=gen)
        rows = slice(rank * per, (rank + 1) * per)
        opt.zero_grad()
        loss_fn(model(x[rows]), y[rows]).backward()
        opt.step()
        if rank == 0 and (step + 1) % EVERY == 0:
            torch.save(model.state_dict(), os.path.join(outdir, f"step{step + 1}.pt"))
            model.eval()
            with torch.no_grad():
                torch.save(model(eval_input()), os.path.join(outdir, f"eval{step + 1}.pt"))
            model.train()
    print(f"rank {rank}: trained {STEPS} steps", flush=True)
    # load_pretrained into the running job (every rank, between steps): through
    # the optimizer onto the servers, in each group's order (scale, a root
    # parameter listed first by the model, is third in group 0), step kept.
    step3 = torch.load(os.path.join(outdir, "step3.pt"))
    loaded = tt.load_pretrained(model, os.path.join(outdir, "step3.pt"))
    with opt.gathered():
        now = model.state_dict()
    assert list(loaded.keys) == list(step3), loaded
    assert all(torch.equal(now[k], step3[k]) for k in step3), "load_pretrained into the job"
    assert opt.step_count == STEPS, opt.step_count
    print(f"rank {rank}: load_pretrained(step3.pt) into the running job: every parameter "
          f"bitwise, step {opt.step_count} kept", flush=True)
    tt.shutdown()


if __name__ == "__main__":
    main()
