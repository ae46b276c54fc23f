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

Threads: not thread-safe; use a session from the thread that trains.

Example:
    s = Session()
    s.init(registry="127.0.0.1:5000", job="mlp", rank=0, world_size=1)
    s.rank(), s.size()        # 0, 1
    s.shutdown()              # closes its optimizers; s.config raises again
"""
import os


class Session:
    """One process's place in a training job (see the module's docs)."""

    def __init__(self):
        self._config = None
        self._optimizers = []

    def init(self, registry=None, job=None, rank=None, world_size=None, num_servers=None,
             ucx_tls=None, token=None, connect_timeout_s=60.0, step_timeout_s=120.0,
             metrics_address=None, timeline=None):
        """Where this process takes part: arguments, else the environment tessel-launch
        sets. Returns a copy of the configuration.

        metrics_address ($TESSEL_METRICS_ADDRESS; '' = off): HOST:PORT where each
        DistributedOptimizer's first worker serves Prometheus metrics (port 0: a free
        one; ranks on one host need port 0 or ports of their own). timeline
        ($TESSEL_TIMELINE; '' = off): a Chrome-trace path per rank, '{rank}' replaced by
        the rank (required when world_size > 1, so ranks on one host do not share a
        file); parameter group g > 0 writes PATH.g<g>."""

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
        self._config = cfg
        return dict(cfg)

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
        forgets the configuration."""
        while self._optimizers:
            self._optimizers.pop().close()
        self._config = None


_DEFAULT = Session()


def default_session():
    """The session tessel.torch's init(), rank(), size() and shutdown() act on."""
    return _DEFAULT


def init(registry=None, job=None, rank=None, world_size=None, num_servers=None, ucx_tls=None,
         token=None, connect_timeout_s=60.0, step_timeout_s=120.0, metrics_address=None,
         timeline=None):
    """Where this process takes part: arguments, else the environment tessel-launch sets
    (Session.init's docs)."""
    return _DEFAULT.init(registry=registry, job=job, rank=rank, world_size=world_size,
                         num_servers=num_servers, ucx_tls=ucx_tls, token=token,
                         connect_timeout_s=connect_timeout_s, step_timeout_s=step_timeout_s,
                         metrics_address=metrics_address, timeline=timeline)


def rank():
    return _DEFAULT.rank()


def size():
    return _DEFAULT.size()


def shutdown():
    """Leaves every job this process joined; the models keep their last values."""
    _DEFAULT.shutdown()
