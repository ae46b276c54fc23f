"""--straggler_policy=evict (docs/observability.md, "Stragglers and stalls"),
with real processes: a registry, one shard server and three tessel-train
workers (--recover, a checkpoint every 5 steps, --elastic_min_workers=2,
--elastic_grace_s=1, --straggler_policy=evict --straggler_evict_after_s=1,
50 ms of stand-in compute a step). From step 10 rank 2 is stopped 200 ms of
every 300 ms (SIGSTOP/SIGCONT). Checks:
  - rank 2 is evicted: its log says so (named for >= 1 s, the policy, the
    checkpoint it asked for, the step it left at) and it exits with status 3;
  - ranks 0 and 1 go on elastically without it (no replacement within the
    grace), from the checkpoint it asked for, and finish every step (exit 0;
    rank 0 writes the final parameters); neither was evicted;
  - the policy refuses a job that could not go on without the worker:
    --straggler_policy=evict without --elastic_min_workers is a usage error.
Usage: straggler_evict_test.py REGISTRY SERVER TRAIN
"""
import os
import re
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, read, spawn  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
JOB = "evictjob"
WORLD, SLOW, STEPS = 3, 2, 120


def wait_for(pattern, path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, read(path))
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise RuntimeError("%r not in %s" % (pattern, path))


class DutyCycle(threading.Thread):
    """Stops `pid` for `stop` s of every `stop + run` s until it exits or end()."""

    def __init__(self, pid, stop, run):
        super().__init__(daemon=True)
        self.pid, self.stop_s, self.run_s = pid, stop, run
        self.done = threading.Event()

    def run(self):
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.stop_s)
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(self.run_s)
        except ProcessLookupError:
            pass

    def end(self):
        self.done.set()
        self.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def main():
    registry, server, train = sys.argv[1:4]
    d = tempfile.mkdtemp(prefix="tessel-evict-")
    started = time.time()
    try:
        port_file = os.path.join(d, "registry.port")
        spawn([registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file],
              os.path.join(d, "registry.log"))
        reg = wait_for(r"(\S+)", port_file)
        spawn([server, "--insecure", "--registry=" + reg, "--shard=0", UCX, "--lease_ttl_ms=600",
               "--checkpoint_dir=" + os.path.join(d, "ckpt")], os.path.join(d, "server0.log"))
        common = ["--registry=" + reg, "--job=" + JOB, "--world=%d" % WORLD, "--servers=1",
                  "--layers=16,32,4", "--samples=256", "--batch=16", "--optimizer=sgd",
                  "--lr=0.01", "--lease_ttl_ms=600", "--log_every=1000000", UCX]

        # A policy the job cannot honour is refused before anything starts.
        bad = os.path.join(d, "bad.log")
        p = spawn([train, "--rank=0", "--steps=1", "--straggler_policy=evict"] + common, bad)
        rc = p.wait(timeout=30)
        check(rc != 0 and "straggler_policy evict needs elastic_min_workers" in read(bad),
              "--straggler_policy=evict without --elastic_min_workers: exit %d, %s" %
              (rc, read(bad).strip().splitlines()[-1:]))

        logs = [os.path.join(d, "worker%d.log" % r) for r in range(WORLD)]
        final = os.path.join(d, "final.npy")
        workers = [spawn([train, "--rank=%d" % r, "--steps=%d" % STEPS, "--step_sleep_ms=50",
                          "--recover", "--checkpoint_every_steps=5", "--elastic_min_workers=2",
                          "--elastic_grace_s=1", "--straggler_policy=evict",
                          "--straggler_evict_after_s=1", "--recovery_timeout_s=30",
                          "--out=" + final, "--loss_log=" + os.path.join(d, "loss.txt")]
                         + common, logs[r]) for r in range(WORLD)]
        deadline = time.time() + 60
        while read(os.path.join(d, "loss.txt.rank%d" % SLOW)).count("\n") < 10:
            if time.time() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError("rank %d did not reach step 10" % SLOW)
            time.sleep(0.05)
        slowed_at = time.time()
        duty = DutyCycle(workers[SLOW].pid, 0.2, 0.1)
        duty.start()
        try:
            rc = workers[SLOW].wait(timeout=60)
        finally:
            duty.end()
        took = time.time() - slowed_at
        slow_log = read(logs[SLOW])
        named = re.search(r"named this rank \(%d\) the job's slowest straggler for (\S+) \(score "
                          r"([\d.]+)" % SLOW, slow_log)
        left = re.search(r"evicted as a straggler: rank %d leaves at step (\d+) \(checkpoint at "
                         r"step (\d+)\)" % SLOW, slow_log)
        check(rc == 3 and named and "--straggler_policy=evict: it leaves the job at a checkpoint"
              in slow_log and left,
              "rank %d evicted %.1f s after it slowed: exit %d; %s; %s" %
              (SLOW, took, rc, named.group(0) if named else "no eviction line",
               left.group(0) if left else "no leaving line"))
        for r in range(WORLD):
            if r == SLOW:
                continue
            rc = workers[r].wait(timeout=90)
            text = read(logs[r])
            shrank = re.search(r"going on elastically with the 2 worker\(s\) left", text)
            resumed = re.search(r"recovered; going on from step (\d+)", text)
            check(rc == 0 and shrank and resumed and "evicted as a straggler" not in text,
                  "rank %d: exit %d, went on elastically with 2 workers from step %s, finished "
                  "%d steps, not evicted itself" %
                  (r, rc, resumed.group(1) if resumed else "?", STEPS))
            if left and resumed:
                check(int(resumed.group(1)) == int(left.group(2)),
                      "rank %d resumed at the checkpoint rank %d asked for (step %s)" %
                      (r, SLOW, left.group(2)))
        check(os.path.getsize(final) > 0 if os.path.exists(final) else False,
              "rank 0 wrote the final parameters")
    except (RuntimeError, OSError) as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    log("%.1f s; logs in %s" % (time.time() - started, d))
    for r in range(WORLD):
        for line in read(os.path.join(d, "worker%d.log" % r)).splitlines()[-6:]:
            log("  worker%d: %s" % (r, line[:240]))
    return finish(d)


if __name__ == "__main__":
    sys.exit(main())
