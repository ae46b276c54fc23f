"""tessel.torch: train a PyTorch model through Tessel's shard servers.

    import tessel.torch as tt
    tt.init()                                   # from tessel-launch's environment
    model = Net()
    opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3),
                                  model=model, strategy="zero2")
    for x, y in my_slice_of_the_data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()         # buckets are pushed as gradients appear
        opt.step()                              # the model holds the new parameters

What it does. Each parameter group of the torch optimizer is one Tessel job
(job, job.g1, job.g2, ...) whose tensors are that group's parameters in
order. The parameters' storage becomes the worker's parameter buffer and
their .grad the worker's gradient buffer, so backward writes gradients
straight into what is pushed and a step writes the new values straight into
the model: no copies. An autograd hook on each parameter hands its gradient
range to the worker as soon as backward produced it (GradientsReady), so
pushes overlap the rest of backward. The update runs on the shard servers
(zero1, zero2) or, for ddp, on each worker after the servers averaged the
gradients, with the torch optimizer's hyper-parameters. The initial
parameters are rank 0's.

CUDA models. Parameters on a CUDA device stay there: the model computes on the
device and Tessel stages through host memory. With ddp, zero1 and zero2 each
parameter's gradient leaves the device as soon as backward produced it (an
asynchronous copy on a stream of Tessel's into page-locked memory, behind the
stream that produced it, so the copies overlap the rest of backward); step()
hands each range to the worker as its copy lands, and the new parameters go
back to the device asynchronously, ordered before the next forward on the
current stream. fsdp copies each gathered unit to the device and its
gradients back when the unit is pushed (synchronously, from the hook).
TESSEL_TORCH_STAGING=1 runs a CPU model through the same staging (its own
tensors, copied to and from the worker's buffers): the CUDA path's logic
where no GPU is.

Supported torch optimizers: SGD (momentum, dampening, nesterov,
weight_decay), Adam, AdamW, RMSprop (alpha, momentum, centered), Adagrad
(lr_decay, initial_accumulator_value). Not (a ValueError says so): amsgrad,
maximize, sparse or non-float32 parameters. Learning-rate schedulers (and any
change to param_groups' hyper-parameters) take effect at the next step, on
the servers too: step() sends changed values before it pushes.

Buffers and BatchNorm. DistributedOptimizer(model=m) keeps m's buffers
(BatchNorm's running statistics...) equal to rank 0's at the end of every step
(broadcast_buffers=True, torch DDP's flag). SyncBatchNorm and
convert_sync_batchnorm(m) (torch's names and arguments) normalize over the
job's global batch through Tessel's collectives, bound to the optimizer's
worker: W ranks each on a slice train as one process on the whole batch.

Observability. init(metrics_address=, timeline=) (or $TESSEL_METRICS_ADDRESS,
$TESSEL_TIMELINE) has the workers serve Prometheus metrics
(opt.metrics_address) and write Chrome-trace timelines; opt.report_loss(loss)
puts rank 0's loss on the registry's status page; opt.last_step_report() says
where this rank's last step went and which rank the shard servers name the
job's straggler, and a StragglerWarning says when they start or stop naming
one (docs/observability.md).

Environment (tessel-launch sets it): TESSEL_REGISTRY, TESSEL_JOB,
TESSEL_RANK, TESSEL_WORLD_SIZE, TESSEL_NUM_SERVERS, and optionally
TESSEL_UCX_TLS, TESSEL_TOKEN (or TESSEL_TOKEN_FILE, a file holding it: what
tessel-launch's embedded cluster sets), TESSEL_METRICS_ADDRESS, TESSEL_TIMELINE.

The package's files: session.py (init, rank, size, shutdown: the Session),
optimizer.py (DistributedOptimizer, the facade), report.py (its
last_step_report and the straggler warning), opt_state.py (its
state_dict and load_state_dict), hyper.py (torch settings -> Tessel's), scaler.py (LossScaler), clip.py (clip_grad_norm_), agree.py (a
step's job-wide decisions), recovery.py (Recovery: a step lost to a lost
member re-raised or rolled back), buffers.py (BufferSync: broadcast_buffers),
sync_bn.py (SyncBatchNorm, convert_sync_batchnorm), group.py, flat.py, fsdp.py and fsdp_unit.py (a
parameter group bound to its worker; fsdp's units and their states),
staging.py (CUDA staging), precision.py, hybrid_mesh.py (HybridMesh: the
session's place in a hybrid job), parallel/ (tensor and pipeline
parallelism: init(tensor_parallel=, pipeline_parallel=), the parallel layers,
Pipeline; docs/hybrid.md), pretrained.py (load_pretrained: a
safetensors, torch or npz file, such as `tesselctl checkpoint export` writes,
into a model before its DistributedOptimizer is made).
"""
from tessel.torch.clip import clip_grad_norm_
from tessel.torch.model_state import merge_sharded_state_dicts
from tessel.torch.optimizer import DistributedOptimizer
from tessel.torch.pretrained import load_pretrained
from tessel.torch.report import StepReport, Straggler, StragglerWarning
from tessel.torch.scaler import LossScaler
from tessel.torch.session import Session, default_session, init, rank, shutdown, size
from tessel.torch.sync_bn import SyncBatchNorm, convert_sync_batchnorm
from tessel.torch import parallel  # noqa: E402 (after the session it builds on)

__all__ = ["DistributedOptimizer", "LossScaler", "Session", "StepReport", "Straggler",
           "StragglerWarning", "SyncBatchNorm", "clip_grad_norm_", "convert_sync_batchnorm",
           "default_session", "init", "load_pretrained", "merge_sharded_state_dicts", "parallel",
           "rank", "shutdown", "size"]
