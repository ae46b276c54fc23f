"""`tesselctl top` and `tesselctl why` against real processes: a registry,
two shard servers and four tessel-train workers that each stand in 100 ms of
compute per step (--step_sleep_ms), as in straggler_test.py.

  a. Rank 2 slowed about 3x (SIGSTOP/SIGCONT, stopped 200 ms of every
     300 ms): `tesselctl top -o json` names it (straggler, score >= 1.5) with
     phase "computing" within 10 steps, and nobody else; the table form
     (--iterations) prints its columns; the flight recorder has every rank's
     pull asked for and served in the finished steps (GetStats).
  b. Rank 1 stopped with SIGSTOP: `tesselctl why` exits 7 (stalled) naming
     rank 1 (what it owes on both shards, its last heartbeat, "yes (stopped)")
     within 2 lease intervals; after SIGCONT the job progresses (exit 0).
  c. Rank 3 alive and heartbeating but never pushing again (--hang_on_sigusr1,
     a deadlock in the caller's code): `why` names it "computing", last phase
     computing, alive, within the stall threshold (--stalled_after=1) and a
     poll.
  Unknown job: exit 3 from both.

Usage: top_why_test.py REGISTRY SERVER TRAIN TESSELCTL
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, spawn  # noqa: E402
from straggler_test import UCX, DutyCycle, wait_for  # noqa: E402

JOB = "topjob"
WORLD = 4
LEASE_MS = 4000  # the workers'
STALLED_AFTER = 1.0


def main():
    registry, server, train, ctl = sys.argv[1:5]
    d = tempfile.mkdtemp(prefix="tessel-topwhy-")
    started = time.time()
    workers = []
    try:
        port_file = os.path.join(d, "registry.port")
        spawn([registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file],
              os.path.join(d, "registry.log"))
        reg = wait_for(r"(\S+)", port_file)
        for s in range(2):
            spawn([server, "--insecure", "--registry=" + reg, "--shard=%d" % s, UCX,
                   "--lease_ttl_ms=1000"], os.path.join(d, "server%d.log" % s))

        def run(*args):
            p = subprocess.run([ctl, "--registry=" + reg] + list(args), capture_output=True,
                               text=True, timeout=20)
            return p.returncode, p.stdout, p.stderr

        def top():
            rc, out, err = run("top", JOB, "-o", "json")
            return json.loads(out) if rc == 0 else None

        def why():
            rc, out, err = run("why", JOB, "--stalled_after=%g" % STALLED_AFTER, "-o", "json")
            return rc, (json.loads(out) if out.strip().startswith("{") else None)

        def step():
            t = top()
            return t["step"] if t else -1

        # Servers up (both in the pool) before the workers.
        deadline = time.time() + 20
        while time.time() < deadline and run("members", "--group=default", "-o", "json")[1].count(
                '"role": "server"') < 2:
            time.sleep(0.1)
        workers += [spawn([train, "--registry=" + reg, "--job=" + JOB, "--rank=%d" % r,
                           "--world=%d" % WORLD, "--servers=2", "--steps=100000",
                           "--layers=16,32,4", "--samples=256", "--batch=16", "--optimizer=sgd",
                           "--lr=0.01", "--step_sleep_ms=100", "--lease_ttl_ms=%d" % LEASE_MS,
                           "--log_every=1000000", "--hang_on_sigusr1", UCX],
                          os.path.join(d, "worker%d.log" % r)) for r in range(WORLD)]
        deadline = time.time() + 30
        while step() < 5 and time.time() < deadline:
            time.sleep(0.1)
        check(step() >= 5, "the job steps (step %d)" % step())

        # a. A 3x slower rank: named by top with phase computing within 10 steps.
        slow = 2
        cycle = DutyCycle(workers[slow].pid, 0.2, 0.1)
        at = step()
        cycle.start()
        named_at, t = None, None
        deadline = time.time() + 20
        while named_at is None and time.time() < deadline:
            t = top()
            if t and t["ranks"][slow]["straggler"] and t["ranks"][slow]["phase"] == "computing":
                named_at = t["step"]
            time.sleep(0.1)
        check(named_at is not None and named_at - at <= 10,
              "a: top -o json names rank %d (phase computing) slowed from step %d at step %s" %
              (slow, at, named_at))
        if t:
            r = t["ranks"][slow]
            log("a: rank %d score %s lateness %s phase %s pid %s (its pid %d)" % (
                slow, r["score"], r["lateness_s"], r["phase"], r["pid"], workers[slow].pid))
            check(r["pid"] == workers[slow].pid and r["host"] and r["pushed_bytes"] > 0 and
                  r["pulled_bytes"] > 0 and r["steps_per_s"] > 0,
                  "a: its row has its pid, host, bytes and step rate")
            check(not any(o["straggler"] for o in t["ranks"] if o["rank"] != slow),
                  "a: nobody else is named")
        rc, out, err = run("top", JOB, "--iterations=2", "--interval=0.2")
        check(rc == 0 and out.count("LATENESS") == 2 and "SLOW" in out,
              "a: top --iterations=2 prints the table twice, SLOW marked (rc %d)" % rc)
        log(out.split("\n\n")[0])
        rc, out, err = run("shards", "--job=" + JOB, "-o", "json")
        ended = [s for sh in json.loads(out) for s in sh["stats"]["flight"] if s["end_us"] >= 0]
        check(ended and all(
            len(s["pull_asked_us"]) == WORLD and min(s["pull_asked_us"]) > 0 and
            all(sv >= a for a, sv in zip(s["pull_asked_us"], s["pull_served_us"]))
            for s in ended[:-1]),
            "a: the flight recorder has every rank's pull asked for and served (%d steps)" %
            len(ended))
        cycle.end()

        # b. A stopped rank: named by why within 2 lease intervals.
        stopped = 1
        deadline = time.time() + 10
        while time.time() < deadline and why()[0] != 0:
            time.sleep(0.1)
        os.kill(workers[stopped].pid, signal.SIGSTOP)
        t0 = time.time()
        rc, w = why()
        while time.time() < t0 + 2 * LEASE_MS / 1000.0 and rc != 7:
            time.sleep(0.1)
            rc, w = why()
        took = time.time() - t0
        culprits = w["culprits"] if w else []
        c = culprits[0] if culprits else {}
        check(rc == 7 and [x.get("rank") for x in culprits] == [stopped] and
              c["pid"] == workers[stopped].pid and c["heartbeat_age_s"] is not None and
              c["alive"] == "yes (stopped)" and len(c["owes"]) == 2,
              "b: why exits 7 naming rank %d (owes on 2 shards, heartbeat %s s ago, alive %r) "
              "in %.1f s (2 lease intervals: %.0f s)" % (stopped, c.get("heartbeat_age_s"),
                                                          c.get("alive"), took,
                                                          2 * LEASE_MS / 1000.0))
        rc, out, err = run("why", JOB, "--stalled_after=%g" % STALLED_AFTER)
        log(out)
        os.kill(workers[stopped].pid, signal.SIGCONT)
        deadline = time.time() + 10
        while time.time() < deadline and why()[0] != 0:
            time.sleep(0.1)
        check(why()[0] == 0, "b: after SIGCONT the job progresses (why exits 0)")

        # c. Alive, heartbeating, never pushing: named computing. First a
        # few steps at pace, so its last reported step (heartbeats come every
        # third of the lease) is not the one that waited for rank 1.
        time.sleep(LEASE_MS / 1000.0 / 3 + 0.5)
        hung = 3
        os.kill(workers[hung].pid, signal.SIGUSR1)
        t0 = time.time()
        rc, w = why()
        while time.time() < t0 + STALLED_AFTER + 5 and rc != 7:
            time.sleep(0.1)
            rc, w = why()
        took = time.time() - t0
        c = (w["culprits"] or [{}])[0] if w else {}
        check(rc == 7 and [x.get("rank") for x in w["culprits"]] == [hung] and
              c["doing"] == "computing" and c["last_phase"] == "computing" and
              c["alive"] == "yes" and c["heartbeat_age_s"] < LEASE_MS / 1000.0,
              "c: why names rank %d computing (last phase %s, alive %r, heartbeat %s s ago) "
              "%.1f s after it hung (threshold %.0f s)" % (hung, c.get("last_phase"),
                                                           c.get("alive"),
                                                           c.get("heartbeat_age_s"), took,
                                                           STALLED_AFTER))
        rc, out, err = run("why", JOB, "--stalled_after=%g" % STALLED_AFTER)
        log(out)

        rc_top = run("top", "nosuchjob", "-o", "json")[0]
        rc_why = run("why", "nosuchjob")[0]
        check(rc_top == 3 and rc_why == 3, "unknown job: top and why exit 3 (%d, %d)" %
              (rc_top, rc_why))
        log("took %.1f s" % (time.time() - started))
    finally:
        for p in workers:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    return finish(d)


if __name__ == "__main__":
    sys.exit(main())
