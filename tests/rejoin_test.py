#!/usr/bin/env python3
"""A lost worker without rollback (docs/operations.md, "A lost worker without
rollback"; issue 44 item 1): tessel-train, W=3 workers and 2 shard servers,
zero2 (fp32 Adam), zero1 (bf16 SGD-momentum) and fsdp (Adam, a unit per
layer), buckets small enough that a
step is many pushes. Each round kills a random rank with SIGKILL at a random
moment of a step (computing, pushing, waiting or pulling: the moment is
random, the log says what the replacement found), keeps it dead a random
while and starts a replacement with --resume. Then, against a clean run:
  - every rank's loss of every step and the final parameters are bitwise
    equal, and every shard's state digest (parameters, optimizer state, step);
  - no rollback: every shard counts 0 recoveries;
  - nothing replayed: every shard applied exactly STEPS steps (a replayed step
    counts again in applied_steps), and no rank logged a step twice;
  - each replacement logged "rejoined in place" and how many of its buckets
    of the step in flight were already on the shards; the test prints how
    often that was 0 (killed before pushing), some (mid-push) or all (killed
    while waiting or pulling), and how long the survivors waited.

Usage: rejoin_test.py REGISTRY SERVER TRAIN TESSELCTL
Environment: TESSEL_REJOIN_KILLS (per configuration, default 5),
TESSEL_REJOIN_SEED (default 1), TESSEL_REJOIN_CONFIGS (default all, comma-separated),
TESSEL_REJOIN_KEEP=1 (keep the logs of a passing run).
"""
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

from proc_util import (check, cleanup, finish, log, read, read_losses, shards_json, spawn,
                       start_registry, wait_all)

REGISTRY, SERVER, TRAIN, CTL = sys.argv[1:5]
KILLS = int(os.environ.get("TESSEL_REJOIN_KILLS", "5"))
SEED = int(os.environ.get("TESSEL_REJOIN_SEED", "1"))
ROOT = tempfile.mkdtemp(prefix="rejoin-", dir=os.environ.get("TEST_TMPDIR"))
WORLD, SHARDS, STEPS, LEASE_MS = 3, 2, 400, 1500
CONFIGS = {
    "zero2-adam": ["--strategy=zero2", "--optimizer=adam", "--lr=0.01"],
    "zero1-bf16-sgd": ["--strategy=zero1", "--precision=bf16", "--optimizer=sgd",
                       "--momentum=0.9", "--lr=0.05"],
    "fsdp-adam": ["--strategy=fsdp", "--optimizer=adam", "--lr=0.01"],
}
MODEL = ["--layers=32,128,128,8", "--samples=4096", "--batch=48", "--bucket_bytes=8192",
         "--ucx_tls=posix,sysv,self"]


class Cluster:
    def __init__(self, d, config):
        self.d, self.config = d, config
        os.makedirs(d)
        _, self.reg = start_registry(REGISTRY, d, LEASE_MS)
        self.servers = [spawn([SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                               "--ucx_tls=posix,sysv,self", "--lease_ttl_ms=%d" % LEASE_MS,
                               "--checkpoint_dir=" + os.path.join(d, "checkpoints"),
                               "--update_threads=2"], os.path.join(d, "server%d.log" % s))
                        for s in range(SHARDS)]
        self.wait_servers()
        self.workers = {r: self.start_worker(r, False) for r in range(WORLD)}
        self.starts = {r: 0 for r in range(WORLD)}

    def wait_servers(self):
        for _ in range(200):
            out = subprocess.run([CTL, "--registry", self.reg, "members", "-o", "json"],
                                 capture_output=True, text=True).stdout
            if out.count('"role": "server"') >= SHARDS:
                return
            time.sleep(0.05)
        raise RuntimeError("servers did not register")

    def start_worker(self, r, resume):
        args = [TRAIN, "--registry=" + self.reg, "--job=rj", "--rank=%d" % r,
                "--world=%d" % WORLD, "--servers=%d" % SHARDS, "--steps=%d" % STEPS,
                "--recover", "--recovery_timeout_s=30", "--step_timeout_s=60",
                "--lease_ttl_ms=%d" % LEASE_MS, "--log_every=1000000",
                "--checkpoint_every_steps=100", "--checkpoint_initial",
                "--out=" + os.path.join(self.d, "final.npy"),
                "--loss_log=" + os.path.join(self.d, "loss.txt")] + CONFIGS[self.config] + MODEL
        if resume:
            args.append("--resume")
        return spawn(args, os.path.join(self.d, "worker%d.log" % r))

    def steps_done(self):
        lines = [l for l in read(os.path.join(self.d, "loss.txt.rank0")).split("\n") if l.strip()]
        return int(lines[-1].split()[0]) + 1 if lines else 0

    def shards(self):
        return shards_json(CTL, self.reg, "rj")

    def wait_workers(self, timeout):
        return wait_all(self.workers, timeout)


def stat(shard, key, snake):
    st = shard.get("stats", {})
    return st.get(key, st.get(snake, 0))


def run(config, rng=None):
    d = os.path.join(ROOT, config + ("-clean" if rng is None else "-faults"))
    c = Cluster(d, config)
    rejoins = []
    if rng is not None:
        for k in range(KILLS):
            at = (k + 1) * STEPS // (KILLS + 2) + rng.randrange(10)
            end = time.time() + 90
            while time.time() < end and c.steps_done() < at:
                time.sleep(0.005)
            time.sleep(rng.random() * 0.01)  # anywhere inside a step
            who = rng.randrange(WORLD)
            at_step = c.steps_done()
            c.workers[who].send_signal(signal.SIGKILL)
            c.workers[who].wait()
            down = rng.uniform(0.1, 1.0)
            time.sleep(down)
            c.starts[who] += 1
            restarted = time.time()
            c.workers[who] = c.start_worker(who, True)
            # Training again: two steps past the one in flight, on rank 0's log.
            end = time.time() + 60
            while time.time() < end and c.steps_done() < at_step + 2:
                time.sleep(0.005)
            again = time.time() - restarted
            log("  %s: kill -9 rank %d near step %d, replaced after %.1f s, training again "
                "%.2f s after the replacement started" % (config, who, at_step, down, again))
            rejoins.append(again)
    rcs = c.wait_workers(240)
    shards = c.shards()
    result = {"dir": d, "rcs": rcs, "shards": shards, "losses": read_losses(d, WORLD), "again": rejoins,
              "final": read(os.path.join(d, "final.npy")) if rng is None else None}
    try:
        with open(os.path.join(d, "final.npy"), "rb") as f:
            result["final"] = f.read()
    except FileNotFoundError:
        result["final"] = None
    logs = "".join(read(os.path.join(d, "worker%d.log" % r)) for r in range(WORLD))
    result["rejoined"] = re.findall(r"rejoined in place after ([0-9.]+)(ms|s|): the shards applied "
                                    r"step (\d+).*? (\d+) of its buckets", logs)
    result["waited"] = re.findall(r"every rank is back after ([0-9.]+)(ms|s|)", logs)
    result["rolled_back"] = len(re.findall(r"rolled back from step", logs))
    cleanup()
    return result


def seconds(value, unit):
    """absl::FormatDuration's "212ms", "1.5s" or "0"."""
    return float(value) / (1000.0 if unit == "ms" else 1.0)


def main():
    log("lost workers without rollback: W=%d, %d shards, %d steps, %d kills per configuration"
        % (WORLD, SHARDS, STEPS, KILLS))
    rng = random.Random(SEED)
    for config in os.environ.get("TESSEL_REJOIN_CONFIGS", ",".join(CONFIGS)).split(","):
        clean = run(config)
        check(all(rc == 0 for rc in clean["rcs"].values()) and clean["shards"] is not None,
              "%s: the clean run finished (%s)" % (config, clean["rcs"]))
        faulty = run(config, rng)
        check(all(rc == 0 for rc in faulty["rcs"].values()),
              "%s: every worker finished after %d kills (%s)" % (config, KILLS, faulty["rcs"]))
        check(faulty["final"] is not None and faulty["final"] == clean["final"],
              "%s: final parameters bitwise equal to the clean run" % config)
        want = {k: v[0] for k, v in clean["losses"].items()}
        got = faulty["losses"]
        # A rank killed between its step's end and its loss line never logs
        # that step; some other rank has.
        missing = sorted({s for _, s in want} - {s for _, s in got})
        differ = [k for k, v in got.items() if any(x != want.get(k) for x in v)]
        twice = [k for k, v in got.items() if len(v) > 1]
        check(not missing and not differ,
              "%s: every rank's loss of every step bitwise as clean (missing %s, differing %s)"
              % (config, missing[:5], differ[:5]))
        # A killed rank never logged the step it died in, so its replacement's
        # log of that step is its first.
        check(not twice, "%s: no rank logged a step twice (replayed: %s)" % (config, twice[:5]))
        if faulty["shards"] is None or clean["shards"] is None:
            check(False, "%s: tesselctl shards answered" % config)
            continue
        digests = [stat(s, "stateDigest", "state_digest") for s in faulty["shards"]]
        check(digests == [stat(s, "stateDigest", "state_digest") for s in clean["shards"]],
              "%s: every shard's state digest equals the clean run's" % config)
        recoveries = [int(stat(s, "recoveries", "recoveries")) for s in faulty["shards"]]
        check(recoveries == [0] * SHARDS and faulty["rolled_back"] == 0,
              "%s: no rollback (shards' recoveries %s, workers' rollbacks %d)"
              % (config, recoveries, faulty["rolled_back"]))
        applied = [int(stat(s, "appliedSteps", "applied_steps")) for s in faulty["shards"]]
        check(applied == [STEPS] * SHARDS,
              "%s: nothing replayed: each shard applied %s steps (%d expected)"
              % (config, applied, STEPS))
        check(len(faulty["rejoined"]) == KILLS,
              "%s: each of the %d replacements rejoined in place (%d did)"
              % (config, KILLS, len(faulty["rejoined"])))
        pushed = [int(n) for *_, n in faulty["rejoined"]]
        rejoin_s = sorted(seconds(v, u) for v, u, *_ in faulty["rejoined"])
        waited = sorted(seconds(v, u) for v, u in faulty["waited"])
        again = sorted(faulty["again"])
        log("  %s: buckets of the step in flight already on the shards per rejoin: %s; "
            "rejoin took %s s; survivors waited in the step %s s; training again (two steps "
            "on) %s s after the replacement started, median %.2f s"
            % (config, pushed, ["%.3f" % x for x in rejoin_s], ["%.1f" % x for x in waited],
               ["%.2f" % x for x in again], again[len(again) // 2] if again else -1))
    if os.environ.get("TESSEL_REJOIN_KEEP"):  # the logs of a passing run, to read
        log("logs kept in " + ROOT)
        failures_before = len(__import__("proc_util").failures)
        cleanup()
        log("%d failed" % failures_before)
        return 1 if failures_before else 0
    return finish(ROOT)


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        cleanup()
