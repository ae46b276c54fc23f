"""Stragglers named from the servers' view (docs/observability.md,
"Stragglers"), with real processes: a registry, one shard server and four
tessel-train workers that each stand in 100 ms of compute per step
(--step_sleep_ms).

  1. Fault-free: over 30 steps every rank is scored and nobody is named (no
     log line, no score at 1.5 or more, nothing in /status.json).
  2. Rank 2 is slowed about 3x by a SIGSTOP/SIGCONT duty cycle (stopped
     200 ms of every 300 ms): within 10 steps it is named by the server's
     log line (with its host and pid), the score metric, /status.json and
     rank 0's log line.
  3. The duty cycle ends: the server says it is no longer a straggler.
  4. Rank 1 is stopped for good: after --stall_report_s the server writes
     the flight recorder as a timeline, logs its path, and the file shows
     rank 1 waiting.

Usage: straggler_test.py REGISTRY SERVER TRAIN
"""
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, read, spawn  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
JOB = "slowjob"
WORLD = 4
SLOW = 2


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_for(pattern, path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, read(path))
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise RuntimeError("%r not in %s" % (pattern, path))


def gauge(metrics, name, rank=None):
    """The value of `name` for JOB (and `rank`) in a /metrics text, or None."""
    labels = 'job="%s"' % JOB + (',rank="%d"' % rank if rank is not None else "")
    m = re.search(r"^%s\{%s[^}]*\} (\S+)$" % (name, re.escape(labels)), metrics, re.M)
    return float(m.group(1)) if m else None


class DutyCycle(threading.Thread):
    """Stops `pid` for `stop` s of every `stop + run` s until stopped."""

    def __init__(self, pid, stop, run):
        super().__init__(daemon=True)
        self.pid, self.stop_s, self.run_s = pid, stop, run
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.stop_s)
            os.kill(self.pid, signal.SIGCONT)
            time.sleep(self.run_s)

    def end(self):
        self.done.set()
        self.join()
        os.kill(self.pid, signal.SIGCONT)


def main():
    registry, server, train = sys.argv[1:4]
    d = tempfile.mkdtemp(prefix="tessel-straggler-")
    started = time.time()
    workers = []
    try:
        port_file = os.path.join(d, "registry.port")
        reg_log = os.path.join(d, "registry.log")
        spawn([registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file,
               "--metrics_address=127.0.0.1:0"], reg_log)
        reg_http = wait_for(r"metrics at http://(\S+)/metrics", reg_log)
        reg = wait_for(r"(\S+)", port_file)
        srv_log = os.path.join(d, "server0.log")
        spawn([server, "--insecure", "--registry=" + reg, "--shard=0", UCX,
               "--metrics_address=127.0.0.1:0", "--stall_report_s=2", "--lease_ttl_ms=600"],
              srv_log, env={"TMPDIR": d})
        srv_http = wait_for(r"metrics at http://(\S+)/metrics", srv_log)
        logs = [os.path.join(d, "worker%d.log" % r) for r in range(WORLD)]
        workers += [spawn([train, "--registry=" + reg, "--job=" + JOB, "--rank=%d" % r,
                          "--world=%d" % WORLD, "--servers=1", "--steps=100000",
                          "--layers=16,32,4", "--samples=256", "--batch=16", "--optimizer=sgd",
                          "--lr=0.01", "--step_sleep_ms=100", "--lease_ttl_ms=600",
                          "--log_every=1000000", UCX], logs[r]) for r in range(WORLD)]

        def metrics():
            return get("http://%s/metrics" % srv_http)

        def step():
            return int(gauge(metrics(), "tessel_server_job_step") or 0)

        def status_stragglers():
            return [s for s in json.loads(get("http://%s/status.json" % reg_http))["stragglers"]
                    if s["job"] == JOB]

        # 1. Fault-free: scored, nobody named.
        worst, scored, named_json = 0.0, False, False
        deadline = time.time() + 30
        while step() < 30 and time.time() < deadline:
            m = metrics()
            scores = [gauge(m, "tessel_rank_straggler_score", r) for r in range(WORLD)]
            if all(s is not None for s in scores):
                scored = True
                worst = max([worst] + scores)
            named_json = named_json or bool(status_stragglers())
            time.sleep(0.1)
        check(step() >= 30, "fault-free: the job reached step 30 (step %d)" % step())
        check(scored, "fault-free: every rank scored (the highest score %.2f)" % worst)
        check(worst < 1.5, "fault-free: no score at 1.5 or more (the highest %.2f)" % worst)
        check("straggler" not in read(srv_log) and "straggler" not in read(logs[0]) and
              not named_json, "fault-free: nobody named (server and rank 0 logs, /status.json)")

        # 2. Rank SLOW about 3x slower: named within 10 steps everywhere.
        cycle = DutyCycle(workers[SLOW].pid, 0.2, 0.1)
        at = step()
        cycle.start()
        found = {}
        pid = workers[SLOW].pid
        deadline = time.time() + 20
        while len(found) < 4 and time.time() < deadline:
            now = step()
            if "log" not in found and re.search(
                    r"rank %d \(registry rank %d; host \S+ pid %d\) is a straggler" %
                    (SLOW, SLOW, pid), read(srv_log)):
                found["log"] = now
            if "metric" not in found and (gauge(metrics(), "tessel_rank_straggler_score", SLOW)
                                          or 0) >= 1.5:
                found["metric"] = now
            if "status.json" not in found and any(
                    s["rank"] == SLOW and s["pid"] == pid and s["score"] >= 1.5
                    for s in status_stragglers()):
                found["status.json"] = now
            if "rank 0" not in found and re.search(
                    r"rank %d \(registry rank %d; host \S+ pid %d\) is a straggler" %
                    (SLOW, SLOW, pid), read(logs[0])):
                found["rank 0"] = now
            time.sleep(0.05)
        for where in ("log", "metric", "status.json", "rank 0"):
            got = found.get(where)
            check(got is not None and got - at <= 10,
                  "slowed from step %d: named by %s at step %s" % (at, where, got))
        m = metrics()
        others = [gauge(m, "tessel_rank_straggler_score", r) or 0 for r in range(WORLD)
                  if r != SLOW]
        check(max(others) < 1.5, "slowed: the other ranks' scores stay low (%s)" %
              ", ".join("%.2f" % s for s in others))
        jobs = [j for j in json.loads(get("http://%s/status.json" % reg_http))["jobs"]
                if j["name"] == JOB]
        phases = {p["registry_rank"]: p for p in (jobs[0]["phases"] if jobs else [])}
        check(sorted(phases) == list(range(WORLD)) and
              all(p["compute_s"] >= 0.09 for p in phases.values()),
              "status.json: every rank's step phases, compute >= the 100 ms it stands in (%s)" %
              ", ".join("%d: compute %.3f wait %.3f" % (r, p["compute_s"], p["wait_s"])
                        for r, p in sorted(phases.items())))
        heat = jobs[0]["lateness"] if jobs else {"steps": [], "seconds": []}
        recent = heat["seconds"][-5:]
        check(len(heat["steps"]) >= 8 and all(len(row) == WORLD for row in heat["seconds"]) and
              sum(row[SLOW] == max(row) and row[SLOW] > 0.05 for row in recent) >= 4,
              "status.json: the lateness heat map (%d steps x %d ranks), rank %d the latest in "
              "4 or more of the last 5 steps" % (len(heat["steps"]), WORLD, SLOW))
        log("rank %d: score %.2f, lateness %.3f s" % (
            SLOW, gauge(m, "tessel_rank_straggler_score", SLOW) or 0,
            gauge(m, "tessel_rank_lateness_seconds", SLOW) or 0))

        # 3. Back to pace: no longer named.
        cycle.end()
        at = step()
        try:
            wait_for(r"(rank %d \(registry rank %d[^)]*\) is no longer a straggler)" %
                     (SLOW, SLOW), srv_log, timeout=15)
            check(True, "back to pace from step %d: no longer named at step %d" % (at, step()))
        except RuntimeError:
            check(False, "back to pace: the server says rank %d is no longer a straggler" % SLOW)

        # 4. A stall: the flight recorder is written, rank 1 shown waiting.
        os.kill(workers[1].pid, signal.SIGSTOP)
        try:
            path = wait_for(r"flight recorder's last \d+ steps written to (\S+)", srv_log,
                            timeout=15)
            body = read(path).rstrip().rstrip(",")
            events = json.loads(body if body.endswith("]") else body + "]")
            waiting = [e for e in events if e.get("name") == "waiting"]
            check(any(e["args"].get("rank") == 1 for e in waiting) and
                  any(e.get("name") == "push" for e in events),
                  "stall: %s has the steps' pushes and rank 1 waiting" % os.path.basename(path))
        except (RuntimeError, ValueError) as e:
            check(False, "stall: the flight recorder written and readable (%s)" % e)
        os.kill(workers[1].pid, signal.SIGCONT)
        log("took %.1f s" % (time.time() - started))
    finally:
        for p in workers:  # none left stopped
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    return finish(d)


if __name__ == "__main__":
    sys.exit(main())
