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

Environment (tessel-launch sets it): TESSEL_REGISTRY, TESSEL_JOB,
TESSEL_RANK, TESSEL_WORLD_SIZE, TESSEL_NUM_SERVERS, and optionally
TESSEL_UCX_TLS, TESSEL_TOKEN.
"""
import os

import numpy as np
import torch

import tessel

_config = None
_optimizers = []

_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
# Mixed precision: the dtype the model computes in (its parameters and .grad
# are views of the worker's half buffers); the servers keep fp32 masters.
_HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def init(registry=None, job=None, rank=None, world_size=None, num_servers=None, ucx_tls=None,
         token=None, connect_timeout_s=60.0, step_timeout_s=120.0):
    """Where this process takes part: arguments, else the environment tessel-launch sets."""
    global _config

    def pick(value, env, kind, default=None):
        if value is not None:
            return value
        raw = os.environ.get(env)
        if raw is None or raw == "":
            if default is None:
                raise ValueError(f"tessel.torch.init: no {env.lower().replace('tessel_', '')} "
                                 f"given and ${env} is not set (run under tessel-launch, or pass it)")
            return default
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"tessel.torch.init: ${env}={raw!r} is not a {kind.__name__}") from None

    cfg = dict(
        registry=pick(registry, "TESSEL_REGISTRY", str),
        job=pick(job, "TESSEL_JOB", str),
        rank=pick(rank, "TESSEL_RANK", int),
        world_size=pick(world_size, "TESSEL_WORLD_SIZE", int),
        num_servers=pick(num_servers, "TESSEL_NUM_SERVERS", int, 0),
        ucx_tls=pick(ucx_tls, "TESSEL_UCX_TLS", str, ""),
        token=pick(token, "TESSEL_TOKEN", str, ""),
        connect_timeout_s=float(connect_timeout_s),
        step_timeout_s=float(step_timeout_s),
    )
    if cfg["world_size"] < 1:
        raise ValueError(f"tessel.torch.init: world_size must be >= 1, got {cfg['world_size']}")
    if not 0 <= cfg["rank"] < cfg["world_size"]:
        raise ValueError(f"tessel.torch.init: rank {cfg['rank']} is outside "
                         f"[0, {cfg['world_size']})")
    _config = cfg
    return dict(cfg)


def _require_init():
    if _config is None:
        raise RuntimeError("call tessel.torch.init() first")
    return _config


def rank():
    return _require_init()["rank"]


def size():
    return _require_init()["world_size"]


def shutdown():
    """Leaves every job this process joined; the models keep their last values."""
    global _config
    while _optimizers:
        _optimizers.pop().close()
    _config = None


def _hyper(optimizer, group):
    """The Tessel optimizer settings of one torch parameter group."""
    name = type(optimizer).__name__
    if group.get("maximize", False):
        raise ValueError(f"{name}(maximize=True) is not supported")
    if isinstance(optimizer, torch.optim.AdamW):
        kind = "adamw"
    elif isinstance(optimizer, torch.optim.Adam):
        kind = "adam"
    elif isinstance(optimizer, torch.optim.SGD):
        kind = "sgd"
    elif isinstance(optimizer, torch.optim.RMSprop):
        kind = "rmsprop"
    elif isinstance(optimizer, torch.optim.Adagrad):
        kind = "adagrad"
    else:
        raise ValueError(f"tessel.torch supports torch.optim SGD, Adam, AdamW, RMSprop and "
                         f"Adagrad; got {name}")
    h = {"kind": kind, "lr": float(group["lr"]), "weight_decay": float(group["weight_decay"])}
    if kind == "sgd":
        h.update(momentum=float(group["momentum"]), dampening=float(group["dampening"]),
                 nesterov=bool(group["nesterov"]))
    elif kind in ("adam", "adamw"):
        if group.get("amsgrad", False):
            raise ValueError(f"{name}(amsgrad=True) is not supported")
        b1, b2 = group["betas"]
        h.update(beta1=float(b1), beta2=float(b2), eps=float(group["eps"]))
    elif kind == "rmsprop":
        h.update(alpha=float(group["alpha"]), eps=float(group["eps"]),
                 momentum=float(group["momentum"]), centered=bool(group["centered"]))
    else:
        h.update(lr_decay=float(group["lr_decay"]), eps=float(group["eps"]),
                 initial_accumulator_value=float(group["initial_accumulator_value"]))
    return h


def clip_grad_norm_(optimizer, max_norm, norm_type=2.0):
    """torch.nn.utils.clip_grad_norm_ for a DistributedOptimizer: the norm is the
    job-wide one, of the mean gradient over all ranks (what the step applies),
    across every parameter group; if above max_norm, the step multiplies that
    mean by max_norm / (norm + 1e-6) (float32) where the update runs (the
    servers; ddp: the workers), as torch multiplies a single process's
    gradients. Returns the norm (a tensor).

    Call it between backward and step on every rank. It costs one extra
    reduction through the servers (and, on a step that clips, new settings sent
    to them with the factor), and needs overlap=False (with overlap the
    hooks have pushed the gradients during backward, before they could be
    scaled).

    With loss scaling it works on the unscaled gradients, as torch's recipe
    (scaler.unscale_(opt); clip_grad_norm_(...); scaler.step(opt)) does: the
    norm is that of the mean gradient times float32(1 / scale), and the
    clipping factor joins the unscaling on the servers for this step (the
    gradients stay in half precision until then). If the gradients
    overflowed the norm is inf or NaN, nothing is clipped, and step() skips."""
    if not isinstance(optimizer, DistributedOptimizer):
        raise ValueError("clip_grad_norm_ takes a tessel.torch.DistributedOptimizer")
    if optimizer.strategy == "fsdp":
        raise ValueError("clip_grad_norm_ is not available with fsdp: its units' gradients are "
                         "pushed and freed during backward")
    if optimizer.overlap:
        raise ValueError("clip_grad_norm_ needs the DistributedOptimizer made with overlap=False: "
                         "with overlap, backward's hooks have already pushed the gradients")
    max_norm = float(max_norm)
    norm_type = float(norm_type)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    means = optimizer.synchronize_gradients()
    if optimizer.strategy == "ddp" and optimizer.precision in _HALF:
        # what ddp's servers hand back, and its workers apply: the mean in half
        half = _HALF[optimizer.precision]
        means = [g.to(half).float() for g in means]
    if optimizer.loss_scale is not None:  # torch's unscale_: grad * float32(1 / scale)
        inv = torch.tensor(np.float32(1.0 / optimizer.loss_scale))
        means = [g * inv for g in means]
    if norm_type == float("inf"):
        total = max(g.abs().max() for g in means)
    else:
        total = torch.norm(torch.stack([torch.norm(g, norm_type) for g in means]), norm_type)
    coef = max_norm / (float(total) + 1e-6)
    if np.isfinite(float(total)) and coef < 1.0:  # overflowed: step() skips anyway
        optimizer._clip_coef = coef
    return total


class _Gathered:
    def __init__(self, opt):
        self.opt = opt
        self.held = []

    def __enter__(self):
        if self.opt.strategy == "fsdp":
            for g in self.opt._groups:
                self.opt._worker(g)
                for u, unit in enumerate(g.units):
                    if not unit["held"]:
                        self.opt._hold_unit(g, u)
                        self.held.append((g, u))
        return self.opt

    def __exit__(self, *exc):
        for g, u in self.held:
            unit = g.units[u]
            self.opt._empty_params(g, unit["members"])
            unit.pop("grads", None)
            unit.pop("host_grads", None)
            g.worker.release(u)
            unit["held"] = False
        self.held = []
        return False


class _Staging:
    """A parameter group whose tensors live on a device (CUDA; or, for tests, a
    CPU model with TESSEL_TORCH_STAGING=1). The model's parameters and
    gradients are views of `params` and `grads` here, on the device; the
    worker's buffers (host) stay the data path's. Gradients go device -> a
    page-locked stage (asynchronously, on our stream, behind the stream that
    produced them) -> the worker's buffer, range by range; parameters go the
    other way after each step. On the CPU the same copies run synchronously."""

    def __init__(self, device, n, dtype):
        self.device = device
        self.cuda = device.type == "cuda"
        self.params = torch.empty(n, dtype=dtype, device=device)
        self.grads = torch.zeros(n, dtype=dtype, device=device)
        # Asynchronous copies need page-locked host memory.
        self.grad_stage = torch.empty(n, dtype=dtype, pin_memory=self.cuda)
        self.param_stage = torch.empty(n, dtype=dtype, pin_memory=self.cuda)
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.pending = []  # [event, begin, end, landed in the worker's buffer]
        self.host_params = None
        self.host_grads = None

    def attach(self, host_params, host_grads):
        """The worker's buffers (a recovery or a load may have moved them)."""
        self.drain()
        self.host_params = host_params
        self.host_grads = host_grads

    def enqueue(self, begin, end):
        """grads[begin:end] is final on the current stream: copy it out."""
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                self.grad_stage[begin:end].copy_(self.grads[begin:end], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        else:
            self.grad_stage[begin:end].copy_(self.grads[begin:end])
            event = None
        self.pending.append([event, begin, end, False])

    def _land(self, entry):
        event, begin, end, landed = entry
        if not landed:
            if event is not None:
                event.synchronize()
            self.host_grads[begin:end].copy_(self.grad_stage[begin:end])
            entry[3] = True

    def wait(self):
        """Every queued gradient is in the worker's buffer (nothing handed over)."""
        for entry in self.pending:
            self._land(entry)

    def hand_over(self, worker):
        """Hands each queued range to the worker as its copy lands, in order."""
        pending, self.pending = self.pending, []
        for entry in pending:
            self._land(entry)
            worker.gradients_ready(entry[1], entry[2])

    def drain(self):
        """Waits for the queued copies and forgets them (a skipped step, a rebind)."""
        for event, *_ in self.pending:
            if event is not None:
                event.synchronize()
        self.pending = []

    def upload(self):
        """The worker's parameters to the device, before any later work on the
        current stream reads them."""
        if not self.cuda:
            self.param_stage.copy_(self.host_params)
            with torch.no_grad():
                self.params.copy_(self.param_stage)
            return
        self.stream.synchronize()  # the previous upload no longer reads the stage
        self.param_stage.copy_(self.host_params)
        # Work already enqueued that reads the old values runs first.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream), torch.no_grad():
            self.params.copy_(self.param_stage, non_blocking=True)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)


class _Group:
    """One torch parameter group = one Tessel job and its worker."""

    def __init__(self, index, params, names, hyper):
        self.index = index
        self.params = params
        self.names = names
        self.hyper = hyper
        self.worker = None
        self.ranges = []  # (begin, end) of each parameter in the flat buffers
        self.flat_params = None
        self.flat_grads = None
        self.grad_views = []
        self.ready = []  # backward passes seen per parameter this step
        self.staging = None  # _Staging for parameters on a device
        self.staged = []  # per parameter: its gradient was queued this step
        # torch's p.grad is not None, per parameter: fsdp frees the tensors between
        # steps, so it is kept here (the other strategies read p.grad itself).
        self.has_grad = [p.grad is not None for p in params]


class DistributedOptimizer:
    """A torch optimizer whose update runs through Tessel (see the module's docs).

    optimizer:  a torch.optim SGD, Adam, AdamW, RMSprop or Adagrad over the model's parameters.
    model:      the module (for tensor names in errors and checkpoints); optional.
    strategy:   "ddp", "zero1", "zero2" or "fsdp" (model= needed: its modules are the units).
    backward_passes_per_step: backward calls per step (gradient accumulation): each
                parameter's gradient is handed over after that many.
    overlap:    push buckets from autograd hooks while backward runs (the default, except
                with loss scaling, whose overflow decision must come before any push).
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
    """

    def __init__(self, optimizer, model=None, strategy="zero2", bucket_bytes=4 << 20,
                 backward_passes_per_step=1, overlap=None, job=None, recovery=False,
                 checkpoint_every_steps=0, precision="fp32", loss_scale=None,
                 init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 find_unused_parameters=False, topk_ratio=0.0):
        cfg = _require_init()
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy {strategy!r}: one of {', '.join(_STRATEGIES)}")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision {precision!r}: fp32, bf16 or fp16")
        if loss_scale is None and precision == "fp16":
            loss_scale = "dynamic"
        self._dynamic = loss_scale == "dynamic"
        if self._dynamic:
            scale = init_scale
            if not growth_factor > 1.0:
                raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
            if not 0.0 < backoff_factor < 1.0:
                raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
            if int(growth_interval) != growth_interval or growth_interval < 1:
                raise ValueError(f"growth_interval must be an integer >= 1, got {growth_interval}")
        elif loss_scale is None:
            scale = None
        elif isinstance(loss_scale, str):
            raise ValueError(f"loss_scale {loss_scale!r}: 'dynamic', a number or None")
        else:
            scale = loss_scale
        if scale is not None:
            scale = float(scale)
            if not (np.isfinite(scale) and scale > 0 and np.isfinite(np.float32(1.0 / scale))
                    and np.float32(1.0 / scale) > 0):
                raise ValueError(f"the loss scale must be a finite number > 0 whose inverse is "
                                 f"a normal float32, got {scale}")
            if overlap:
                raise ValueError("loss scaling needs overlap=False: whether a step is skipped "
                                 "is decided after backward, before anything is pushed")
            overlap = False
        elif overlap is None:
            overlap = True
        self._scale = scale
        self._clip_coef = None  # clip_grad_norm_ under loss scaling, for the next step only
        self._growth = (float(growth_factor), float(backoff_factor), int(growth_interval))
        self._good_steps = 0
        self.skipped_steps = 0
        if recovery and (strategy == "ddp" or checkpoint_every_steps < 1):
            raise ValueError("recovery needs strategy zero1, zero2 or fsdp and "
                             "checkpoint_every_steps >= 1")
        self.optimizer = optimizer
        self.strategy = strategy
        self.recovery = bool(recovery)
        self.precision = precision
        self.recoveries = 0
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.overlap = bool(overlap)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.skipped_tensors = 0  # parameter updates left out (no rank had a gradient)
        self._hooks = []
        names = {}
        if model is not None:
            names = {id(p): n for n, p in model.named_parameters()}
        self._groups = []
        seen = set()
        devices = {}  # device -> the first parameter's name on it
        for gi, group in enumerate(optimizer.param_groups):
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
            self._groups.append(_Group(gi, params, pnames, self._hyper_of(group)))
        if not self._groups:
            raise ValueError("the optimizer has no parameters")
        if len(devices) > 1:
            raise ValueError("the parameters are on several devices (" + ", ".join(
                f"{n} on {d}" for d, n in devices.items()) + "); Tessel trains a model on one")
        self.device = next(iter(devices))
        self._staged = (self.device.type == "cuda"
                        or os.environ.get("TESSEL_TORCH_STAGING") == "1")
        if recovery and len(self._groups) > 1:
            raise ValueError("recovery takes one parameter group (each group is a job, and "
                             "their checkpoints could roll back to different steps)")
        units = [[] for _ in self._groups]
        if strategy == "fsdp":
            units = self._fsdp_units(model)
        base_job = job or cfg["job"]
        for g, g_units in zip(self._groups, units):
            g.worker = tessel.Worker(
                cfg["registry"], base_job if g.index == 0 else f"{base_job}.g{g.index}",
                cfg["rank"], cfg["world_size"], strategy=strategy, optimizer=g.hyper,
                num_servers=cfg["num_servers"], bucket_bytes=int(bucket_bytes),
                ucx_tls=cfg["ucx_tls"], connect_timeout_s=cfg["connect_timeout_s"],
                step_timeout_s=cfg["step_timeout_s"], token=cfg["token"],
                units=[first for first, _ in g_units], recovery=self.recovery,
                auto_resume=self.recovery, checkpoint_every_steps=int(checkpoint_every_steps),
                checkpoint_initial=self.recovery, precision=precision,
                topk_ratio=float(topk_ratio))
            if strategy == "fsdp":
                self._bind_fsdp(g, g_units)
            else:
                self._bind(g)
        _optimizers.append(self)

    def _hyper_of(self, group):
        h = _hyper(self.optimizer, group)
        if self._scale is None and self._clip_coef is not None:  # clip_grad_norm_, this step
            h["grad_scale"] = float(np.float32(self._clip_coef))
        if self._scale is not None:  # the servers unscale: grad * float32(1 / scale)
            inv = float(np.float32(1.0 / self._scale))
            if self._clip_coef is not None:  # and clip (clip_grad_norm_), this step
                inv = float(np.float32(inv * self._clip_coef))
            h["grad_scale"] = inv
        return h

    @property
    def loss_scale(self):
        """The current loss scale (a float), or None without loss scaling."""
        return self._scale

    def scale_loss(self, loss):
        """loss times the current loss scale (as torch's GradScaler.scale); backward that."""
        if self._scale is None:
            return loss
        return loss * torch.tensor(self._scale, dtype=torch.float32)

    def _agree(self):
        """The job-wide decisions of a step, the same on every rank: whether any
        rank's gradients overflowed (loss scaling), and per group the parameters
        no rank has a gradient for (find_unused_parameters). One reduction for
        both, none when neither is asked for. Returns (overflowed, skips)."""
        if self.strategy == "fsdp":
            for g in self._groups:
                for unit in g.units:
                    if unit["held"]:
                        self._adopt_unit_grads(g, unit)
        missing = [[i for i, h in enumerate(g.has_grad) if not h] for g in self._groups]
        if not self.find_unused_parameters and any(missing):
            names = [g.names[i] for g, m in zip(self._groups, missing) for i in m]
            raise ValueError(
                f"parameter(s) {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} got no "
                f"gradient this step (.grad is None): make the DistributedOptimizer with "
                f"find_unused_parameters=True to leave them out as torch does (this rank's "
                f"other gradients may already have been pushed: the job cannot finish this step)")
        if self._scale is None and not self.find_unused_parameters:
            return False, None
        bad = 0.0
        if self._scale is not None:
            for g in self._groups:
                if self.strategy == "fsdp":
                    grads = [unit["grads"] for unit in g.units if unit.get("grads") is not None]
                else:
                    grads = [g.flat_grads]
                if any(not bool(torch.isfinite(t).all()) for t in grads):
                    bad = 1.0
        flags = [bad]
        if self.find_unused_parameters:
            for g in self._groups:
                flags += [1.0 if h else 0.0 for h in g.has_grad]
        flags = np.array(flags, dtype=np.float32)
        self._worker(self._groups[0]).all_reduce_mean(flags)
        skips = None
        if self.find_unused_parameters:
            skips, at = [], 1
            for g in self._groups:
                n = len(g.params)
                skips.append([i for i in range(n) if flags[at + i] == 0])
                at += n
        return bool(flags[0] > 0), skips

    def _skip_tensors(self, skips):
        """Tells each group's servers (ddp: its worker) which parameters this step
        leaves alone, before anything of theirs is pushed."""
        if skips is None:
            return
        for g, s in zip(self._groups, skips):
            if s:
                self._worker(g).skip_tensors(s)
                self.skipped_tensors += len(s)

    def _skip_step(self):
        """Every rank drops this step's gradients; a dynamic scale backs off."""
        self.skipped_steps += 1
        self._clip_coef = None
        if self._dynamic:
            self._scale *= self._growth[1]
            self._good_steps = 0
        if self.strategy == "fsdp":
            for g in self._groups:
                for u, unit in enumerate(g.units):
                    if unit["held"]:
                        unit["grads"].zero_()  # the unit's buffer outlives the release
                        if "host_grads" in unit:
                            unit.pop("host_grads").zero_()
                        self._empty_params(g, unit["members"])
                        unit.pop("grads", None)
                        g.worker.release(u)
                        unit["held"] = False
                    unit["done"] = 0
            return
        for g in self._groups:
            if g.staging is not None:
                g.staging.drain()
                g.staged = [False] * len(g.params)
            g.flat_grads.zero_()
            g.ready = [0] * len(g.params)

    def _scale_stepped(self):
        self._clip_coef = None  # this step's only
        if self._dynamic:
            self._good_steps += 1
            if self._good_steps == self._growth[2]:
                self._scale *= self._growth[0]
                self._good_steps = 0

    @property
    def step_count(self):
        """Steps applied to the job so far (goes back on a recovery's rollback; a
        restarted worker starts where the job resumed)."""
        return self._worker(self._groups[0]).current_step

    # --- fsdp (ZeRO-3) --------------------------------------------------------
    # The worker keeps no full copy: a unit's parameters are gathered from
    # the shard servers when its module's forward starts (the next unit is
    # prefetched meanwhile), its gradients are written into the unit's own
    # buffer, and once backward produced every one of them the unit is
    # released and pushed. Between steps the parameters are empty tensors;
    # `with opt.gathered():` holds them all (evaluation, inspection).

    def _fsdp_units(self, model):
        """Units, per parameter group: the model's top-level children that own
        parameters of the group, in the group's parameter order (parameters of the
        model itself form units of their own). A module whose parameters are in
        several groups has a unit in each, all gathered by its forward."""
        if model is None:
            raise ValueError("strategy 'fsdp' needs model= (its modules are the units)")
        named = list(model.named_parameters())
        in_groups = sorted(id(p) for g in self._groups for p in g.params)
        if sorted(id(p) for _, p in named) != in_groups:
            raise ValueError("strategy 'fsdp' needs the optimizer's parameter groups to hold "
                             "exactly model.parameters()")
        children = dict(model.named_children())
        key_of = {}
        for name, p in named:
            head = name.split(".")[0]
            key_of[id(p)] = (head, head if head in children else f"<root>.{name}")
        per_group = []
        for g in self._groups:
            units = []  # (index of the unit's first tensor, module, key)
            last = None
            for i, p in enumerate(g.params):
                head, key = key_of[id(p)]
                if key != last:
                    if any(k == key for _, _, k in units):
                        raise ValueError(f"the parameters of {head} are not contiguous in "
                                         f"parameter group {g.index}; fsdp units must be")
                    units.append((i, children.get(head, model), key))
                    last = key
            per_group.append([(first, module) for first, module, _ in units])
        return per_group

    def _bind_fsdp(self, g, units):
        flat_init = np.concatenate([p.detach().reshape(-1).cpu().numpy() for p in g.params])
        shapes = [list(p.shape) if p.dim() > 0 else [1] for p in g.params]
        g.worker.register_layout(g.names, shapes, flat_init.astype(np.float32, copy=False))
        g.shapes = [tuple(p.shape) for p in g.params]
        g.units = []
        firsts = [first for first, _ in units] + [len(g.params)]
        for u, (first, module) in enumerate(units):
            members = list(range(first, firsts[u + 1]))
            begin, _ = g.worker.unit_range(u)
            offsets = []
            off = 0
            for i in members:
                n = g.params[i].numel()
                offsets.append((off, off + n))
                off += n
            g.units.append({"members": members, "offsets": offsets, "held": False,
                            "pushed": False, "done": 0, "begin": begin})
            self._hooks.append(module.register_forward_pre_hook(self._unit_pre_hook(g, u)))
        g.unit_of = {}
        for u, unit in enumerate(g.units):
            for i in unit["members"]:
                g.unit_of[i] = u
        for i, p in enumerate(g.params):
            self._hooks.append(self._fsdp_grad_hook(g, i, p))
        self._empty_params(g)
        g.param_ptrs = None

    @staticmethod
    def _empty_params(g, members=None):
        with torch.no_grad():
            for i in (members if members is not None else range(len(g.params))):
                g.params[i].data = torch.empty(0, device=g.params[i].device)
                g.params[i].grad = None

    def _unit_pre_hook(self, g, u):
        def hook(module, inputs):
            if g.worker is None:
                raise RuntimeError("this DistributedOptimizer was closed (tessel.torch.shutdown)")
            self._sync_group(g)  # new settings reach the servers before any push
            self._hold_unit(g, u)
            if u + 1 < len(g.units) and not g.units[u + 1]["held"]:
                g.worker.prefetch(u + 1)
        return hook

    def _hold_unit(self, g, u):
        unit = g.units[u]
        if unit["held"]:
            return
        if self.precision in _HALF:
            params = torch.from_numpy(g.worker.gather_half(u)).view(_HALF[self.precision])
            grads = torch.from_numpy(g.worker.unit_half_grads(u)).view(_HALF[self.precision])
        else:
            params = torch.from_numpy(g.worker.gather(u))
            grads = torch.from_numpy(g.worker.unit_grads(u))
        if self._staged:  # the model's copies on its device; the worker's stay host
            unit["host_grads"] = grads
            params = params.to(self.device, copy=True)
            grads = torch.zeros_like(grads, device=self.device)
        with torch.no_grad():
            for i, (b, e) in zip(unit["members"], unit["offsets"]):
                p = g.params[i]
                p.data = params[b:e].view(g.shapes[i])
                # torch's None-ness: backward gives a parameter without a gradient
                # a new .grad (copied into the unit's buffer when pushed).
                p.grad = grads[b:e].view(g.shapes[i]) if g.has_grad[i] else None
        unit["grads"] = grads
        unit["held"] = True
        unit["done"] = 0

    def _fsdp_grad_hook(self, g, i, p):
        acc = p.expand_as(p).grad_fn.next_functions[0][0] if p.numel() else None
        if acc is None:  # an empty parameter now: hooks need the node made while bound
            raise ValueError("internal: fsdp hooks are made before parameters are emptied")
        u = g.unit_of[i]

        def hook(*_):
            if g.worker is None:
                return
            unit = g.units[u]
            unit["done"] += 1
            g.has_grad[i] = True
            if (unit["done"] == len(unit["members"]) * self.backward_passes_per_step
                    and self._scale is None):  # loss scaling pushes in step(), if at all
                self._push_unit(g, u)

        acc.register_hook(hook)
        return acc

    def _push_unit(self, g, u):
        unit = g.units[u]
        if unit["pushed"]:
            return
        if not unit["held"]:
            # A zero gradient: the buffer comes zeroed.
            if self.precision in _HALF:
                g.worker.unit_half_grads(u)
            else:
                g.worker.unit_grads(u)
        else:
            self._adopt_unit_grads(g, unit)
            if self._staged:  # the device's gradients into the worker's buffer
                unit.pop("host_grads").copy_(unit["grads"])
            self._empty_params(g, unit["members"])
            unit.pop("grads", None)
            g.worker.release(u)
            unit["held"] = False
        g.worker.push_unit(u)
        unit["pushed"] = True

    @staticmethod
    def _adopt_unit_grads(g, unit):
        """A held unit's gradients into its buffer (backward made a new .grad for a
        parameter that had none); those parameters have a gradient now."""
        for i, (b, e) in zip(unit["members"], unit["offsets"]):
            p = g.params[i]
            if p.grad is None:
                continue
            g.has_grad[i] = True
            view = unit["grads"][b:e]
            if p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad.reshape(-1))
                p.grad = view.view(g.shapes[i])

    def _fsdp_step(self, g):
        for u in range(len(g.units)):
            self._push_unit(g, u)  # units backward did not reach: a zero gradient
        g.worker.finish_step()
        for unit in g.units:
            unit["pushed"] = False
            unit["done"] = 0

    def gathered(self):
        """A context in which every parameter holds its full value of this step
        (fsdp gathers and releases every unit; other strategies hold them anyway)."""
        return _Gathered(self)

    def close(self):
        """Leaves the jobs. The parameters move into memory of their own first
        (they lived in the workers' buffers), so the model stays usable."""
        if self.strategy == "fsdp":
            for g in self._groups:
                if g.worker is None:
                    continue
                full = torch.from_numpy(g.worker.gather_all())
                off = 0
                with torch.no_grad():
                    for i, p in enumerate(g.params):
                        n = int(np.prod(g.shapes[i]))
                        p.data = full[off:off + n].view(g.shapes[i]).clone().to(p.device)
                        p.grad = None
                        off += n
                g.worker.close()
                g.worker = None
            self._hooks = []
            return
        for g in self._groups:
            if g.worker is None:
                continue
            with torch.no_grad():
                if self.precision in _HALF:  # the fp32 masters, as the model was made
                    full = torch.from_numpy(g.worker.gather_all())
                    for p, (b, e) in zip(g.params, g.ranges):
                        p.data = full[b:e].view(p.shape).clone().to(p.device)
                        p.grad = None
                else:
                    for p in g.params:
                        p.data = p.data.clone()
                        p.grad = None if p.grad is None else p.grad.clone()
            if g.staging is not None:
                g.staging.drain()
                g.staging = None
            g.worker.close()
            g.worker = None
        self._hooks = []

    # --- setup -------------------------------------------------------------
    def _bind(self, g):
        offset = 0
        init = []
        for p in g.params:
            n = p.numel()
            g.ranges.append((offset, offset + n))
            offset += n
            init.append(p.detach().reshape(-1).cpu().numpy())
        flat_init = np.concatenate(init).astype(np.float32, copy=False)
        shapes = [list(p.shape) if p.dim() > 0 else [1] for p in g.params]
        w = g.worker
        w.register_layout(g.names, shapes, flat_init)
        if self.strategy == "ddp":
            w.synchronize_optimizer_state()  # every rank takes rank 0's parameters exactly
        g.shapes = [tuple(p.shape) for p in g.params]
        if self._staged:
            dtype = _HALF.get(self.precision, torch.float32)
            g.staging = _Staging(self.device, offset, dtype)
        self._rebind(g)
        g.flat_grads.zero_()
        g.staged = [False] * len(g.params)
        g.ready = [0] * len(g.params)
        if self.overlap:
            for i, p in enumerate(g.params):
                self._hooks.append(self._hook(g, i, p))

    def _hook(self, g, i, p):
        # The AccumulateGrad node of p: its post-hook runs once p.grad holds
        # this backward's gradient (Horovod's way, torch 1.x).
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        begin, end = g.ranges[i]

        def hook(*_):
            if g.worker is None:  # closed
                return
            self._adopt_grad(g, i, p)
            # Staged (on a CUDA model this runs on autograd's thread), step()
            # sends the settings and hands the gradients over.
            if g.staging is None and not any(g.ready):  # first gradient: settings before pushes
                self._sync_group(g)
            g.ready[i] += 1
            if g.ready[i] == self.backward_passes_per_step:
                if g.staging is None:
                    g.worker.gradients_ready(begin, end)
                else:
                    g.staging.enqueue(begin, end)
                    g.staged[i] = True

        acc.register_hook(hook)
        return acc  # keep the node alive

    @staticmethod
    def _worker(g):
        if g.worker is None:
            raise RuntimeError("this DistributedOptimizer was closed (tessel.torch.shutdown)")
        return g.worker

    def _rebind(self, g):
        """Points the parameters at the worker's buffers again (a load or a
        recovery may have moved them)."""
        if self.precision in _HALF:  # the model computes in half; the servers keep fp32
            dtype = _HALF[self.precision]
            g.flat_params = torch.from_numpy(g.worker.half_params()).view(dtype)
            g.flat_grads = torch.from_numpy(g.worker.half_grads()).view(dtype)
        else:
            g.flat_params = torch.from_numpy(g.worker.params())
            g.flat_grads = torch.from_numpy(g.worker.grads())
        if g.staging is not None:  # the model's tensors are the device's copies
            g.staging.attach(g.flat_params, g.flat_grads)
            g.staging.upload()
            g.flat_params, g.flat_grads = g.staging.params, g.staging.grads
            g.staged = [False] * len(g.params)
        g.grad_views = []
        for p, (b, e) in zip(g.params, g.ranges):
            with torch.no_grad():
                p.data = g.flat_params[b:e].view(p.shape)
            view = g.flat_grads[b:e].view(p.shape)
            g.grad_views.append(view)
            if p.grad is not None:  # None stays None, as torch's optimizer sees it
                p.grad = view
        g.param_ptrs = [p.data_ptr() for p in g.params]

    def _collect_grads(self, g):
        """Every parameter's gradient in the worker's buffer; g.has_grad says which
        have one (torch's p.grad is not None). A parameter without one pushes zeros
        (part of the mean if another rank has one) and keeps .grad None."""
        for i, p in enumerate(g.params):
            g.has_grad[i] = p.grad is not None
            if p.grad is None:
                g.grad_views[i].zero_()
            else:
                self._adopt_grad(g, i, p)
        if g.staging is not None:  # what backward's hooks did not queue
            for i, (b, e) in enumerate(g.ranges):
                if not g.staged[i]:
                    g.staging.enqueue(b, e)
                    g.staged[i] = True

    @staticmethod
    def _adopt_grad(g, i, p):
        """p.grad back into the worker's buffer if something replaced it."""
        view = g.grad_views[i]
        if p.grad is None:
            return
        if p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
            p.grad = view

    # --- torch.optim.Optimizer's interface ---------------------------------
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=False):
        """As torch's: zeroes the gradients in place (the buffers stay the model's
        .grad; a parameter whose .grad is None keeps None), or with set_to_none
        sets every .grad to None, so a parameter unused until the next step()
        has no gradient there (see find_unused_parameters)."""
        self._clip_coef = None  # a clip factor belongs to the gradients it was measured on
        if self.strategy == "fsdp":
            for g in self._groups:
                for unit in g.units:
                    if unit.get("grads") is not None:
                        unit["grads"].zero_()
                if set_to_none:
                    g.has_grad = [False] * len(g.params)
                    for unit in g.units:
                        if unit["held"]:
                            for i in unit["members"]:
                                g.params[i].grad = None
            return
        for g in self._groups:
            if set_to_none:
                for p in g.params:
                    p.grad = None
                continue
            g.flat_grads.zero_()
            for p, view in zip(g.params, g.grad_views):
                if p.grad is not None:
                    p.grad = view

    def _sync_hyper(self):
        """Hyper-parameters changed in param_groups (an lr_scheduler, by hand) go to
        the servers before the step's pushes, so the step uses them, as in torch."""
        for g in self._groups:
            self._sync_group(g)

    def _sync_group(self, g):
        now = self._hyper_of(self.optimizer.param_groups[g.index])
        if now != g.hyper:
            self._worker(g).set_optimizer(now)
            g.hyper = now

    def step(self, closure=None):
        """One synchronous step of every parameter group; the model holds the new values.
        Returns the closure's loss if one is given; otherwise True, or False when loss
        scaling skipped the step because a rank's gradients overflowed."""
        loss = True
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        fsdp = self.strategy == "fsdp"
        for g in self._groups:
            self._worker(g)  # closed?
            if fsdp:
                continue
            for i, p in enumerate(g.params):
                if tuple(p.shape) != g.shapes[i] or p.data_ptr() != g.param_ptrs[i]:
                    raise ValueError(
                        f"parameter {g.names[i]} was replaced or reshaped (now {tuple(p.shape)}, "
                        f"was {g.shapes[i]}) after the DistributedOptimizer was made; Tessel "
                        f"keeps the registered layout: make a new optimizer for a new model")
        if not fsdp:
            for g in self._groups:
                self._collect_grads(g)
        overflowed, skips = self._agree()
        if overflowed:
            self._skip_step()
            return False if closure is None else loss
        self._sync_hyper()
        self._skip_tensors(skips)
        for g in self._groups:
            self._recovering(g, (lambda: self._fsdp_step(g)) if fsdp else
                             (lambda: self._flat_step(g)))
            g.ready = [0] * len(g.params)
            g.staged = [False] * len(g.params)
        self._scale_stepped()
        return loss

    def _flat_step(self, g):
        w = self._worker(g)
        if g.staging is not None:
            g.staging.hand_over(w)
        w.step()
        if g.staging is not None:
            g.staging.upload()

    def _recovering(self, g, step):
        """Runs `step`; with recovery on, a step lost to a lost member rolls the job
        back to its latest checkpoint instead (step_count goes back)."""
        try:
            step()
        except tessel.RecoverableError:
            if not self.recovery:
                raise
            g.worker.recover()
            self.recoveries += 1
            if self.strategy == "fsdp":
                for unit in g.units:  # the SDK dropped what it held: gather afresh
                    if unit["held"]:
                        self._empty_params(g, unit["members"])
                        unit.pop("grads", None)
                        unit.pop("host_grads", None)
                    unit["held"] = unit["pushed"] = False
                    unit["done"] = 0
            else:
                self._rebind(g)
                g.flat_grads.zero_()

    def synchronize_gradients(self):
        """The mean over ranks of this step's gradients, per parameter (a copy; nothing applied)."""
        if self.strategy == "fsdp":
            raise ValueError("synchronize_gradients (and clip_grad_norm_) is not available with "
                             "fsdp: its units' gradients are pushed and freed during backward")
        out = []
        for g in self._groups:
            self._collect_grads(g)
            if g.staging is not None:
                g.staging.wait()
            mean = torch.from_numpy(self._worker(g).synchronize_gradients())
            for p, (b, e) in zip(g.params, g.ranges):
                out.append(mean[b:e].view(p.shape).clone().to(p.device))
        return out

    def should_early_stop(self, metric):
        """Reports this rank's metric; the job-wide decision, the same on every rank."""
        return self._groups[0].worker.report_metric(float(metric))

    def request_checkpoint(self):
        """Asks the shard servers to snapshot every group at the next step (zero1, zero2)."""
        for g in self._groups:
            self._worker(g).request_checkpoint()

    def state_dict(self):
        """The whole training state (parameters, optimizer state, step) of every group,
        and the loss scaler's: portable across world sizes, shard counts and strategies."""
        state = {"tessel": 1, "groups": [self._worker(g).serialize() for g in self._groups]}
        if self._scale is not None:
            state["scaler"] = {"scale": self._scale, "good_steps": self._good_steps,
                               "skipped_steps": self.skipped_steps}
        return state

    def load_state_dict(self, state):
        if not isinstance(state, dict) or state.get("tessel") != 1:
            raise ValueError("not a tessel.torch DistributedOptimizer state_dict")
        blobs = state["groups"]
        if len(blobs) != len(self._groups):
            raise ValueError(f"the state has {len(blobs)} parameter group(s), this optimizer "
                             f"{len(self._groups)}")
        scaler = state.get("scaler")
        if scaler is not None and self._scale is not None:
            scale = float(scaler["scale"])
            if not (np.isfinite(scale) and scale > 0):
                raise ValueError(f"the state's loss scale {scale} is not a finite number > 0")
        for g, blob in zip(self._groups, blobs):
            self._worker(g).deserialize(blob)
            if self.strategy == "fsdp":
                for u, unit in enumerate(g.units):  # gathered before the load: stale
                    if unit["held"]:
                        self._empty_params(g, unit["members"])
                        unit.pop("grads", None)
                        unit.pop("host_grads", None)
                        g.worker.release(u)
                        unit["held"] = False
            else:
                self._rebind(g)
        if scaler is not None and self._scale is not None:
            self._scale = float(scaler["scale"])
            self._good_steps = int(scaler["good_steps"])
            self.skipped_steps = int(scaler["skipped_steps"])

    @property
    def workers(self):
        return [g.worker for g in self._groups]
