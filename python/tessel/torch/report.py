"""The last step's report and the straggler warning in the user's process
(docs/observability.md, "Stragglers and stalls"; docs/python.md).

Contract. DistributedOptimizer.step is wrapped by timed_step, which times the
step from the outside, so nothing inside it changes: the caller's part is the
time since the previous step() returned plus the closure's (forward, backward,
data loading); Tessel's part is the rest of step(), which the workers break
into push, wait, pull and update (worker.last_step_phases(), summed over the
parameter groups' jobs), the remainder being "other" (collecting gradients,
the step's job-wide agreement, buffers). Compute therefore holds the
autograd hooks' hand-over of each gradient range (an asynchronous send, the
step's pushes overlapping backward). opt.last_step_report() builds the
StepReport when asked (the workers keep their last step's phases until the
next step), so a step pays only for its clock reads. After a step, at most
every POLL_S, the StepClock compares the ranks the shard servers name
stragglers now (worker.stragglers(), heard with the registry's heartbeat
answer, about once a second) with those it saw before (a step that raised
leaves the last report): a rank newly named gives one StragglerWarning on
rank 0 and one on that rank itself ("this rank (3) is the job's straggler:
..."), and one more each when the servers no longer name it; nothing is
repeated per step. A report or warning never makes step() fail: a closed
worker gives no report (None) and no warning.

Threads: the training thread's.

Example:
    opt.step()
    r = opt.last_step_report()
    print(r)          # StepReport(step 14, rank 2: compute 0.301 s, push ...)
    if r.slowest: print(r.slowest.rank, r.slowest.score)
"""
import collections
import dataclasses
import functools
import statistics
import time
import warnings
from typing import Optional, Tuple

# Steps whose compute decides a rank's own "computing" / "pushing and pulling".
PHASE_WINDOW = 8
# Seconds between two looks at the stragglers the servers name (after a step): the
# registry's answer that brings them comes about once a second.
POLL_S = 0.2


class StragglerWarning(UserWarning):
    """The shard servers started (or stopped) naming a rank of this job a straggler."""


@dataclasses.dataclass(frozen=True)
class Straggler:
    """A rank the shard servers name a straggler: its data-parallel rank, score (its
    median step time over the median rank's; 1.0 = the median's pace), lateness (its
    median last push after the first rank's, seconds), and its process as the
    registry lists it (host "" and pid 0 when it no longer does)."""
    rank: int
    score: float
    lateness: float
    host: str
    pid: int
    registry_rank: int
    shard: int

    @classmethod
    def from_worker(cls, d):
        return cls(rank=int(d["rank"]), score=float(d["score"]), lateness=float(d["lateness"]),
                   host=str(d["host"]), pid=int(d["pid"]), registry_rank=int(d["registry_rank"]),
                   shard=int(d["shard"]))

    def where(self):
        return f"host {self.host} pid {self.pid}" if self.host else "no longer registered"

    def __str__(self):
        return (f"rank {self.rank} ({self.where()}): {self.score:.2f}x the median rank's step, "
                f"its last push {self.lateness:.3f} s after the first rank's")


@dataclasses.dataclass(frozen=True)
class StepReport:
    """Where this rank's last step went, in seconds, and the job's slowest rank as the
    shard servers name it (None when they name none). applied is False for a step
    that applied nothing (loss scaling skipped it, or a recovery rolled it back):
    its push, wait, pull and update are then 0."""
    step: int
    rank: int
    applied: bool
    compute: float  # the caller's: since the previous step() returned, plus the closure
    push: float     # handing the last buckets to the transport
    wait: float     # until the first updated bucket came back (the other ranks, the servers)
    pull: float     # receiving the rest
    update: float   # ddp's optimizer update on this rank (0: the servers update, in wait)
    other: float    # the rest of step(): gradients collected, the job-wide agreement, buffers
    slowest: Optional[Straggler]
    stragglers: Tuple[Straggler, ...]

    @property
    def total(self):
        return self.compute + self.push + self.wait + self.pull + self.update + self.other

    def as_dict(self):
        return dataclasses.asdict(self)

    def __repr__(self):
        phases = ", ".join(f"{name} {getattr(self, name):.3f} s" for name in
                           ("compute", "push", "wait", "pull", "update", "other"))
        skipped = "" if self.applied else " (applied nothing)"
        slowest = f"slowest {self.slowest}" if self.slowest else "no straggler named"
        return f"StepReport(step {self.step}, rank {self.rank}{skipped}: {phases}; {slowest})"


def _own_phase(computes, link):
    """'computing' when this rank's median compute over its last steps is at least its
    last step's push + pull (its own link's share), else 'pushing and pulling'."""
    return "computing" if statistics.median(computes) >= link else "pushing and pulling"


def _phases(workers):
    """The workers' last step's push, wait, pull and update, summed (seconds)."""
    phases = dict(push=0.0, wait=0.0, pull=0.0, update=0.0)
    for w in workers:
        got = w.last_step_phases()
        for k in phases:
            phases[k] += got[k]
    return phases


class StepClock:
    """One optimizer's step timing, its last step (the report is built when asked:
    the workers keep their last step's phases until the next step) and the stragglers
    it last saw (looked at after a step at most every POLL_S)."""

    def __init__(self):
        self.prev_end = None      # time.perf_counter() when the last step() returned
        self.prev_step = None     # the workers' step after it
        self.last = None          # (step, applied, compute, tessel s) of the last step
        self.report = None        # its StepReport, once built
        self.named = {}           # rank -> Straggler, as last looked at
        self.polled = None        # time.perf_counter() of that look
        self.computes = collections.deque(maxlen=PHASE_WINDOW)

    def stepped(self, opt, start, end, closure_s):
        workers = opt.workers
        if not workers or workers[0] is None:
            return
        try:
            step = workers[0].current_step
        except ValueError:  # a closed worker: no report
            return
        applied = self.prev_step is None or step == self.prev_step + 1
        compute = closure_s + (start - self.prev_end if self.prev_end is not None else 0.0)
        self.last = (step, applied, compute, (end - start) - closure_s)
        self.report = None
        self.prev_end, self.prev_step = end, step
        if applied:
            self.computes.append(compute)
        if self.polled is None or end - self.polled >= POLL_S:
            self.polled = end
            try:
                self._warn(workers, step, self._look(workers))
            except ValueError:
                pass

    @staticmethod
    def _look(workers):
        return {s.rank: s for s in map(Straggler.from_worker, workers[0].stragglers())}

    def build(self, opt):
        """The last step's StepReport (None before the first step)."""
        if self.report is not None or self.last is None:
            return self.report
        step, applied, compute, tessel_s = self.last
        workers = [w for w in opt.workers if w is not None]
        try:
            rank = workers[0].rank
            phases = _phases(workers) if applied else dict(push=0.0, wait=0.0, pull=0.0,
                                                           update=0.0)
            named = self._look(workers)
        except (ValueError, IndexError):  # closed since: nothing more to say
            return None
        ranked = sorted(named.values(), key=lambda s: (-s.score, s.rank))
        self.report = StepReport(step=step, rank=rank, applied=applied, compute=compute,
                                 other=max(0.0, tessel_s - sum(phases.values())),
                                 slowest=ranked[0] if ranked else None,
                                 stragglers=tuple(named[r] for r in sorted(named)), **phases)
        return self.report

    def _warn(self, workers, step, named):
        """One warning per change, on rank 0 and on the rank named."""
        if named.keys() == self.named.keys():
            self.named = named
            return
        rank = workers[0].rank
        for r, s in sorted(named.items()):
            if r in self.named:
                continue
            if r == rank:
                link = _phases(workers)
                phase = (_own_phase(self.computes, link["push"] + link["pull"])
                         if self.computes else "unknown")
                _say(f"this rank ({r}) is the job's straggler: {s.score:.1f}x the median step "
                     f"(its last push {s.lateness:.3f} s after the first rank's; named by shard "
                     f"{s.shard}); phase {phase} (at step {step})")
            elif rank == 0:
                _say(f"rank {r} is the job's straggler: {s}; named by shard {s.shard} "
                     f"(at step {step})")
        for r, s in sorted(self.named.items()):
            if r in named:
                continue
            who = f"this rank ({r})" if r == rank else f"rank {r}"
            if r == rank or rank == 0:
                _say(f"{who} is no longer the job's straggler (it was {s.score:.1f}x the median "
                     f"step; at step {step})")
        self.named = named


def _say(message):
    # stacklevel: _say, _warn, stepped, the wrapper, the caller's step().
    warnings.warn("tessel: " + message, StragglerWarning, stacklevel=5)


def timed_step(step):
    """Wraps DistributedOptimizer.step (see the module's docs)."""

    @functools.wraps(step)
    def wrapper(opt, closure=None):
        clock = opt.__dict__.get("_step_clock")
        if clock is None:
            clock = opt.__dict__["_step_clock"] = StepClock()
        spent = [0.0]
        timed = closure
        if closure is not None:
            def timed():
                t = time.perf_counter()
                try:
                    return closure()
                finally:
                    spent[0] += time.perf_counter() - t
        start = time.perf_counter()
        try:
            result = step(opt, timed)
        except BaseException:
            clock.prev_end = time.perf_counter()  # no report of a step that failed
            raise
        clock.stepped(opt, start, time.perf_counter(), spent[0])
        return result

    return wrapper


def last_step_report(opt):
    """The optimizer's last StepReport, or None before its first step()."""
    clock = opt.__dict__.get("_step_clock")
    return clock.build(opt) if clock is not None else None
