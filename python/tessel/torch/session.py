"""Session: where this process takes part in training, and the optimizers it opened.

Contract. A Session holds what tessel.torch's module-level functions used to
keep in globals: the configuration init() resolved (registry, job, rank,
world size, servers, transports, token, timeouts, where to serve metrics and
write a timeline) and the
DistributedOptimizers made under it, so that shutdown() can close them.
`init()`, `rank()`, `size()` and `shutdown()` of tessel.torch act on one
default session (`default_session()`); shutdown() leaves it as new (not
initialized, no optimizers), so init() may be called again. Other sessions
can be made and passed as `DistributedOptimizer(..., session=s)`.

The default session is this module's one global, on purpose: a training
script says `tt.init()` once and every DistributedOptimizer, SyncBatchNorm
and tensor-parallel layer made without `session=` finds it, as
torch.distributed's init_process_group()/destroy_process_group() keep one
default process group per process. Everything else lives in Session objects.
Tests reset it with `reset_default_session()` (a fresh Session in its place,
nothing of the old one closed: for a test that failed half way, or one that
must start from a new default), or install their own by patching
`default_session`.

Threads: not thread-safe; use a session from the thread that trains.

Example:
    s = Session()
    s.init(registry="127.0.0.1:5000", job="mlp", rank=0, world_size=1)
    s.rank(), s.size()        # 0, 1
    s.shutdown()              # closes its optimizers; s.config raises again
"""
import os

from tessel.torch.hybrid_mesh import HybridMesh


class Session:
    """One process's place in a training job (see the module's docs)."""

    def __init__(self):
        self._config = None
        self._optimizers = []
        self._hybrid = None  # hybrid_mesh.py's HybridMesh, with tensor/pipeline_parallel

    def __deepcopy__(self, memo):
        # A process's handle, shared by a model's copies (copy.deepcopy of a model
        # with tensor-parallel layers keeps them on this session).
        return self

    def init(self, registry=None, job=None, rank=None, world_size=None, num_servers=None,
             ucx_tls=None, token=None, connect_timeout_s=60.0, step_timeout_s=120.0,
             metrics_address=None, timeline=None, tensor_parallel=None,
             pipeline_parallel=None, mesh=None):
        """Where this process takes part: arguments, else the environment tessel-launch
        sets. Returns a copy of the configuration.

        tensor_parallel=T, pipeline_parallel=P (either given: a hybrid job,
        tessel.torch.parallel): the world_size processes form dp = world_size / (T*P)
        replicas of P pipeline stages of T tensor ranks each, numbered as
        worker/hybrid.h does (tensor rank = rank % T, stage = (rank / T) % P, replica =
        rank / (T*P)); init joins the job's worker-to-worker mesh and waits for every
        process (each must give the same T and P). ValueError if T*P does not divide
        world_size.

        metrics_address ($TESSEL_METRICS_ADDRESS; '' = off): HOST:PORT where each
        DistributedOptimizer's first worker serves Prometheus metrics (port 0: a free
        one; ranks on one host need port 0 or ports of their own). timeline
        ($TESSEL_TIMELINE; '' = off): a Chrome-trace path per rank, '{rank}' replaced by
        the rank (required when world_size > 1, so ranks on one host do not share a
        file); parameter group g > 0 writes PATH.g<g>.

        mesh (a hybrid job only; tests): an object with tessel.Mesh's interface used
        instead of joining the job's mesh, e.g. tests/fakes.py's in-process MeshWorld."""

        def pick(value, env, kind, default=None):
            if value is not None:
                return value
            raw = os.environ.get(env)
            if raw is None or raw == "":
                if default is None:
                    raise ValueError(f"tessel.torch.init: no {env.lower().replace('tessel_', '')} "
                                     f"given and ${env} is not set (run under tessel-launch, or "
                                     f"pass it)")
                return default
            try:
                return kind(raw)
            except ValueError:
                raise ValueError(f"tessel.torch.init: ${env}={raw!r} is not a "
                                 f"{kind.__name__}") from None

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
            metrics_address=pick(metrics_address, "TESSEL_METRICS_ADDRESS", str, ""),
            timeline=pick(timeline, "TESSEL_TIMELINE", str, ""),
        )
        if cfg["world_size"] < 1:
            raise ValueError(f"tessel.torch.init: world_size must be >= 1, got {cfg['world_size']}")
        if not 0 <= cfg["rank"] < cfg["world_size"]:
            raise ValueError(f"tessel.torch.init: rank {cfg['rank']} is outside "
                             f"[0, {cfg['world_size']})")
        if cfg["timeline"] and cfg["world_size"] > 1 and "{rank}" not in cfg["timeline"]:
            raise ValueError(f"tessel.torch.init: timeline {cfg['timeline']!r} has no '{{rank}}': "
                             f"with {cfg['world_size']} ranks each needs a file of its own")
        if self._hybrid is not None:
            raise RuntimeError("tessel.torch.init: this session already joined a hybrid job's "
                               "mesh; call shutdown() first")
        if mesh is not None and tensor_parallel is None and pipeline_parallel is None:
            raise ValueError("tessel.torch.init: mesh= is for a hybrid job: give "
                             "tensor_parallel or pipeline_parallel too")
        if tensor_parallel is not None or pipeline_parallel is not None:
            self._hybrid = HybridMesh(cfg, 1 if tensor_parallel is None else tensor_parallel,
                                      1 if pipeline_parallel is None else pipeline_parallel,
                                      mesh=mesh)
            cfg["tensor_parallel"], cfg["pipeline_parallel"] = self._hybrid.tp, self._hybrid.pp
        self._config = cfg
        return dict(cfg)

    @property
    def hybrid(self):
        """The hybrid job's mesh (hybrid_mesh.py's HybridMesh), or None when init() was
        not given tensor_parallel or pipeline_parallel."""
        return self._hybrid

    @property
    def initialized(self):
        return self._config is not None

    @property
    def config(self):
        """The configuration init() resolved (RuntimeError before init())."""
        if self._config is None:
            raise RuntimeError("call tessel.torch.init() first")
        return self._config

    def rank(self):
        return self.config["rank"]

    def size(self):
        return self.config["world_size"]

    def adopt(self, optimizer):
        """Records an optimizer made under this session; shutdown() closes it."""
        self._optimizers.append(optimizer)

    def shutdown(self):
        """Closes every optimizer made under the session (last made, first closed) and
        forgets the configuration. A hybrid job's processes first meet (every process
        got here, every message left), then leave the mesh."""
        hybrid, self._hybrid = self._hybrid, None
        try:
            if hybrid is not None:
                hybrid.finish()
        finally:
            while self._optimizers:
                self._optimizers.pop().close()
            if hybrid is not None:
                hybrid.close()
            self._config = None


_DEFAULT = Session()


def default_session():
    """The session tessel.torch's init(), rank(), size() and shutdown() act on."""
    return _DEFAULT


def reset_default_session():
    """Tests: puts a new, uninitialized Session in the default session's place and
    returns the old one, unclosed (shutdown() is the way to leave a job; this only
    forgets it). Objects that already hold the old session keep it."""
    global _DEFAULT
    old, _DEFAULT = _DEFAULT, Session()
    return old


def init(registry=None, job=None, rank=None, world_size=None, num_servers=None, ucx_tls=None,
         token=None, connect_timeout_s=60.0, step_timeout_s=120.0, metrics_address=None,
         timeline=None, tensor_parallel=None, pipeline_parallel=None):
    """Where this process takes part: arguments, else the environment tessel-launch sets
    (Session.init's docs; tensor_parallel and pipeline_parallel make it a hybrid job,
    tessel.torch.parallel)."""
    return _DEFAULT.init(registry=registry, job=job, rank=rank, world_size=world_size,
                         num_servers=num_servers, ucx_tls=ucx_tls, token=token,
                         connect_timeout_s=connect_timeout_s, step_timeout_s=step_timeout_s,
                         metrics_address=metrics_address, timeline=timeline,
                         tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel)


def rank():
    return _DEFAULT.rank()


def size():
    return _DEFAULT.size()


def shutdown():
    """Leaves every job this process joined; the models keep their last values."""
    _DEFAULT.shutdown()


def observe_options(cfg, index):
    """The worker options of parameter group `index` for the session's metrics and
    timeline: the first group's worker serves the metrics (the process's whole
    registry); group g > 0 writes its timeline beside group 0's, as PATH.g<g>."""
    timeline = cfg.get("timeline", "")
    if timeline and index > 0:
        root, ext = os.path.splitext(timeline)
        timeline = f"{root}.g{index}{ext}"
    return dict(metrics_address=cfg.get("metrics_address", "") if index == 0 else "",
                timeline=timeline)
