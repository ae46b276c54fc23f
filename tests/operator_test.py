#!/usr/bin/env python3
"""Operator behaviour on real processes, configured the way deploy/ does it:
one job config file (--config) for every process, shard indexes from the
host name (HOSTNAME=tessel-server-N, --shard_from_hostname), ranks from the
Indexed Job's completion index (JOB_COMPLETION_INDEX).

  registry restart  the memory registry is killed (-9) mid-training and
                    started again on the same port. The shard servers do not
                    exit: they see their lease forgotten and join again, and
                    the job goes on (or rolls back once) to the end, bitwise
                    equal to a clean run.
  preemption        a worker gets SIGTERM mid-training: it asks for a
                    checkpoint at the next step, runs that step, leaves and
                    exits 143. Started again (as the Job would), it rejoins;
                    the job recovers from exactly that checkpoint (nothing
                    lost) and ends bitwise equal to a clean run.
  scale up          the Indexed Job grows from 2 to 3 (`kubectl patch`
                    parallelism and completions): a worker with completion
                    index 2 and the same config (elastic_max_workers=3)
                    joins the running job, is admitted at the next
                    checkpoint boundary with nothing rolled back, and the
                    run ends bitwise equal to a clean 2-worker run to that
                    checkpoint resumed by 3 workers.

Usage: operator_test.py REGISTRY SERVER TRAIN
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from proc_util import check, cleanup, failures, log, spawn, start_registry

REGISTRY, SERVER, TRAIN = sys.argv[1:4]
ROOT = tempfile.mkdtemp(prefix="operator-", dir=os.environ.get("TEST_TMPDIR"))
STEPS = 1200


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Cluster:
    """A registry, 2 shard servers and 2 workers from one config file."""

    def __init__(self, name, **worker_config):
        self.d = os.path.join(ROOT, name)
        os.makedirs(self.d)
        self.registry, self.address = start_registry(REGISTRY, self.d, 1500)
        self.config = os.path.join(self.d, "tessel.json")
        with open(self.config, "w") as f:
            json.dump({
                "common": {"registry": self.address, "pool": "default"},
                "server": {"listen": "127.0.0.1:0", "ucx_tls": "posix,sysv,self",
                           "checkpoint_dir": os.path.join(self.d, "ckpt"),
                           "lease_ttl_ms": 1500, "health_listen": "127.0.0.1:0"},
                "worker": {"job": "op", "world": 2, "strategy": "zero2", "optimizer": "adam",
                           "lr": 0.01, "steps": STEPS, "layers": [32, 256, 256, 8],
                           "samples": 4096, "batch": 64, "ucx_tls": "posix,sysv,self",
                           "checkpoint_every_steps": 50, "lease_ttl_ms": 1500, "servers": 2,
                           "auto_resume": True,
                           "log_every": 100, "recovery_timeout_s": 60, **worker_config},
            }, f)
        self.servers = [self.server(i) for i in range(2)]
        self.workers = {}

    def server(self, i):
        return spawn([SERVER, "--insecure", "--config=" + self.config, "--shard_from_hostname"],
                     os.path.join(self.d, "server%d.log" % i),
                     env={"HOSTNAME": "tessel-server-%d" % i})

    def worker(self, rank, out=None, extra=()):
        args = [TRAIN, "--config=" + self.config] + list(extra)
        if out:
            args.append("--out=" + out)
        self.workers[rank] = spawn(args, os.path.join(self.d, "worker%d.log" % rank),
                                   env={"JOB_COMPLETION_INDEX": str(rank)})
        return self.workers[rank]

    def log(self, name):
        return read(os.path.join(self.d, name + ".log"))

    def wait_step(self, at_least, timeout=60):
        """Waits until rank 0 has printed a step >= at_least."""
        end = time.time() + timeout
        while time.time() < end:
            steps = [int(s) for s in re.findall(r"step\s+(\d+)/", self.log("worker0"))]
            if steps and max(steps) >= at_least:
                return True
            time.sleep(0.05)
        return False


def finish(cluster, out):
    ok = True
    for rank, p in sorted(cluster.workers.items()):
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            rc = None
        ok &= check(rc == 0, "%s: worker %d exited %s" % (os.path.basename(cluster.d), rank, rc))
        if rc != 0:
            log(cluster.log("worker%d" % rank)[-3000:])
    return ok and os.path.exists(out)


def same(a, b):
    return os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()


def main():
    # Reference: a clean run of the same job.
    ref = Cluster("reference")
    ref_out = os.path.join(ref.d, "final.npy")
    t0 = time.time()
    ref.worker(0, ref_out)
    ref.worker(1)
    finish(ref, ref_out)
    clean_s = time.time() - t0
    log("reference run: %d steps in %.1f s" % (STEPS, clean_s))
    cleanup()

    # Registry restart.
    c = Cluster("registry-restart")
    out = os.path.join(c.d, "final.npy")
    c.worker(0, out)
    c.worker(1)
    check(c.wait_step(200), "registry restart: training under way")
    c.registry.kill()
    c.registry.wait()
    t_kill = time.time()
    time.sleep(1.0)
    registry = spawn([REGISTRY, "--insecure", "--listen=" + c.address, "--lease_ttl_ms=1500"],
                     os.path.join(c.d, "registry.log"))
    end = time.time() + 20
    while time.time() < end and not all("joined the registry again" in c.log("server%d" % i)
                                        for i in range(2)):
        time.sleep(0.05)
    rejoin_s = time.time() - t_kill
    check(all("joined the registry again" in c.log("server%d" % i) for i in range(2)),
          "registry restart: both servers joined the new registry again (%.1f s after the kill, "
          "1 s of it the registry being down)" % rejoin_s)
    check(all(s.poll() is None for s in c.servers), "registry restart: no shard server exited")
    finished = finish(c, out)
    check(finished and same(out, ref_out),
          "registry restart: final parameters bitwise equal to the clean run")
    check(all(s.poll() is None for s in c.servers), "registry restart: servers still up at the end")
    recoveries = re.findall(r"recoveries (\d+)", c.log("worker0"))
    log("registry restart: worker 0 recoveries %s (0 = the job went on, 1 = rolled back once)"
        % (recoveries[-1] if recoveries else "?"))
    registry.kill()
    cleanup()

    # Preemption (SIGTERM) of a worker.
    c = Cluster("preemption")
    out = os.path.join(c.d, "final.npy")
    c.worker(0, out)
    victim = c.worker(1)
    check(c.wait_step(300), "preemption: training under way")
    t_term = time.time()
    victim.send_signal(signal.SIGTERM)
    try:
        rc = victim.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    left_s = time.time() - t_term
    check(rc == 143, "preemption: SIGTERM'd worker exited 143 in %.2f s (got %s)" % (left_s, rc))
    asked = re.search(r"asked for a checkpoint at step (\d+)", c.log("worker1"))
    check(asked is not None and "leaves at step" in c.log("worker1"),
          "preemption: the worker asked for a checkpoint and left after reaching it")
    c.worker(1)  # the Job's replacement pod for index 1
    finished = finish(c, out)
    # zero2 rejoins in place: the replacement takes the step the shards applied
    # (the one the leaving worker reached), rank 0 waits without a rollback;
    # a rollback would go back to the checkpoint it asked for: the same step.
    resumed = (re.findall(r"recovered; going on from step (\d+)", c.log("worker0")) or
               re.findall(r"rejoined in place after \S+: the shards applied step (\d+)",
                          c.log("worker1")))
    check(asked is not None and resumed and int(resumed[-1]) == int(asked.group(1)),
          "preemption: the job went on from the step the leaving worker asked a checkpoint "
          "for (step %s; went on from %s)" % (asked.group(1) if asked else "?", resumed))
    check(finished and same(out, ref_out),
          "preemption: final parameters bitwise equal to the clean run")
    cleanup()


    # Scale up: the Indexed Job patched from 2 to 3 (parallelism and
    # completions), as `kubectl patch job` does; its new pod has completion
    # index 2 and the same config, which allows up to 3 workers.
    c = Cluster("scale-up", elastic_max_workers=3)
    out = os.path.join(c.d, "final.npy")
    c.worker(0, out)
    c.worker(1)
    check(c.wait_step(200), "scale up: training under way with 2 workers")
    t_join = time.time()
    c.worker(2)  # JOB_COMPLETION_INDEX=2
    finished = finish(c, out)
    grew = re.search(r"admitting 1 new worker\(s\) \(registry rank\(s\) 2\) at the checkpoint of "
                     r"step (\d+)", c.log("worker0"))
    admitted = re.search(r"admitted after (\S+) at step (\d+)", c.log("worker2"))
    check(grew is not None and admitted is not None and grew.group(1) == admitted.group(2) and
          int(grew.group(1)) % 50 == 0,
          "scale up: the newcomer was admitted at a checkpoint boundary (step %s; it waited %s)"
          % (grew.group(1) if grew else "?", admitted.group(1) if admitted else "?"))
    check(all("the job grows from 2 to 3 workers" in c.log("worker%d" % r) for r in range(3)) and
          all(a == b for a, b in re.findall(r"rolled back from step (\d+) to the checkpoint of "
                                            r"step (\d+)", c.log("worker0") + c.log("worker1"))) and
          "(this worker's own step: nothing lost)" in c.log("worker0"),
          "scale up: every worker went on as one of 3, nothing rolled back")
    boundary = int(grew.group(1)) if grew else 0
    joined = re.search(r"running with 2 worker\(s\) \(registry ranks 0, 1\) at step (\d+)",
                       c.log("worker2"))
    log("scale up: worker 2 found the job at step %s, was admitted at step %d; the run took "
        "%.1f s after it started" % (joined.group(1) if joined else "?", boundary,
                                     time.time() - t_join))
    cleanup()
    # Reference: a clean 2-worker run to the boundary, then a clean resume of
    # 3 workers from its checkpoint.
    if boundary:
        r = Cluster("scale-up-reference")
        r_out = os.path.join(r.d, "final.npy")
        for rank in range(2):
            r.worker(rank, extra=["--steps=%d" % boundary])
        first = all(p.wait(timeout=120) == 0 for p in r.workers.values())
        manifest = os.path.join(r.d, "ckpt", "op", "step-%010d" % boundary, "MANIFEST.json")
        end = time.time() + 30
        while time.time() < end and not os.path.exists(manifest):
            time.sleep(0.05)
        check(first and os.path.exists(manifest),
              "scale up: reference 2-worker run to step %d and its checkpoint" % boundary)
        for rank in range(3):
            r.worker(rank, r_out if rank == 0 else None,
                     extra=["--world=3", "--resume", "--resume_step=%d" % boundary])
        check(finish(r, r_out) and same(out, r_out),
              "scale up: final parameters bitwise equal to a clean resume of 3 workers from "
              "the checkpoint of step %d" % boundary)
        cleanup()

    if failures:
        log("FAILED: %d check(s): %s" % (len(failures), "; ".join(failures)))
        for name in ("registry-restart", "preemption", "scale-up", "scale-up-reference"):
            if not os.path.isdir(os.path.join(ROOT, name)):
                continue
            for f in sorted(os.listdir(os.path.join(ROOT, name))):
                if f.endswith(".log"):
                    log("---- %s/%s\n%s" % (name, f, read(os.path.join(ROOT, name, f))[-2500:]))
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        cleanup()
