#!/usr/bin/env python3
"""Elastic continuation: a job that loses a worker goes on with fewer.

Real processes on loopback: tessel-registry, 2 tessel-server shards, and
3 tessel-train workers started with --elastic_min_workers=2. One worker is
killed with SIGKILL and not replaced. The survivors must pause, wait the
grace period for a replacement, then go on from the latest checkpoint as 2
workers, renumbered in their old rank order, and finish the run.

What is checked, per scenario:
  zero2, kill rank 1   the final parameters are bitwise equal to a reference
                       made of a clean 3-worker run to the checkpoint the
                       survivors rolled back to, resumed by 2 workers
                       (--resume --resume_step=C) to the end; so is every
                       step's loss after C. A late replacement for rank 1
                       (--rank=1 --resume) is refused with the reason.
  zero1, kill rank 0   the same, when the lost worker is the first one (the
                       survivors elect the next as the one that restores), with
                       --aggregation=host: the three workers of this host sum
                       their gradients first (rank 0 aggregates a third of the
                       buckets when it dies), the survivors regroup as one host
                       of two, and the result is still the flat reference's.
  ddp, kill rank 2     the survivors (state on the workers) go on at their
                       own step with no rollback and finish.
  zero2, min 2 of 2    with too few workers left the survivor does not go on:
                       it gives up after recovery_timeout, naming
                       elastic_min_workers.

Usage: elastic_test.py REGISTRY SERVER TRAIN
"""
import glob
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

from proc_util import check, cleanup, failures, log, spawn, start_registry

REGISTRY, SERVER, TRAIN = sys.argv[1:4]
ROOT = tempfile.mkdtemp(prefix="elastic-", dir=os.environ.get("TEST_TMPDIR"))
SHARDS, EVERY, STEPS = 2, 5, 400
LEASE_MS = 1500
# No shard server is killed here: a long lease keeps a server starved by a
# loaded machine (sanitizer builds, parallel tests) from being declared dead.
SERVER_LEASE_MS = 6000
MODEL = ["--layers=32,256,256,8", "--samples=4096", "--batch=64", "--optimizer=adam",
         "--lr=0.01", "--ucx_tls=posix,sysv,self", "--log_every=1000000"]


def tail(path, n=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except FileNotFoundError:
        return "(no log)\n"


class Cluster:
    def __init__(self, d, ckdir=None):
        self.d = d
        os.makedirs(d)
        _, self.reg = start_registry(REGISTRY, d, LEASE_MS)
        self.ckdir = ckdir or os.path.join(d, "checkpoints")
        for s in range(SHARDS):
            spawn([SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                   "--ucx_tls=posix,sysv,self", "--lease_ttl_ms=%d" % SERVER_LEASE_MS,
                   "--checkpoint_dir=" + self.ckdir], os.path.join(d, "server%d.log" % s))
        self.workers = {}

    def worker(self, r, world, strategy, extra, tag=""):
        args = [TRAIN, "--registry=" + self.reg, "--job=el", "--rank=%d" % r,
                "--world=%d" % world, "--servers=%d" % SHARDS, "--strategy=" + strategy,
                "--lease_ttl_ms=%d" % LEASE_MS, "--step_timeout_s=60",
                "--out=" + os.path.join(self.d, "final.npy"),
                "--loss_log=" + os.path.join(self.d, "loss.txt")] + MODEL + extra
        if strategy != "ddp":
            args += ["--checkpoint_every_steps=%d" % EVERY, "--checkpoint_initial",
                     "--keep_checkpoints=1000"]
        p = spawn(args, os.path.join(self.d, "worker%d%s.log" % (r, tag)))
        self.workers[r] = p
        return p

    def steps_done(self, r):
        try:
            with open(os.path.join(self.d, "loss.txt.rank%d" % r)) as f:
                lines = [l for l in f.read().split("\n") if l.strip()]
            return int(lines[-1].split()[0]) + 1 if lines else 0
        except (FileNotFoundError, ValueError, IndexError):
            return 0

    def wait(self, ranks, timeout):
        end = time.time() + timeout
        rcs = {}
        for r in ranks:
            try:
                rcs[r] = self.workers[r].wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                rcs[r] = "timeout"
        return rcs

    def show(self):
        for path in sorted(glob.glob(os.path.join(self.d, "*.log"))):
            log("---- %s\n%s" % (path, tail(path)))


def losses(path):
    """{step: loss} keeping the last time each step ran."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    k, v = line.split()
                    out[int(k)] = v
    except FileNotFoundError:
        pass
    return out


def npy_words(path):
    """The 32-bit words of a 1-D float32 .npy file (compared bit for bit)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        return []
    if raw[6] == 1:
        start = 10 + struct.unpack("<H", raw[8:10])[0]
    else:
        start = 12 + struct.unpack("<I", raw[8:12])[0]
    data = raw[start:]
    return struct.unpack("<%dI" % (len(data) // 4), data)


def wait_manifest(ckdir, step, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(os.path.join(ckdir, "el", "step-%010d" % step, "MANIFEST.json")):
            return True
        time.sleep(0.05)
    return False


def elastic_run(name, strategy, kill, world=3, min_workers=2, steps=STEPS, recovery_timeout=30,
                flags=()):
    d = os.path.join(ROOT, name)
    c = Cluster(d)
    extra = ["--steps=%d" % steps, "--recover", "--recovery_timeout_s=%d" % recovery_timeout,
             "--elastic_min_workers=%d" % min_workers, "--elastic_grace_s=1"] + list(flags)
    for r in range(world):
        c.worker(r, world, strategy, extra)
    watch = (kill + 1) % world
    end = time.time() + 60
    while c.steps_done(watch) < 40 and time.time() < end:
        time.sleep(0.01)
    at = c.steps_done(watch)
    c.workers[kill].send_signal(signal.SIGKILL)
    c.workers[kill].wait()
    t0 = time.time()
    log("%s: killed worker %d at about step %d" % (name, kill, at))
    survivors = [r for r in range(world) if r != kill]
    return c, d, survivors, at, t0, extra


def rolled_back_to(path):
    m = re.findall(r"rolled back from step (\d+) to the checkpoint of step (\d+)", open(path).read())
    return int(m[-1][1]) if m else None


def reference(name, strategy, c_step, new_ranks):
    """Clean 3-worker run to c_step, then 2 workers resume from it."""
    d = os.path.join(ROOT, name + "-ref")
    ref = Cluster(d)
    for r in range(3):
        ref.worker(r, 3, strategy, ["--steps=%d" % c_step])
    rcs = ref.wait(range(3), 120)
    if not check(all(v == 0 for v in rcs.values()), "%s: reference 3-worker run to step %d "
                 "exits 0 (%s)" % (name, c_step, rcs)):
        ref.show()
        return None
    if not check(wait_manifest(ref.ckdir, c_step), "%s: reference checkpoint of step %d "
                 "complete" % (name, c_step)):
        return None
    for r in range(2):
        ref.worker(r, 2, strategy, ["--steps=%d" % STEPS, "--resume",
                                    "--resume_step=%d" % c_step], tag="-resumed")
    rcs = ref.wait(range(2), 120)
    if not check(all(v == 0 for v in rcs.values()), "%s: reference 2-worker resume exits 0 (%s)"
                 % (name, rcs)):
        ref.show()
        return None
    return d


def compare(name, d, ref_d, c_step, new_order):
    """new_order[i]: registry rank of the elastic run's new rank i."""
    a = npy_words(os.path.join(d, "final.npy"))
    b = npy_words(os.path.join(ref_d, "final.npy"))
    diff = sum(1 for x, y in zip(a, b) if x != y)
    check(len(a) == len(b) and len(a) > 0 and diff == 0,
          "%s: final parameters bitwise equal to the reference (%d of %d differ)" %
          (name, diff, len(a)))
    n_steps = 0
    same = True
    for i, reg in enumerate(new_order):
        got = losses(os.path.join(d, "loss.txt.rank%d" % reg))
        want = losses(os.path.join(ref_d, "loss.txt.rank%d" % i))
        for k in range(c_step, STEPS):
            n_steps += 1
            if got.get(k) != want.get(k):
                same = False
                log("  step %d new rank %d: loss %s, reference %s" % (k, i, got.get(k), want.get(k)))
                break
    check(same, "%s: the loss of each of the %d (step, rank) pairs after step %d equals the "
          "reference" % (name, n_steps, c_step))


def late_replacement(name, c, d, kill, strategy, extra):
    """A replacement that arrives after the job went on is refused, and the
    survivors are not disturbed."""
    end = time.time() + 60
    while time.time() < end and not all(
            "continues elastically" in open(os.path.join(d, "worker%d.log" % r)).read()
            for r in c.workers if r != kill):
        time.sleep(0.05)
    p = c.worker(kill, 3, strategy, extra + ["--resume"], tag="-late")
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    text = open(os.path.join(d, "worker%d-late.log" % kill)).read()
    check(rc not in (0, "timeout") and "the job went on without this worker" in text,
          "%s: a late replacement for rank %d is refused (exit %s): %s" %
          (name, kill, rc, (re.findall(r"the job went on without this worker[^\n]*", text)
                            or ["no message"])[0][:150]))


def scenario_checkpointed(name, strategy, kill, flags=()):
    c, d, survivors, at, t0, extra = elastic_run(name, strategy, kill, flags=flags)
    if strategy == "zero2":
        late_replacement(name, c, d, kill, strategy, extra)
    rcs = c.wait(survivors, 180)
    took = time.time() - t0
    ok = check(all(rcs[r] == 0 for r in survivors),
               "%s: survivors %s finish the %d steps (exit codes %s, %.1f s after the kill)" %
               (name, survivors, STEPS, rcs, took))
    logs = {r: open(os.path.join(d, "worker%d.log" % r)).read() for r in survivors}
    check(all("continues elastically with 2 of 3 workers" in logs[r] for r in survivors),
          "%s: every survivor reports going on with 2 of 3 workers" % name)
    for i, r in enumerate(survivors):
        check(("this worker is now rank %d of 2" % i) in logs[r],
              "%s: registry rank %d is now rank %d of 2" % (name, r, i))
    if "--aggregation=host" in flags:
        check(all("host aggregation: 1 host (ranks 0-2)" in logs[r] and
                  "host aggregation: 1 host (ranks 0-1)" in logs[r] for r in survivors),
              "%s: every survivor aggregated with the host's 3 workers, then regrouped as 2" % name)
    c_step = rolled_back_to(os.path.join(d, "worker%d.log" % survivors[0]))
    check(c_step is not None and c_step % EVERY == 0 and c_step <= at + 2,
          "%s: rolled back to the checkpoint of step %s (killed at about step %d)" %
          (name, c_step, at))
    if not ok or c_step is None:
        c.show()
        return
    cleanup()
    ref_d = reference(name, strategy, c_step, survivors)
    if ref_d:
        compare(name, d, ref_d, c_step, survivors)
    cleanup()


def scenario_ddp():
    name = "ddp-kill-2"
    c, d, survivors, at, t0, _ = elastic_run(name, "ddp", 2)
    rcs = c.wait(survivors, 180)
    ok = check(all(rcs[r] == 0 for r in survivors),
               "%s: survivors finish (exit codes %s, %.1f s after the kill)" %
               (name, rcs, time.time() - t0))
    text = open(os.path.join(d, "worker0.log")).read()
    check("continues elastically with 2 of 3 workers" in text and
          "servers re-created and every worker's state aligned at step" in text,
          "%s: the survivors go on as 2 workers at their own step (no rollback)" % name)
    acc = re.findall(r"test accuracy ([\d.]+)%", open(os.path.join(d, "worker0.log")).read())
    check(acc and float(acc[-1]) > 80, "%s: test accuracy %s%%" % (name, acc[-1] if acc else "?"))
    if not ok:
        c.show()
    cleanup()


def scenario_too_few():
    name = "zero2-too-few"
    c, d, survivors, at, t0, _ = elastic_run(name, "zero2", 1, world=2, min_workers=2,
                                              recovery_timeout=6)
    rcs = c.wait(survivors, 60)
    text = open(os.path.join(d, "worker0.log")).read()
    check(rcs[0] not in (0, "timeout") and "fewer than elastic_min_workers=2" in text,
          "%s: with 1 worker left and elastic_min_workers=2 the survivor gives up after "
          "recovery_timeout (exit %s, %.1f s): %s" %
          (name, rcs[0], time.time() - t0,
           (re.findall(r"only 1 worker\(s\) left[^\n]*", text) or ["no message"])[0][:120]))
    cleanup()


def main():
    try:
        scenario_checkpointed("zero2-kill-1", "zero2", 1)
        scenario_checkpointed("zero1-kill-0-host", "zero1", 0, flags=["--aggregation=host"])
        scenario_ddp()
        scenario_too_few()
    finally:
        cleanup()
    if failures:
        log("%d check(s) failed; logs in %s" % (len(failures), ROOT))
        return 1
    shutil.rmtree(ROOT, ignore_errors=True)
    log("elastic continuation: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
