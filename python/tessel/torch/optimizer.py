"""DistributedOptimizer: the torch.optim.Optimizer facade over Tessel's jobs.

Contract. It owns one group object per non-empty torch parameter group
(FlatGroup for ddp/zero1/zero2, FsdpGroup for fsdp), one LossScaler, and
this step's clipping factor; it checks what it is given (ValueError before
anything connects), joins each group's job (JOB, then JOB.g1, ... through
tessel.group_job_name) and runs a step as: layout checks, gradients
collected, the job-wide decisions (agree.py), then either every group's step
(settings sent first; with recovery on, a step lost to a lost member rolls
the job back: Recovery, recovery.py) or, on an overflow, a skipped step on
every rank. The scaler and the clipping factor meet in each group's
settings as "grad_scale". With model= it also
keeps the model's buffers equal to rank 0's (BufferSync, buffers.py: at
construction and at the end of each step) and binds the model's
SyncBatchNorm modules to the first group's worker (sync_bn.py); rank 0
writes the buffers into the servers' checkpoints at checkpoint steps and
restores them after a rollback (BufferStore, buffer_store.py). See the
class's docs for the arguments.

Threads: the training thread's; the groups' autograd hooks run during
backward.

Example:
    tt.init()
    opt = DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3),
                               model=model, strategy="zero2")
    opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    state = opt.state_dict(); opt.close()
"""
import contextlib
import os
import weakref

import tessel
import torch
from tessel.torch import opt_state
from tessel.torch import session as session_lib
from tessel.torch.agree import agree
from tessel.torch.buffer_store import BufferStore, persistent_buffers
from tessel.torch.buffers import BufferSync
from tessel.torch.flat import FlatGroup
from tessel.torch.fsdp import FsdpGroup, plan_units
from tessel.torch.group import Gathered, Settings
from tessel.torch.held import HeldSteps
from tessel.torch.held import check_mode as check_hold
from tessel.torch.hyper import tessel_hyper
from tessel.torch.model_state import ModelState
from tessel.torch.parallel.layers import replicated_parameters
from tessel.torch.precision import PRECISIONS, STRATEGIES
from tessel.torch.recovery import Recovery
from tessel.torch.rejoin import rejoins_in_place
from tessel.torch.report import last_step_report, timed_step
from tessel.torch.scaler import LossScaler
from tessel.torch.sync_bn import bind_sync_batchnorm, unbind_sync_batchnorm


class DistributedOptimizer:
    """A torch optimizer whose update runs through Tessel (see tessel.torch's docs).

    optimizer:  a torch.optim SGD, Adam, AdamW, RMSprop or Adagrad over the model's parameters.
    model:      the module (for tensor names in errors and checkpoints, its buffers and its
                SyncBatchNorm modules); optional.
    strategy:   "ddp", "zero1", "zero2" or "fsdp" (model= needed: its modules are the units).
    backward_passes_per_step: backward calls per step (gradient accumulation): each
                parameter's gradient is handed over after that many.
    overlap:    push buckets from autograd hooks while backward runs (the default, except
                with loss scaling, whose overflow decision must come before any push).
    hold_for_clipping: where gradients go out during backward (overlap, fsdp), which
                steps' updates the servers hold until clip_grad_norm_ gives the factor
                (held.py): None (default) the first step and each step after one that
                clipped; True every step (clip from any step on); False none.
    rejoin_in_place: with recovery, a lost worker's replacement rejoins the step in flight
                where rejoin.py allows it (True, the default; the servers keep two versions
                of the parameters for it); False on every rank: a rollback instead, and the
                servers update in place (a faster update: docs/performance.md).
    precision:  "fp32"; "bf16" or "fp16": half parameters and gradients on the workers and
                the wire (the model computes in half), fp32 masters and state on the servers.
    loss_scale: "dynamic" (the default for fp16), a number (a static scale), or None (the
                default for fp32 and bf16: no scaling). Scale the loss before backward with
                `opt.scale_loss(loss).backward()`. step() then checks every rank's gradients
                for inf/NaN with one job-wide reduction: if any rank overflowed, every rank
                skips the step (step() returns False, nothing is pushed) and a dynamic scale is
                multiplied by backoff_factor; otherwise the servers unscale the mean gradient
                (grad * 1/scale in fp32, as torch's GradScaler does) and update, and after
                growth_interval steps in a row without overflow the scale grows by
                growth_factor. Same rules and defaults as torch.cuda.amp.GradScaler
                (init_scale 2**16, growth_factor 2, backoff_factor 0.5, growth_interval 2000).
                fsdp holds each unit's gradients until step() under loss scaling.
    find_unused_parameters: torch's rule for parameters without a gradient (as torch
                DDP's flag of that name). A parameter whose .grad is None at step() (never
                used, or zero_grad(set_to_none=True) and not used since) is left alone by
                torch's optimizer: its value and state stay, weight decay and momentum
                included, and its own step count (Adam's bias corrections) counts only its
                updates. With True, step() finds the parameters no rank has a gradient for
                (one extra job-wide reduction, shared with the loss scaler's) and the servers
                skip exactly those, so training equals single-process torch on the whole
                batch; a parameter some ranks used gets the mean with the others' zeros, as
                torch DDP does. With False (the default) every parameter must have a
                gradient at every step: a missing one raises ValueError naming it.
    recovery:   survive a lost worker or shard server (zero1, zero2, fsdp; one parameter
                group): the servers checkpoint every `checkpoint_every_steps` steps (they need
                --checkpoint_dir; tessel-launch --checkpoint_dir gives it), a step that fails
                because a member was lost rolls back to the latest checkpoint once it is back
                (tessel-launch --max_restarts restarts it), and a restarted worker resumes
                there. Write the loop over `opt.step_count`, which goes back on a rollback:
                    while opt.step_count < total_steps:
                        x, y = batch(opt.step_count) ...
    topk_ratio: 0 (the default): exact. r in (0, 1]: top-k gradient compression with error
                feedback (ddp, zero1, zero2 in fp32): each push carries the largest
                ceil(r * n) entries of a bucket of n and the rest waits for later steps. The
                one mode that is NOT bitwise equal to single-process training
                (docs/compression.md).
    broadcast_buffers: (torch DDP's flag, default True) every rank ends each step()
                with rank 0's buffers (model.buffers(): BatchNorm's running statistics and
                num_batches_tracked, any registered buffer, bitwise whatever the dtype), one
                broadcast of all of them per step; also once at construction (not with
                recovery, whose restarted rank must not broadcast alone). torch DDP broadcasts
                before each forward instead: a forward sees the same buffers either way, and
                here they also agree between steps (evaluation, checkpoints). Needs model=;
                nothing runs with one rank or no buffers. Buffers are not parameters: they
                stay in the model under every strategy, fsdp included. With
                checkpoint_every_steps (not ddp, not hybrid), rank 0 also writes them into
                the servers' checkpoints (job J.buffers, buffer_store.py) at each checkpoint
                step, and a rollback or resume restores rank 0's from there.
                tessel.torch.SyncBatchNorm modules in model= (convert_sync_batchnorm) are
                bound to the first group's worker: their statistics are over the global batch.
    session:    the tessel.torch Session it runs under (default: the one tessel.torch.init()
                configured); its shutdown() closes this optimizer. Its metrics_address and
                timeline (init(), $TESSEL_METRICS_ADDRESS, $TESSEL_TIMELINE) go to the workers:
                the first group's serves Prometheus metrics (opt.metrics_address says where),
                each group writes a timeline. opt.report_loss(loss) (or a closure's loss)
                feeds the registry's status page.
    """

    def __init__(self, optimizer, model=None, strategy="zero2", bucket_bytes=4 << 20,
                 backward_passes_per_step=1, overlap=None, job=None, recovery=False,
                 checkpoint_every_steps=0, precision="fp32", loss_scale=None,
                 init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 find_unused_parameters=False, topk_ratio=0.0, broadcast_buffers=True,
                 session=None, hold_for_clipping=None, rejoin_in_place=True):
        if session is None:
            session = session_lib.default_session()
        cfg = session.config
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: fp32, bf16 or fp16")
        if loss_scale is None and precision == "fp16":
            loss_scale = "dynamic"
        self._scaler = LossScaler(loss_scale, init_scale, growth_factor, backoff_factor,
                                  growth_interval)
        if self._scaler.enabled:
            if overlap:
                raise ValueError("loss scaling needs overlap=False: whether a step is skipped "
                                 "is decided after backward, before anything is pushed")
            overlap = False
        elif overlap is None:
            overlap = True
        self._clip_coef = None  # clip_grad_norm_'s factor, for the next step only
        hybrid = session.hybrid
        check_hold(hold_for_clipping, overlap, strategy, self._scaler.enabled, hybrid is not None)
        rank, world, base_job = cfg["rank"], cfg["world_size"], job or cfg["job"]
        if hybrid is not None:  # this process's partition is the job; its replicas the world
            if strategy not in ("zero1", "zero2"):
                raise ValueError(f"strategy {strategy!r}: a hybrid job's partitions reduce "
                                 f"through the shard servers with zero1 or zero2")
            if model is None:
                raise ValueError("a hybrid job's DistributedOptimizer needs model= (its "
                                 "tensor-parallel layers say which parameters are split)")
            rank, world, base_job = hybrid.d, hybrid.dp, hybrid.partition_job(job)
        self._hybrid = hybrid
        # A step lost to a lost member: the rules and their state (recovery.py).
        self._recovery = Recovery(self, recovery, strategy, checkpoint_every_steps)
        self.optimizer = optimizer
        self.strategy = strategy
        self.precision = precision
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.overlap = bool(overlap)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.skipped_tensors = 0  # parameter updates left out (no rank had a gradient)
        self._groups = self._make_groups(model)
        # A lost worker without rollback where the job allows it (rejoin.py).
        self.rejoin_in_place = rejoins_in_place(
            strategy, self.recovery, model, self._scaler.enabled, self.find_unused_parameters,
            hybrid, wanted=bool(rejoin_in_place))
        self._no_sync = False
        # model.state_dict()/load_state_dict() through the servers (model_state.py);
        # recorded before the groups bind (fsdp then empties the parameters).
        self._model_state = (ModelState(model, self._groups, lambda: (rank, world))
                             if model is not None else None)
        self._recovery.check_groups(self._groups)
        plans = plan_units(model, self._groups) if strategy == "fsdp" else [[]] * len(self._groups)
        if hybrid is not None:
            hybrid.replicate(replicated_parameters(model,
                                                   [p for g in self._groups for p in g.params]))
        try:
            self._connect(cfg, model, plans, rank, world, base_job, bucket_bytes,
                          checkpoint_every_steps, topk_ratio, broadcast_buffers)
        except BaseException:
            if hybrid is not None:  # the mesh must not keep a pointer to a worker going away
                hybrid.detach(self._groups[0].worker)
            raise
        if hybrid is not None:
            model._tessel_optimizer = weakref.ref(self)  # a Pipeline of it accumulates with it
        self._prepared = False  # this step's gradients collected and agreed (_prepare_step)
        self._ddp_mean_pulled = False  # ddp with overlap: clip_grad_norm_ pulled the mean
        self._held = HeldSteps(self, hold_for_clipping)
        self._recovery.started()
        session.adopt(self)

    def _connect(self, cfg, model, plans, rank, world, base_job, bucket_bytes,
                 checkpoint_every_steps, topk_ratio, broadcast_buffers):
        """The constructor's second half: each group's worker (the first attached to a
        hybrid job's mesh), bound, and the buffers and SyncBatchNorms."""
        strategy, hybrid = self.strategy, self._hybrid
        for g, plan in zip(self._groups, plans):
            g.worker = tessel.Worker(
                cfg["registry"], tessel.group_job_name(base_job, g.index),
                rank, world, strategy=strategy, optimizer=g.hyper,
                num_servers=cfg["num_servers"], bucket_bytes=int(bucket_bytes),
                ucx_tls=cfg["ucx_tls"], connect_timeout_s=cfg["connect_timeout_s"],
                step_timeout_s=cfg["step_timeout_s"], token=cfg["token"],
                units=[first for first, _ in plan], recovery=self.recovery,
                auto_resume=self.recovery, checkpoint_every_steps=int(checkpoint_every_steps),
                checkpoint_initial=self.recovery, precision=self.precision,
                topk_ratio=float(topk_ratio), rejoin_in_place=self.rejoin_in_place,
                **session_lib.observe_options(cfg, g.index))
            if hybrid is not None and g is self._groups[0]:
                hybrid.attach(g.worker)  # before the layout: a restarted process resumes here
            if strategy == "fsdp":
                g.bind(plan)
            else:
                g.bind()
        self._buffer_store = None
        if (model is not None and rank == 0 and hybrid is None and strategy != "ddp"
                and checkpoint_every_steps >= 1 and persistent_buffers(model)):
            # The buffers in the servers' checkpoints (buffer_store.py): rank 0 alone.
            store = BufferStore(model, checkpoint_every_steps)
            store.connect(cfg, base_job, self.recovery)
            self._buffer_store = store
            if self.recovery and self.step_count > 0:  # resumed: the checkpoint's buffers
                store.restore(self.step_count)
        self.broadcast_buffers = bool(broadcast_buffers)
        self._buffers = BufferSync(model if self.broadcast_buffers else None)
        if not self.recovery:
            self._buffers.sync(self._groups[0].worker)
        self._sync_bns = bind_sync_batchnorm(model, self)

    def _make_groups(self, model):
        """A group object per non-empty parameter group, after checking every parameter."""
        names = {}
        if model is not None:
            names = {id(p): n for n, p in model.named_parameters()}
        groups = []
        seen = set()
        devices = {}  # device -> the first parameter's name on it
        kind = FsdpGroup if self.strategy == "fsdp" else FlatGroup
        settings = Settings(self.strategy, self.precision, None, False,
                            self.backward_passes_per_step, self.overlap,
                            push_in_backward=not self._scaler.enabled)
        for gi, group in enumerate(self.optimizer.param_groups):
            params = [p for p in group["params"]]
            for p in params:
                if id(p) in seen:
                    raise ValueError("a parameter appears in two parameter groups")
                seen.add(id(p))
                if p.dtype != torch.float32:
                    raise ValueError(f"parameter {names.get(id(p), '?')} is {p.dtype}; Tessel "
                                     f"keeps float32 parameters (use precision= for half)")
                if p.is_sparse or p.layout != torch.strided:
                    raise ValueError(f"parameter {names.get(id(p), '?')} is not a dense tensor")
                if not p.requires_grad:
                    raise ValueError(f"parameter {names.get(id(p), '?')} does not require a "
                                     f"gradient (frozen): leave it out of the optimizer")
                if p.device.type not in ("cpu", "cuda"):
                    raise ValueError(f"parameter {names.get(id(p), '?')} is on {p.device}; "
                                     f"Tessel trains CPU and CUDA models")
                devices.setdefault(p.device, names.get(id(p), "?"))
            if not params:
                continue
            pnames = [names.get(id(p), f"g{gi}.p{i}") for i, p in enumerate(params)]
            groups.append(kind(gi, params, pnames, self._hyper_source(gi), settings))
        if not groups:
            raise ValueError("the optimizer has no parameters")
        if len(devices) > 1:
            raise ValueError("the parameters are on several devices (" + ", ".join(
                f"{n} on {d}" for d, n in devices.items()) + "); Tessel trains a model on one")
        self.device = settings.device = next(iter(devices))
        self._staged = settings.staged = (self.device.type == "cuda"
                                          or os.environ.get("TESSEL_TORCH_STAGING") == "1")
        return groups

    def _hyper_source(self, index):
        """The settings of param_groups[index] now, with this step's gradient multiplier."""
        return lambda: tessel_hyper(self.optimizer, self.optimizer.param_groups[index],
                                    self._scaler.grad_scale(self._clip_coef))

    # --- loss scaling and clipping ------------------------------------------------
    @property
    def loss_scale(self):
        """The current loss scale (a float), or None without loss scaling."""
        return self._scaler.scale

    @property
    def skipped_steps(self):
        """Steps skipped because a rank's gradients overflowed (loss scaling)."""
        return self._scaler.skipped_steps

    def scale_loss(self, loss):
        """loss times the current loss scale (as torch's GradScaler.scale); backward that."""
        return self._scaler.scale_loss(loss)

    def _clip_next_step(self, coef):
        """clip_grad_norm_: the mean gradient of the coming step times `coef`."""
        self._clip_coef = coef

    # --- torch.optim.Optimizer's interface -----------------------------------------
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=False):
        """As torch's: zeroes the gradients in place (the buffers stay the model's
        .grad; a parameter whose .grad is None keeps None), or with set_to_none
        sets every .grad to None, so a parameter unused until the next step()
        has no gradient there (see find_unused_parameters)."""
        self._clip_coef = None  # a clip factor belongs to the gradients it was measured on
        for g in self._groups:
            g.zero_grad(set_to_none)

    @timed_step  # times it for last_step_report() (report.py)
    def step(self, closure=None):
        """One synchronous step of every parameter group; the model holds the new values.
        Returns the closure's loss if one is given; otherwise True, or False when loss
        scaling skipped the step because a rank's gradients overflowed."""
        if self._no_sync:
            raise RuntimeError("step() inside no_sync(): leave the no_sync() block and run the "
                               "last micro-batch's backward outside it, then step()")
        if self._recovery.skip_abandoned():  # lost to a recovery: nothing to apply
            return False
        loss = True
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._prepare_step():  # overflowed: skipped on every rank
            self._scaler.skipped()
            self._clip_coef = None
            for g in self._groups:
                g.drop_gradients()
            self._buffers.sync(self._groups[0].worker)
            return False if closure is None else loss
        self._prepared = False
        applied = self._recovery.run_steps()  # False: lost, and the job rolled back
        self._clip_coef = None  # this step's only
        self._ddp_mean_pulled = False
        if applied:  # else the rollback chose the next step's hold
            self._held.step_done()
        self._scaler.stepped()
        if hasattr(self.optimizer, "_step_count"):  # torch's counter a scheduler checks
            self.optimizer._step_count += 1
        # Not after a rollback: a restarted rank's first step() ends with a broadcast
        # of its own, which the others' must match.
        if applied:
            self._buffers.sync(self._groups[0].worker)
        if self._hybrid is not None:  # start-up is over: later agreements include everyone
            self._hybrid.replacement = False
        if closure is not None:
            self.report_loss(loss)
        return loss

    def _prepare_step(self):
        """Once a step (step(), or a held step's clip_grad_norm_ first): layouts
        checked, gradients collected, the job-wide decisions, settings and skips
        sent, a checkpoint step's buffers written. False if a rank's gradients
        overflowed (the step is skipped)."""
        if self._prepared:
            return True
        for g in self._groups:
            g.require_worker()
            g.check_layout()
        for g in self._groups:
            g.collect_grads()
        overflowed, skips = agree(self._groups, self.find_unused_parameters,
                                  check_overflow=self._scaler.enabled)
        if overflowed:
            return False
        for g in self._groups:
            g.sync_hyper()
        self._skip_tensors(skips)
        if self._buffer_store is not None and self._buffer_store.due(self.step_count + 1):
            # A checkpoint step: rank 0's buffers (this step's forward is done) go in first.
            self._buffer_store.write(self.step_count + 1)
        self._prepared = True
        return True

    def _skip_tensors(self, skips):
        """Tells each group's servers (ddp: its worker) which parameters this step
        leaves alone, before anything of theirs is pushed."""
        if skips is None:
            return
        for g, s in zip(self._groups, skips):
            if s:
                g.require_worker().skip_tensors(s)
                self.skipped_tensors += len(s)

    def abandon_step(self, error):
        """After a tessel.RecoverableError raised outside step() (a hybrid job's
        forward or backward waiting on a peer when a shard server was lost): rolls
        back as step() would (needs recovery=True; otherwise re-raises `error`); the
        next step() then applies nothing and returns False. Pipeline.step calls it
        itself; a loop of your own (pipeline_parallel=1) does:
            try: loss_fn(model(x), y).backward()
            except tessel.RecoverableError as e: opt.abandon_step(e)
            opt.step()"""
        self._recovery.abandon(error)

    def _forget_step(self):
        """After a rollback (recovery.py): this step's gradients were never agreed."""
        self._prepared = False
        self._ddp_mean_pulled = False

    @property
    def recovery(self):
        """Whether a step lost to a lost member rolls back (recovery=)."""
        return self._recovery.enabled

    @property
    def recoveries(self):
        """Rollbacks this process has made."""
        return self._recovery.count

    @property
    def resume_step(self):
        """The step a (re)started worker goes on from: its loop reads batch
        resume_step next (step_count when this process started; 0 for a fresh job).
        A replacement that rejoined the job in place (opt.rejoined_in_place) gets
        the step the servers had applied, so it recomputes the step in flight."""
        return self._recovery.resume_step

    @property
    def rejoined_in_place(self):
        """Whether this process replaced a lost worker without a rollback."""
        return self._recovery.rejoined_in_place

    @property
    def step_count(self):
        """Steps applied to the job so far (goes back on a recovery's rollback; a
        restarted worker starts where the job resumed)."""
        return self._groups[0].require_worker().current_step

    def gathered(self):
        """A context in which every parameter holds its full value of this step
        (fsdp gathers and releases every unit; other strategies hold them anyway)."""
        return Gathered(self._groups, self)

    def synchronize_gradients(self):
        """The mean over ranks of this step's gradients, per parameter (a copy; nothing applied)."""
        out = []
        for g in self._groups:
            out += g.mean_gradients()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Gradient accumulation with torch DDP's meaning: backward passes inside
        the block only add into the gradients (torch's in-place .grad accumulation;
        fsdp: each unit's own buffer, its parameters freed as usual); the first
        backward after it hands the sums over, and step() applies the mean over ranks
        of each rank's sum over its micro-batches. Every rank accumulates the same
        number of passes. ddp, zero1 and zero2 accumulate in the worker's gradient
        buffer they have anyway (no memory added); fsdp in fp32 pushes each pass's
        unit gradients as parts the shard servers sum (each rank's in order, then over
        ranks: the same bits), so a worker holds one unit's gradients at a time however
        many passes there are (in bf16/fp16 each unit keeps its buffer between passes).
        RuntimeError if nested, if step() runs inside it, or (fsdp) on zero_grad()
        between the passes and the step; ValueError with backward_passes_per_step > 1
        (the older way to accumulate; use one)."""
        if self._no_sync:
            raise RuntimeError("no_sync() is already active: it does not nest")
        if self.backward_passes_per_step > 1:
            raise ValueError("no_sync() with backward_passes_per_step > 1: accumulate one "
                             "way (no_sync() is torch's, and the one to keep)")
        self._no_sync = True
        settings = [g.settings for g in self._groups]
        for s in settings:
            s.sync = False
        try:
            yield
        finally:
            self._no_sync = False
            for s in settings:
                s.sync = True

    # --- the model's state --------------------------------------------------------
    def _require_model_state(self, what):
        if self._model_state is None:
            raise ValueError(f"{what} needs the DistributedOptimizer's model= (its "
                             f"state_dict keys name the tensors)")
        for g in self._groups:
            g.require_worker()
        return self._model_state

    def load_model_state_dict(self, state_dict, strict=True):
        """Loads a model state_dict (torch's keys: parameters and buffers) at any step
        between steps: the parameters go to the shard servers (every rank passes the
        same values; collective), the buffers into the model; the optimizer state and
        the step stay. Missing or unexpected keys (strict) and mis-shaped tensors raise
        ValueError naming them, and nothing changes on any rank. Returns torch's
        (missing_keys, unexpected_keys). model.load_state_dict(sd) does the same while
        the optimizer is open."""
        ms = self._require_model_state("load_model_state_dict")
        missing, unexpected = ms.load(state_dict, strict)
        return torch.nn.modules.module._IncompatibleKeys(missing, unexpected)

    def sharded_state_dict(self):
        """This rank's 1/world of the model's parameters (and the buffers), without
        gathering the model (fsdp: one unit at a time); merge every rank's with
        tessel.torch.merge_sharded_state_dicts. Collective only in that every rank
        should call it to cover the model."""
        return self._require_model_state("sharded_state_dict").sharded()

    def report_loss(self, loss):
        """The loss of the step just finished (a number or a one-element tensor) for the
        registry's status page: rank 0's is plotted as the job's loss curve (it rides on
        the next registry heartbeat, about once a second). Cheap; call it every step
        (a CUDA tensor's value is read, which waits for it). step(closure) reports the
        closure's loss itself."""
        self._groups[0].require_worker().report_loss(float(loss))

    def last_step_report(self):
        """This rank's last step: where its time went (compute, push, wait, pull, update,
        other; seconds) and the job's slowest rank as the shard servers name it (rank,
        score, lateness, host); None before the first step(). A rank newly named a
        straggler, or no longer, gives one tessel.torch.StragglerWarning on rank 0 and on
        that rank (report.py; docs/observability.md)."""
        return last_step_report(self)

    @property
    def metrics_address(self):
        """HOST:PORT where this process's worker serves /metrics ('' when off)."""
        return self._groups[0].require_worker().metrics_address

    def should_early_stop(self, metric):
        """Reports this rank's metric; the job-wide decision, the same on every rank."""
        return self._groups[0].worker.report_metric(float(metric))

    def request_checkpoint(self):
        """Asks the shard servers to snapshot every group at the next step (zero1, zero2)."""
        for g in self._groups:
            g.require_worker().request_checkpoint()

    def state_dict(self):
        """The whole training state (parameters, optimizer state, step) of every group,
        the torch optimizer's param_groups (torch's entries: every group's
        hyper-parameters, a scheduler's among them, and its parameter indices) and the
        loss scaler's: portable across world sizes, shard counts and strategies
        (opt_state.py). Collective."""
        return opt_state.state_dict(self)

    def load_state_dict(self, state):
        """Loads a state_dict(): every job's parameters, optimizer state and step, and the
        saved param_groups into the torch optimizer (as torch's load_state_dict); a
        scheduler made on it loads its own state_dict() beside. ValueError naming the
        difference (group counts and sizes, tensors) before anything changes. Collective."""
        opt_state.load_state_dict(self, state)

    def close(self):
        """Leaves the jobs. The parameters move into memory of their own first
        (they lived in the workers' buffers), so the model stays usable."""
        if self._hybrid is not None:  # a later optimizer's worker stays attached
            self._hybrid.detach(self._groups[0].worker)
            self._hybrid = None
        unbind_sync_batchnorm(self._sync_bns)
        if self._buffer_store is not None:
            self._buffer_store.close()
            self._buffer_store = None
        for g in self._groups:
            g.close()
            g.hooks = []
        if self._model_state is not None:  # the parameters are the model's own again
            self._model_state.close()

    @property
    def workers(self):
        return [g.worker for g in self._groups]
