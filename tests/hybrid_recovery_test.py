#!/usr/bin/env python3
"""Hybrid DP x TP x PP jobs survive a shard server's death and a worker
process's (a replacement rejoins the running job).

Each scenario runs a hybrid job (real processes: a registry, 2 shard servers
sharing a checkpoint directory, dp*tp*pp tessel-hybrid-train processes) twice:
once clean, once with shard server 1 killed (-9) mid-training and restarted
with the same --shard and --checkpoint_dir, as Kubernetes would. Every
process must notice, roll its partition back to the newest step whose
checkpoint is complete in every partition job, and go on; the final
parameters (gathered by rank 0) must equal the clean run's bit for bit, and
every process must report the same rollback step. When a worker process is
killed instead and a replacement is started with --resume, the others
welcome it, everyone rolls back to a common checkpoint, and the job ends
bitwise as the clean run. When none replaces it, the others give up after
the recovery timeout, and the whole job restarted with --resume ends
bitwise as the clean run too. When the dying process leaves a survivor's
shared-memory mesh queue wedged (ucx_crash_sender, a real process that faults
inside UCX's copy into that queue, makes the moment a kill -9 mid-send leaves
behind deterministic), that survivor renews its mesh endpoint in place and
the others reconnect to it: still bitwise as the clean run.

Usage: hybrid_recovery_test.py REGISTRY SERVER HYBRID_TRAIN TESSELCTL CRASH_SENDER
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from proc_util import check, cleanup, crash_into, failures, log, spawn, start_registry

REGISTRY, SERVER, TRAIN, CTL, CRASH = sys.argv[1:6]
ROOT = tempfile.mkdtemp(prefix="hybrid-recovery-", dir=os.environ.get("TEST_TMPDIR"))
# Long enough that a process starved by a loaded machine (sanitizer builds,
# parallel tests) keeps its lease; a killed server's successor joins once the
# dead one's has lapsed.
LEASE_MS = 3000
STEPS = 1500


def tail(path, n=10):
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f if "UCX  WARN" not in l]
        return lines[-n:]
    except FileNotFoundError:
        return []


class Cluster:
    def __init__(self, d, auth=False):
        self.d = d
        # auth: the servers authenticate data-path frames, and so the hybrid
        # processes their mesh, with a key from shard server 0.
        self.auth = auth
        os.makedirs(d)
        _, self.reg = start_registry(REGISTRY, d, LEASE_MS)
        self.ckdir = os.path.join(d, "checkpoints")
        self.servers = {s: self.start_server(s) for s in range(2)}
        time.sleep(0.5)

    def start_server(self, s):
        return spawn([SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                      "--ucx_tls=posix,sysv,self", "--lease_ttl_ms=%d" % LEASE_MS,
                      "--checkpoint_dir=" + self.ckdir, "--update_threads=2",
                      "--data_auth=" + ("on" if self.auth else "off")],
                     os.path.join(self.d, "server%d.log" % s))

    def start_rank(self, job, shape, extra, r, log_path):
        dp, tp, pp = shape
        return spawn([TRAIN, "--registry=" + self.reg, "--job=" + job, "--rank=%d" % r,
                      "--world=%d" % (dp * tp * pp), "--dp=%d" % dp, "--tp=%d" % tp,
                      "--pp=%d" % pp, "--servers=2", "--steps=%d" % STEPS,
                      "--layers=16,64,64,4", "--batch=16", "--samples=1024",
                      "--micro_batches=2", "--log_every=100",
                      "--ucx_tls=posix,sysv,self", "--lease_ttl_ms=%d" % LEASE_MS,
                      "--checkpoint_every_steps=25", "--checkpoint_initial",
                      "--recovery_timeout_s=30", "--step_timeout_s=60",
                      "--out=" + os.path.join(self.d, job + ".npy")] + extra, log_path)

    def start_job(self, job, shape, extra):
        dp, tp, pp = shape
        world = dp * tp * pp
        self.logs = [os.path.join(self.d, "%s.rank%d.log" % (job, r)) for r in range(world)]
        self.workers = [self.start_rank(job, shape, extra, r, self.logs[r]) for r in range(world)]

    def wait_job(self, timeout):
        end = time.time() + timeout
        rcs = []
        for p in self.workers:
            try:
                rcs.append(p.wait(timeout=max(0.1, end - time.time())))
            except subprocess.TimeoutExpired:
                rcs.append("timeout")
        return rcs

    def show(self):
        for f in sorted(os.listdir(self.d)):
            if f.endswith(".log"):
                log("    --- " + f)
                for line in tail(os.path.join(self.d, f)):
                    log("    " + line.rstrip()[:300])


def complete_everywhere(ckdir, job, partitions, at_least):
    """Every partition job has a complete checkpoint (manifest) of a step >= at_least."""
    for part in partitions:
        pdir = os.path.join(ckdir, "%s.%s" % (job, part))
        steps = [int(n.split("-")[1]) for n in os.listdir(pdir)
                 if n.startswith("step-") and os.path.exists(os.path.join(pdir, n, "MANIFEST.json"))
                 ] if os.path.isdir(pdir) else []
        if not steps or max(steps) < at_least:
            return False
    return True


_clean = {}


def clean_run(name, shape, extra):
    """The same job without a fault, on a cluster of its own (a server's
    checkpoint writer may still be busy with a finished job's backlog):
    rank 0's final parameters, or None (a failed check). Once per job."""
    key = (shape, tuple(extra))
    if key not in _clean:
        _clean[key] = clean_run_once(name, shape, extra)
    return _clean[key]


def clean_run_once(name, shape, extra):
    clean = Cluster(os.path.join(ROOT, name + "-clean"))
    clean.start_job("job", shape, extra)
    rcs = clean.wait_job(180)
    ok = check(rcs == [0] * len(rcs), "%s: clean run finishes (exit codes %s)" % (name, rcs))
    if not ok:
        clean.show()
    cleanup()
    return open(os.path.join(clean.d, "job.npy"), "rb").read() if ok else None


def wait_for_training(name, c, job, shape):
    """Until training is well under way (step 200) and every partition has a
    checkpoint to go back to; False (a failed check) if the job ended first."""
    dp, tp, pp = shape
    partitions = ["p%d.t%d" % (p, t) for p in range(pp) for t in range(tp)]
    def step_now():
        done = re.findall(r"step +(\d+)/", "".join(tail(c.logs[0], 50)))
        return int(done[-1]) if done else 0
    end = time.time() + 60
    while time.time() < end and not (step_now() >= 200 and
                                     complete_everywhere(c.ckdir, job, partitions, 50)):
        time.sleep(0.01)
    if check(all(p.poll() is None for p in c.workers) and step_now() < STEPS,
             "%s: the fault lands while training (at step %d of %d)" % (name, step_now(), STEPS)):
        return True
    c.show()
    cleanup()
    return False


def same_step_and_bits(name, paths, pattern, npy, reference, who):
    """Every log in `paths` names the same checkpoint step (the last match of
    `pattern`), and `npy` holds exactly `reference`."""
    steps = set()
    for path in paths:
        m = re.findall(pattern, open(path, errors="replace").read())
        steps.add(m[-1] if m else None)
    ok = check(len(steps) == 1 and None not in steps,
               "%s: %s (steps %s)" % (name, who, sorted(str(x) for x in steps)))
    same = os.path.exists(npy) and open(npy, "rb").read() == reference
    return check(same, "%s: final parameters bitwise equal to the clean run" % name) and ok


def mesh_keyed(name, c, paths):
    """With c.auth, every process authenticated its mesh and dropped no
    message of its own job."""
    if not c.auth:
        return True
    texts = [open(p, errors="replace").read() for p in paths]
    return check(all("worker-to-worker messages authenticated" in t for t in texts) and
                 not any("dropping an unauthenticated" in t for t in texts),
                 "%s: every process's mesh is authenticated, no message of the job dropped" % name)


def scenario(name, shape, extra, shard=1, auth=False, then_replace=None):
    """Shard server `shard` killed (-9) and restarted. With then_replace, once
    every process recovered, worker `then_replace` is killed too and a
    replacement started: with auth it gets the mesh's key from a shard 0 that
    was restarted, which the survivors handed the key back to."""
    reference = clean_run(name, shape, extra)
    if reference is None:
        return
    d = os.path.join(ROOT, name)
    c = Cluster(d, auth)
    c.start_job("fault", shape, extra)
    # Kill the shard server once training is well under way and every partition
    # has a checkpoint to go back to.
    if not wait_for_training(name, c, "fault", shape):
        return
    t0 = time.time()
    c.servers[shard].send_signal(signal.SIGKILL)
    c.servers[shard].wait()
    time.sleep(0.5)
    c.servers[shard] = c.start_server(shard)
    logs = list(c.logs)
    pattern = r"every partition rolled back from step \d+ to the checkpoint of step (\d+)"
    if then_replace is not None:
        end = time.time() + 90
        while time.time() < end and not all(
                "recovered in" in open(l, errors="replace").read() for l in c.logs):
            time.sleep(0.05)
        if not check(all("recovered in" in open(l, errors="replace").read() for l in c.logs),
                     "%s: every process recovered from shard server %d's death" % (name, shard)):
            c.show()
            cleanup()
            return
        c.workers[then_replace].send_signal(signal.SIGKILL)
        c.workers[then_replace].wait()
        time.sleep(0.5)
        replacement_log = os.path.join(d, "fault.rank%d.replacement.log" % then_replace)
        c.workers[then_replace] = c.start_rank("fault", shape, extra + ["--resume"], then_replace,
                                               replacement_log)
        logs = [l for r, l in enumerate(c.logs) if r != then_replace] + [replacement_log]
        pattern = (r"(?:rolled back from step \d+ to the checkpoint of step|resumes from the "
                   r"checkpoint of step) (\d+)")
    rcs = c.wait_job(180)
    elapsed = time.time() - t0
    ok = check(rcs == [0] * len(rcs),
               "%s: every process recovers and finishes after kill -9 of shard server %d%s "
               "(exit codes %s, %.1f s after the kill)" %
               (name, shard, "" if then_replace is None else
                " and then of rank %d (replaced)" % then_replace, rcs, elapsed))
    ok &= same_step_and_bits(name, logs, pattern, os.path.join(d, "fault.npy"), reference,
                             "every process rolled back to the same checkpoint")
    ok &= mesh_keyed(name, c, logs)
    if not ok:
        c.show()
    cleanup()


def worker_replaced(name, shape, extra, victim, auth=False, wedge=None):
    """A worker process dies and a replacement (--resume) joins: the others
    pause, welcome it, and every partition rolls back to a common checkpoint;
    bitwise as the clean run. With `wedge`, that rank's mesh receive queue is
    wedged just before (a writer died inside a send into it): it renews its
    endpoint during the recovery, the others reconnect."""
    reference = clean_run(name, shape, extra)
    if reference is None:
        return
    d = os.path.join(ROOT, name)
    c = Cluster(d, auth)
    c.start_job("job", shape, extra)
    if not wait_for_training(name, c, "job", shape):
        return
    if wedge is not None:
        _, died = crash_into(CRASH, CTL, c.reg, "job.mesh", "worker", wedge)
        if not check(died, "%s: a writer died inside a send into rank %d's mesh queue" %
                     (name, wedge)):
            c.show()
            cleanup()
            return
    t0 = time.time()
    c.workers[victim].send_signal(signal.SIGKILL)
    c.workers[victim].wait()
    time.sleep(0.5)
    replacement_log = os.path.join(d, "job.rank%d.replacement.log" % victim)
    c.workers[victim] = c.start_rank("job", shape, extra + ["--resume"], victim, replacement_log)
    rcs = c.wait_job(180)
    elapsed = time.time() - t0
    ok = check(rcs == [0] * len(rcs),
               "%s: the survivors and the replacement of rank %d finish (exit codes %s, %.1f s "
               "after the kill)" % (name, victim, rcs, elapsed))
    text = open(replacement_log, errors="replace").read()
    ok &= check("joins the running job as a replacement" in text,
                "%s: the replacement is welcomed into the running job" % name)
    ok &= same_step_and_bits(
        name, [l for r, l in enumerate(c.logs) if r != victim] + [replacement_log],
        r"(?:rolled back from step \d+ to the checkpoint of step|resumes from the checkpoint of "
        r"step) (\d+)", os.path.join(d, "job.npy"), reference,
        "survivors and the replacement agree on the checkpoint")
    ok &= mesh_keyed(name, c, [l for r, l in enumerate(c.logs) if r != victim] + [replacement_log])
    if wedge is not None:
        said = open(c.logs[wedge], errors="replace").read()
        ok &= check("receive queue is wedged" in said and "mesh endpoint renewed (1 so far)" in said,
                    "%s: rank %d found its mesh queue wedged and renewed the endpoint in place" %
                    (name, wedge))
        others = [l for r, l in enumerate(c.logs) if r not in (victim, wedge)] + [replacement_log]
        ok &= check(all("renewed its mesh endpoint" in open(l, errors="replace").read()
                        for l in others),
                    "%s: every other process reconnected to its new address (%d recovery "
                    "round(s) run again as the view moved)" %
                    (name, sum(open(l, errors="replace").read().count("again with its next view")
                               for l in others + [c.logs[wedge]])))
    if not ok:
        c.show()
        for line in tail(replacement_log, 15):
            log("    " + line.rstrip()[:300])
    cleanup()


def two_replaced(name, shape, extra, first, second, late=0.0):
    """Two worker processes die one after the other, the second while the
    others are still recovering from the first (its replacement already
    started): the survivors' recovery runs another round with the new
    membership instead of failing, welcomes both replacements, and every
    partition rolls back together; bitwise as the clean run. With `late`,
    the second replacement starts that many seconds after the second death
    (a restart back-off longer than the first replacement's wait for a first
    welcome): the first sees the mesh move and keeps waiting."""
    reference = clean_run(name, shape, extra)
    if reference is None:
        return
    d = os.path.join(ROOT, name)
    c = Cluster(d)
    c.start_job("job", shape, extra)
    if not wait_for_training(name, c, "job", shape):
        return
    t0 = time.time()
    replacement_logs = {}
    for victim, pause in ((first, 0.5), (second, 0.5 + late)):
        c.workers[victim].send_signal(signal.SIGKILL)
        c.workers[victim].wait()
        time.sleep(pause)
        replacement_logs[victim] = os.path.join(d, "job.rank%d.replacement.log" % victim)
        c.workers[victim] = c.start_rank("job", shape, extra + ["--resume"], victim,
                                         replacement_logs[victim])
        time.sleep(1.0)  # the second dies while the first's replacement is joining
    rcs = c.wait_job(180)
    elapsed = time.time() - t0
    ok = check(rcs == [0] * len(rcs),
               "%s: the survivors and the replacements of ranks %d and %d finish (exit codes %s, "
               "%.1f s after the first kill)" % (name, first, second, rcs, elapsed))
    ok &= check(all("joins the running job as a replacement" in open(l, errors="replace").read()
                    for l in replacement_logs.values()),
                "%s: both replacements are welcomed into the running job (%d recovery round(s) "
                "run again as the membership moved; %d replacement(s) kept waiting as the mesh "
                "moved)" %
                (name, sum(open(l, errors="replace").read().count("again with its next view")
                           for r, l in enumerate(c.logs) if r not in replacement_logs),
                 sum("changed while it waited for a welcome" in open(l, errors="replace").read()
                     for l in replacement_logs.values())))
    logs = [l for r, l in enumerate(c.logs) if r not in replacement_logs] + \
        list(replacement_logs.values())
    ok &= same_step_and_bits(
        name, logs,
        r"(?:rolled back from step \d+ to the checkpoint of step|resumes from the checkpoint of "
        r"step) (\d+)", os.path.join(d, "job.npy"), reference,
        "survivors and both replacements agree on the checkpoint")
    if not ok:
        c.show()
        for l in replacement_logs.values():
            for line in tail(l, 15):
                log("    " + line.rstrip()[:300])
    cleanup()


def whole_restart(name, shape, extra):
    """A worker process dies and none replaces it: the others give up after
    the recovery timeout, naming it; every process restarted with --resume
    goes on from the newest checkpoint complete in every partition, bitwise
    as the clean run. (A process killed mid-send may have wedged a shard
    server's receive queue: the server renews its endpoint on its own.)"""
    reference = clean_run(name, shape, extra)
    if reference is None:
        return
    d = os.path.join(ROOT, name)
    c = Cluster(d)
    c.start_job("job", shape, extra + ["--recovery_timeout_s=4"])
    if not wait_for_training(name, c, "job", shape):
        return
    t0 = time.time()
    c.workers[1].send_signal(signal.SIGKILL)
    rcs = c.wait_job(60)
    elapsed = time.time() - t0
    others = [rc for r, rc in enumerate(rcs) if r != 1]
    ok = check(all(rc not in (0, "timeout") for rc in others) and elapsed < 30,
               "%s: the others stop, non-zero, %.1f s after kill -9 of rank 1 (exit codes %s)" %
               (name, elapsed, rcs))
    said = all("--resume" in "".join(tail(c.logs[r], 30)) for r in range(len(rcs)) if r != 1)
    ok &= check(said, "%s: each says to restart with --resume" % name)
    for log_path in c.logs:
        os.rename(log_path, log_path + ".first")
    time.sleep(LEASE_MS / 1000.0 + 0.5)  # rank 1's membership lapses
    c.start_job("job", shape, extra + ["--resume"])
    rcs = c.wait_job(180)
    ok &= check(rcs == [0] * len(rcs), "%s: the job restarted with --resume finishes (exit codes "
                "%s)" % (name, rcs))
    ok &= same_step_and_bits(
        name, c.logs, r"every partition resumes from the checkpoint of step (\d+)",
        os.path.join(d, "job.npy"), reference, "every process resumed from the same checkpoint")
    if not ok:
        c.show()
    cleanup()


def main():
    # TESSEL_HYBRID_SCENARIOS: a comma-separated subset of the names below
    # (the sanitizer build runs two); default all.
    chosen = os.environ.get("TESSEL_HYBRID_SCENARIOS", "")
    chosen = set(chosen.split(",")) if chosen else None
    scenarios = [
        # Two data-parallel replicas of a two-stage pipeline (zero2, fp32).
        ("dp2-pp2", lambda n: scenario(n, (2, 1, 2), [])),
        # Tensor parallelism and pipeline, zero1 in bf16; servers and mesh
        # authenticated. Shard server 0 (the mesh key's source) dies, then a
        # worker: its replacement gets the running mesh's key.
        ("tp2-pp2-bf16-auth", lambda n: scenario(n, (1, 2, 2),
                                                 ["--strategy=zero1", "--precision=bf16"],
                                                 shard=0, auth=True, then_replace=1)),
        # A worker process dies: a replacement rejoins the running job.
        ("dp2-pp2-replace-1", lambda n: worker_replaced(n, (2, 1, 2), [], 1)),
        # Rank 0 (which coordinates the agreement on the checkpoint) replaced.
        ("tp2-pp2-bf16-replace-0", lambda n: worker_replaced(
            n, (1, 2, 2), ["--strategy=zero1", "--precision=bf16"], 0, auth=True)),
        # Rank 0 replaced while rank 2's mesh queue is wedged (as when rank 0
        # dies mid-send into it): rank 2 renews its endpoint in place.
        ("tp2-pp2-wedge", lambda n: worker_replaced(
            n, (1, 2, 2), ["--strategy=zero1", "--precision=bf16"], 0, auth=True, wedge=2)),
        # Rank 1 dies, then rank 2 while the others recover from the first:
        # one recovery, another round, both replacements welcomed.
        ("dp2-pp2-replace-1-2", lambda n: two_replaced(n, (2, 1, 2), [], 1, 2)),
        # The same with the second replacement 8 s late (longer than the
        # first's wait for a first welcome): the first keeps waiting.
        ("dp2-pp2-replace-1-2-late", lambda n: two_replaced(n, (2, 1, 2), [], 1, 2, late=8.0)),
        # Every process gone (one killed, the others gave up): a whole restart.
        ("dp2-pp2-restart", lambda n: whole_restart(n, (2, 1, 2), [])),
    ]
    unknown = (chosen or set()) - {n for n, _ in scenarios}
    if unknown:
        log("FAIL: unknown scenario(s) %s; known: %s"
            % (sorted(unknown), ", ".join(n for n, _ in scenarios)))
        return 2
    try:
        for name, run in scenarios:
            if chosen is None or name in chosen:
                run(name)
    finally:
        cleanup()
    if failures:
        log("FAIL: %d check(s) failed; logs under %s" % (len(failures), ROOT))
        return 1
    shutil.rmtree(ROOT, ignore_errors=True)
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
