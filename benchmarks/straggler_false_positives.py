#!/usr/bin/env python3
"""Stragglers named over fault-free training (issue 45's target: none): the
chaos soak's cluster (tests/chaos/chaos.py: network-namespace hosts, UCX over
tcp, etcd or memory registry, two shard servers, two worker hosts) with its
load job (MLP 128-512-512-10, zero2, Adam, 2 workers) training throughout,
and ROUNDS fault-free rounds of the measured job (MLP 64-128-10, zero2, Adam,
8000 steps each) - round 0 of the soak, repeated. Every shard server scores
every rank of both jobs every 250 ms (server/straggler_watcher.h). Counted at
the end: the lines "is a straggler" in the servers' logs and in each job's
rank 0 log (a false positive each), the steps trained (the measured job's
from its loss logs, the load job's from rank 0's), and the highest score any
server gave any rank, sampled every 2 s through tesselctl (ShardStats
rank_scores; the rule names at 1.5).

Prints "stragglers named: N over S steps ..." and exits 1 when N > 0.
Needs root (as the soak). The soak's other rounds inject faults, where a
named rank is the point; they are not run here.

Usage: straggler_false_positives.py REGISTRY SERVER TRAIN TESSELCTL [ROUNDS]
  (bazel-bin/registry/tessel-registry bazel-bin/server/tessel-server
   bazel-bin/tools/tessel-train bazel-bin/client/tesselctl 1)
"""
import glob
import json
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 1
sys.argv = sys.argv[:5]  # what chaos.py reads
sys.path[:0] = [os.path.join(HERE, "..", "tests", "chaos"), os.path.join(HERE, "..", "tests")]
import chaos  # noqa: E402
from proc_util import log, read  # noqa: E402

NAMED = "is a straggler"


def scores(c, job):
    """(score, lateness s, rank) of every rank the shard servers score for `job` now."""
    out = c.ctl(["shards", "--job", job, "-o", "json"], timeout=5)
    got = []
    try:
        for shard in json.loads(out or "[]"):
            stats = shard.get("stats") or {}
            for s in stats.get("rank_scores", stats.get("rankScores", [])):
                got.append((float(s.get("score", 0)),
                            float(s.get("lateness_seconds", s.get("latenessSeconds", 0))),
                            int(s.get("rank", 0))))
    except (TypeError, ValueError, AttributeError):
        pass
    return got


def main():
    if os.geteuid() != 0:
        log("straggler_false_positives: needs root (network namespaces)")
        return 1
    rng = random.Random(1)
    c = chaos.Cluster()
    top = {"score": (0.0, 0.0, "", 0), "late": (0.0, 0.0, "", 0), "samples": 0}
    stop = threading.Event()

    def sample():
        while not stop.wait(2.0):
            for job in ("load", c.job):
                if job:
                    for score, late, rank in scores(c, job):
                        top["samples"] += 1
                        top["score"] = max(top["score"], (score, late, job, rank))
                        top["late"] = max(top["late"], (late, score, job, rank), key=lambda t: t[0])

    t0 = time.time()
    steps = 0
    load_start = 0
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        c.start()
        load_start = c.load_steps()
        sampler.start()
        for n in range(ROUNDS):
            problems, _ = chaos.run_round(c, n, rng, {}, [], None, [])
            if problems:
                log("round %d (no faults) failed: %s" % (n, problems))
                return 1
            steps += min(c.loss_lines(r) for r in range(chaos.WORLD))
            log("round %d: %d steps (%.0f s so far)" % (n, chaos.STEPS, time.time() - t0))
        load_steps = c.load_steps() - load_start
    finally:
        stop.set()
        c.close()
    logs = [c.logpath("server%d" % s) for s in range(chaos.SHARDS)]
    logs += [c.logpath("load0")] + glob.glob(os.path.join(chaos.ROOT, "chaos-*", "worker0.log"))
    named = {os.path.relpath(p, chaos.ROOT): read(p).count(NAMED) for p in logs}
    lines = [l for p in logs for l in read(p).splitlines() if NAMED in l]
    total = sum(named.values())
    log("stragglers named: %d over %d steps (%d fault-free rounds of the measured job: %d "
        "steps; the load job: %d steps; each scored by %d shard servers; %.0f s)" %
        (total, steps + load_steps, ROUNDS, steps, load_steps, chaos.SHARDS, time.time() - t0))
    log("  per log: %s" % named)
    log("  over %d sampled scores (every 2 s, every rank of both jobs on every shard; a rank is "
        "named at score >= 1.5 with lateness >= 20 ms): the highest score %.2f (its lateness "
        "%.4f s; job %s rank %d); the highest lateness %.4f s (its score %.2f; job %s rank %d)" %
        ((top["samples"],) + top["score"] + top["late"]))
    for l in lines[:10]:
        log("  " + l[:300])
    if total:
        log("logs kept in %s" % chaos.ROOT)
        return 1
    import shutil
    shutil.rmtree(chaos.ROOT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
