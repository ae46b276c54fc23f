"""Observability from Python: a registry with its status page
(--metrics_address), two shard servers, and two tessel.torch workers under
tessel-launch --registry with $TESSEL_METRICS_ADDRESS=127.0.0.1:0 and
$TESSEL_TIMELINE=DIR/tl-{rank}.json (observe_worker.py). Checks:
  - the status page's loss curve of the job holds rank 0's reported loss
    (step(closure)'s at the middle step, opt.report_loss's at the last), the
    exact values, and the job's step;
  - each worker serves /metrics at opt.metrics_address, where
    tessel_worker_step{job,rank} is the step count and the push phase
    histogram counted every step;
  - each rank wrote a timeline (a JSON array) with an exchange span per step;
  - without --registry, tessel-launch --metrics_address serves its embedded
    registry's status page, with rank 0's last loss on it.

Usage: observe_test.py --registry=tessel-registry --server=tessel-server
       --launch=tessel-launch --worker=observe_worker.py
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import driver  # noqa: E402

JOB = "observe"
STEPS = 20
UCX = "posix,sysv,self"


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_for(what, fn, timeout_s=60):
    """fn()'s first truthy result within timeout_s, else a failure naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = fn()
        except (OSError, ValueError):
            got = None
        if got:
            return got
        time.sleep(0.05)
    raise TimeoutError(f"no {what} within {timeout_s} s")


def grep(pattern, path):
    m = re.search(pattern, open(path).read())
    return m.group(1) if m else None


def job_row(http):
    status = json.loads(get(f"http://{http}/status.json"))
    return next((j for j in status["jobs"] if j["name"] == JOB), None)


def metric(text, name, **labels):
    """The value of the sample `name{labels...}` in a Prometheus exposition."""
    for line in text.splitlines():
        m = re.match(r"([a-z_]+)\{([^}]*)\} (\S+)$", line)
        if m and m.group(1) == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--registry", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tessel-observe-")
    procs, failures = [], []

    def spawn(cmd, log, env=None):
        p = subprocess.Popen(cmd, stdout=open(os.path.join(d, log), "w"),
                             stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            failures.append(what)

    start = time.monotonic()
    try:
        port_file = os.path.join(d, "registry.port")
        spawn([args.registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file,
               "--metrics_address=127.0.0.1:0"], "registry.log")
        http = wait_for("registry metrics address", lambda: grep(
            r"metrics at http://(\S+)/metrics", os.path.join(d, "registry.log")))
        registry = wait_for("registry port", lambda: open(port_file).read().strip())
        for shard in range(2):
            spawn([args.server, "--insecure", "--registry=" + registry, f"--shard={shard}",
                   "--ucx_tls=" + UCX], f"server{shard}.log")
        out = os.path.join(d, "out")
        os.mkdir(out)
        env = dict(os.environ, TESSEL_METRICS_ADDRESS="127.0.0.1:0", TESSEL_UCX_TLS=UCX,
                   TESSEL_TIMELINE=os.path.join(d, "tl-{rank}.json"))
        launch = spawn([args.launch, "--registry=" + registry, "--nproc_per_node=2",
                        f"--job={JOB}", "--timeout_s=150", f"--run_dir={d}/run", "--",
                        "/usr/bin/python3", args.worker, out, str(STEPS)], "launch.log", env)

        # The middle step, reported through step(closure).
        half = STEPS // 2
        wait_for(f"step {half}", lambda: os.path.exists(os.path.join(out, f"at-{half}")), 90)
        point = wait_for(f"step {half}'s loss on the status page", lambda: next(
            (p for p in job_row(http)["loss"] if p[0] == half), None), 20)
        open(os.path.join(out, f"seen-{half}"), "w").close()

        # The last step, reported through opt.report_loss.
        wait_for("both ranks done", lambda: all(
            os.path.exists(os.path.join(out, f"done-r{r}")) for r in range(2)), 60)
        losses = json.load(open(os.path.join(out, "losses.json")))
        last = wait_for(f"step {STEPS}'s loss on the status page", lambda: next(
            (p for p in job_row(http)["loss"] if p[0] == STEPS), None), 20)
        row = job_row(http)
        check(point[1] == losses[str(half)],
              f"status page: step {half} loss {point[1]} is step(closure)'s {losses[str(half)]}")
        check(last[1] == losses[str(STEPS)],
              f"status page: step {STEPS} loss {last[1]} is report_loss's {losses[str(STEPS)]}")
        check(all(p[1] == losses[str(p[0])] for p in row["loss"]),
              f"status page: all {len(row['loss'])} loss points are rank 0's reported values")
        check(row["step"] == STEPS and row["workers"] == 2,
              f"status page: job {JOB} at step {row['step']} with {row['workers']} workers")

        for r in range(2):
            address = open(os.path.join(out, f"metrics-r{r}.txt")).read()
            text = get(f"http://{address}/metrics")
            steps = metric(text, "tessel_worker_step", job=JOB, rank=str(r))
            pushes = metric(text, "tessel_worker_step_phase_seconds_count", job=JOB, rank=str(r),
                            phase="push")
            check(steps == STEPS and pushes == STEPS,
                  f"rank {r} /metrics at {address}: tessel_worker_step {steps}, push phases "
                  f"{pushes} (want {STEPS})")
        open(os.path.join(out, "finish"), "w").close()
        rc = launch.wait(timeout=60)
        check(rc == 0, f"tessel-launch exited {rc}")
        for r in range(2):
            path = os.path.join(d, f"tl-{r}.json")
            events = json.load(open(path)) if os.path.exists(path) else []
            spans = [e for e in events if e.get("name") == "exchange" and e.get("ph") == "X"]
            check(len(spans) == STEPS,
                  f"rank {r} timeline {os.path.basename(path)}: {len(events)} events, "
                  f"{len(spans)} exchange spans (want {STEPS})")

        # tessel-launch's embedded registry serves the same page beside its
        # /metrics (--metrics_address), for a job run without a registry.
        out2 = os.path.join(d, "out2")
        os.mkdir(out2)
        env2 = dict(os.environ, TESSEL_METRICS_ADDRESS="127.0.0.1:0",
                    TESSEL_TIMELINE=os.path.join(d, "tl2-{rank}.json"))
        embedded = spawn([args.launch, "--nproc_per_node=2", "--servers=2", f"--job={JOB}",
                          "--timeout_s=150", "--metrics_address=127.0.0.1:0",
                          f"--run_dir={d}/run2", "--", "/usr/bin/python3", args.worker, out2,
                          str(STEPS)], "launch2.log", env2)
        http2 = wait_for("tessel-launch's status page address", lambda: grep(
            r"status page at http://(\S+)/status", os.path.join(d, "launch2.log")), 60)
        wait_for(f"step {half} (embedded registry)",
                 lambda: os.path.exists(os.path.join(out2, f"at-{half}")), 90)
        open(os.path.join(out2, f"seen-{half}"), "w").close()
        wait_for("both ranks done (embedded registry)", lambda: all(
            os.path.exists(os.path.join(out2, f"done-r{r}")) for r in range(2)), 60)
        losses2 = json.load(open(os.path.join(out2, "losses.json")))
        last2 = wait_for(f"step {STEPS}'s loss on tessel-launch's status page", lambda: next(
            (p for p in job_row(http2)["loss"] if p[0] == STEPS), None), 20)
        check(last2[1] == losses2[str(STEPS)],
              f"tessel-launch's status page (embedded registry): step {STEPS} loss {last2[1]} "
              f"is rank 0's {losses2[str(STEPS)]}")
        open(os.path.join(out2, "finish"), "w").close()
        rc = embedded.wait(timeout=60)
        check(rc == 0, f"tessel-launch (embedded registry) exited {rc}")
    except (TimeoutError, OSError, ValueError, KeyError, TypeError) as e:
        failures.append(f"{type(e).__name__}: {e}")
        for name in ("launch.log", "launch2.log", "registry.log"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                print(f"--- {name}\n" + open(path).read()[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
    print(f"{time.monotonic() - start:.1f} s")
    if not failures:
        shutil.rmtree(d, ignore_errors=True)
    else:
        print("logs kept in " + d)
    driver.finish(failures)


if __name__ == "__main__":
    main()
