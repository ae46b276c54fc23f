#!/usr/bin/env python3
"""A process killed while writing a message into a UCX shared-memory receive
queue wedges that queue for good: UCX reads the FIFO strictly in order and
the dead writer's slot never fills. Training must recover from it anyway.

The dying writer is ucx_crash_sender, a real process that faults inside
UCX's copy into the victim's FIFO (the moment a kill -9 mid-send leaves
behind, made deterministic). Each scenario trains the MLP with tessel-train
(2 workers, 2 shard servers over posix/sysv shared memory) and is checked
bitwise against a clean run of the same steps:

  server  a writer dies inside a send into shard 0's queue, as a worker
          killed mid-push does. Shard 0's receive-queue probe finds the
          wedge; it re-creates its UCX endpoint and re-joins the registry;
          the workers reconnect and recover from the last checkpoint (zero2).
  worker  a writer dies inside a send into worker 0's queue and shard 1 is
          killed and restarted, as when a server dies mid-send (ddp). The
          recovery finds worker 0's queue wedged and re-creates its endpoint.

Usage: wedge_recovery_test.py REGISTRY SERVER TRAIN TESSELCTL CRASH_SENDER
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time

from proc_util import check, cleanup, crash_into, failures, log, spawn, start_registry

REGISTRY, SERVER, TRAIN, CTL, CRASH = sys.argv[1:6]
ROOT = tempfile.mkdtemp(prefix="wedge-", dir=os.environ.get("TEST_TMPDIR"))
TLS = "posix,sysv,self"
STEPS, AT = 400, 120
LEASE_MS = 1500
MODEL = ["--layers=32,256,256,8", "--samples=4096", "--batch=64", "--optimizer=adam",
         "--lr=0.01", "--ucx_tls=" + TLS]


class Cluster:
    def __init__(self, d, strategy):
        self.d, self.strategy = d, strategy
        os.makedirs(d)
        _, self.reg = start_registry(REGISTRY, d, LEASE_MS)
        self.servers = {s: self.start_server(s) for s in range(2)}
        for _ in range(200):
            if len(self.members("default")) >= 2:
                break
            time.sleep(0.05)
        self.workers = [self.start_worker(r) for r in range(2)]

    def start_server(self, s):
        return spawn([SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s, "--ucx_tls=" + TLS,
                      "--lease_ttl_ms=%d" % LEASE_MS, "--receive_check_ms=500",
                      "--checkpoint_dir=" + os.path.join(self.d, "checkpoints")],
                     os.path.join(self.d, "server%d.log" % s))

    def start_worker(self, r):
        args = [TRAIN, "--registry=" + self.reg, "--job=wq", "--rank=%d" % r, "--world=2",
                "--servers=2", "--steps=%d" % STEPS, "--strategy=" + self.strategy, "--recover",
                "--recovery_timeout_s=30", "--step_timeout_s=60",
                "--lease_ttl_ms=%d" % LEASE_MS, "--log_every=1000000",
                "--out=" + os.path.join(self.d, "final.npy"),
                "--loss_log=" + os.path.join(self.d, "loss.txt")] + MODEL
        if self.strategy != "ddp":
            args += ["--checkpoint_every_steps=5", "--checkpoint_initial"]
        return spawn(args, os.path.join(self.d, "worker%d.log" % r))

    def members(self, group):
        out = subprocess.run([CTL, "--registry", self.reg, "members", "--group", group, "-o",
                              "json"], capture_output=True, text=True).stdout
        try:
            views = json.loads(out)
        except ValueError:
            return []
        return [m for v in views for m in v.get("members", [])]

    def steps_done(self):
        try:
            lines = [l for l in open(os.path.join(self.d, "loss.txt.rank1")) if l.strip()]
            return int(lines[-1].split()[0]) + 1 if lines else 0
        except FileNotFoundError:
            return 0

    def wait_step(self, step):
        end = time.time() + 60
        while time.time() < end and self.steps_done() < step:
            time.sleep(0.005)

    def wedge(self, group, role, rank):
        """ucx_crash_sender dies inside a send into that member's queue:
        returns (its address, True if it died by SIGSEGV)."""
        return crash_into(CRASH, CTL, self.reg, group, role, rank, tls=TLS)

    def finish(self):
        rcs = []
        for p in self.workers:
            try:
                rcs.append(p.wait(timeout=150))
            except subprocess.TimeoutExpired:
                rcs.append("timeout")
        return rcs


def grep(path, text):
    try:
        return sum(1 for line in open(path, errors="replace") if text in line)
    except FileNotFoundError:
        return 0


def result(d):
    final = os.path.join(d, "final.npy")
    return open(final, "rb").read() if os.path.exists(final) else None


def show_logs(d):
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            log("    --- " + name)
            lines = [l for l in open(os.path.join(d, name), errors="replace")
                     if "UCX  WARN" not in l]
            for line in lines[-10:]:
                log("    " + line.rstrip()[:300])


def clean(strategy):
    c = Cluster(os.path.join(ROOT, "clean-" + strategy), strategy)
    rcs = c.finish()
    cleanup()
    if not check(rcs == [0, 0], "clean %s run finished (%s)" % (strategy, rcs)):
        show_logs(c.d)
    return result(c.d)


def server_scenario():
    want = clean("zero2")
    c = Cluster(os.path.join(ROOT, "server-zero2"), "zero2")
    c.wait_step(AT)
    t0 = time.time()
    address, died = c.wedge("default", "server", 0)
    check(died, "a writer died (SIGSEGV) inside a send into shard 0's queue")
    rcs = c.finish()
    log("  training finished %.1f s after the wedge" % (time.time() - t0))
    ok = check(rcs == [0, 0], "server: both workers finished (%s)" % rcs)
    ok &= check(grep(os.path.join(c.d, "server0.log"), "receive queue is wedged") >= 1,
                "server: shard 0 found its receive queue wedged")
    ok &= check(grep(os.path.join(c.d, "server0.log"), "UCX endpoint re-created") >= 1,
                "server: shard 0 re-created its UCX endpoint and re-joined the registry")
    now = [m["ucx_address"] for m in c.members("default")
           if m.get("role") == "server" and int(m.get("rank", 0)) == 0]
    ok &= check(address is not None and len(now) == 1 and
                base64.b64decode(now[0]).hex() != address,
                "server: the registry holds shard 0's new address")
    ok &= check(result(c.d) is not None and result(c.d) == want,
                "server: final parameters bitwise equal to the clean run")
    if not ok:
        show_logs(c.d)
    cleanup()


def worker_scenario():
    want = clean("ddp")
    c = Cluster(os.path.join(ROOT, "worker-ddp"), "ddp")
    c.wait_step(AT)
    _, died = c.wedge("wq", "worker", 0)
    check(died, "a writer died (SIGSEGV) inside a send into worker 0's queue")
    c.servers[1].kill()
    c.servers[1].wait()
    time.sleep(0.5)
    c.servers[1] = c.start_server(1)
    rcs = c.finish()
    ok = check(rcs == [0, 0], "worker: both workers finished (%s)" % rcs)
    ok &= check(grep(os.path.join(c.d, "worker0.log"), "re-creating this worker's UCX endpoint")
                == 1, "worker: worker 0's recovery found its queue wedged and renewed it")
    ok &= check(grep(os.path.join(c.d, "worker1.log"), "re-creating") == 0,
                "worker: worker 1's queue was healthy and kept")
    ok &= check(grep(os.path.join(c.d, "worker0.log"), "wedged UCX endpoints renewed 1") == 1,
                "worker: tessel-train reports 1 renewed endpoint")
    ok &= check(result(c.d) is not None and result(c.d) == want,
                "worker: final parameters bitwise equal to the clean run")
    if not ok:
        show_logs(c.d)
    cleanup()


def main():
    try:
        for scenario in (server_scenario, worker_scenario):
            log("scenario " + scenario.__name__)
            scenario()
    finally:
        cleanup()
    if failures:
        log("FAILED: %d check(s): %s" % (len(failures), "; ".join(failures)))
        sys.exit(1)
    log("all checks passed")


if __name__ == "__main__":
    main()
