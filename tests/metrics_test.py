"""Prometheus metrics scraped from a real cluster: a registry, two shard
servers and two tessel-train workers on loopback, each with
--metrics_address=127.0.0.1:0. Every scrape passes `promtool check metrics`
(Debian's prometheus), and the values answer what they claim: frames and
bytes against what the job moved, updated elements against steps x
parameters, checkpoints written and their age, members by role, control RPCs
by method and code, the workers' step time and its phases. (Refused frames
by reason: tests/bad_input_test.)

The Grafana dashboard (deploy/grafana/tessel.json): every query parses
(`promtool check rules`) and names only metrics the scrapes carry.

tessel-launch --metrics_address serves its own (worker starts, failures,
restarts) and its embedded registry's.

Usage: metrics_test.py REGISTRY SERVER TRAIN DASHBOARD LAUNCH
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, spawn  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
STEPS = 120
LAYERS = [16, 32, 4]  # 16*32+32 + 32*4+4 = 676 parameters
PARAMS = 16 * 32 + 32 + 32 * 4 + 4
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')


def metrics_address(log_path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(log_path):
            m = re.search(r"metrics at http://(\S+)/metrics", open(log_path).read())
            if m:
                return m.group(1)
        time.sleep(0.05)
    raise RuntimeError("no 'metrics at' line in " + log_path)


def scrape(address):
    with urllib.request.urlopen("http://%s/metrics" % address, timeout=5) as r:
        return r.read().decode(), r.headers.get("Content-Type")


def parse(text):
    """{(name, frozenset(labels.items())): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError("bad sample line: %r" % line)
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


def value(samples, name, **labels):
    want = set((k, str(v)) for k, v in labels.items())
    found = [v for (n, l), v in samples.items() if n == name and want <= set(l)]
    return sum(found) if found else None


def promtool(text, what):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    problems = (r.stdout + r.stderr).strip()
    check(r.returncode == 0 and not problems,
          "promtool check metrics: %s%s" % (what, (": " + problems[:400]) if problems else ""))


def check_launcher(launch, d):
    llog = os.path.join(d, "launch.log")
    p = spawn([launch, "--nproc_per_node=2", "--servers=1", "--job=lm", "--max_restarts=1",
               "--metrics_address=127.0.0.1:0", "--run_dir=" + os.path.join(d, "launch"), "--",
               "/bin/sh", "-c", 'if [ "$TESSEL_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; '
               'then exit 3; fi; sleep 3'], llog)
    address = metrics_address(llog)
    text = ""
    deadline = time.time() + 20
    while time.time() < deadline:
        text = scrape(address)[0]
        s = parse(text)
        if value(s, "tessel_launch_worker_starts_total") == 3:
            break
        time.sleep(0.1)
    promtool(text, "tessel-launch")
    s = parse(text)
    check(value(s, "tessel_launch_worker_starts_total") == 3 and
          value(s, "tessel_launch_worker_failures_total") == 1 and
          value(s, "tessel_launch_restarts_total") == 1,
          "tessel-launch: 3 starts, 1 failure, 1 restart (%s, %s, %s)" %
          (value(s, "tessel_launch_worker_starts_total"),
           value(s, "tessel_launch_worker_failures_total"),
           value(s, "tessel_launch_restarts_total")))
    check(value(s, "tessel_registry_members", role="server") == 1,
          "tessel-launch: its embedded registry's metrics (1 server)")
    p.wait(timeout=60)
    check(p.returncode == 0, "tessel-launch ended 0 after the restart")


def check_dashboard(path, scraped, d):
    dash = json.load(open(path))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 20, "dashboard: %d queries in %d panels" % (len(exprs), len(dash["panels"])))
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "tessel:dashboard_query_%d" % i,
         "expr": e.replace("$__rate_interval", "1m").replace("$job", ".*")}
        for i, e in enumerate(exprs)]}]}
    rules_path = os.path.join(d, "dashboard-rules.json")
    json.dump(rules, open(rules_path, "w"))  # JSON is YAML
    r = subprocess.run(["promtool", "check", "rules", rules_path], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, "dashboard: every query parses (promtool check rules)%s" %
          ("" if r.returncode == 0 else ": " + (r.stdout + r.stderr)[-400:]))
    used = set()
    for e in exprs:
        used |= set(re.findall(r"\b((?:tessel|grpc_server)_[a-z_]+)\b", e))
    missing = sorted(used - scraped)
    check(not missing, "dashboard: its %d metrics are all in the scrapes%s" %
          (len(used), " (missing %s)" % missing if missing else ""))


def main():
    registry, server, train, dashboard, launch = sys.argv[1:6]
    if shutil.which("promtool") is None:
        check(False, "promtool on PATH (Debian's prometheus: scripts/install_deps.sh)")
        return 1
    d = tempfile.mkdtemp(prefix="tessel-metrics-")
    try:
        reg_log = os.path.join(d, "registry.log")
        port_file = os.path.join(d, "registry.port")
        spawn([registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file,
               "--metrics_address=127.0.0.1:0", "--lease_ttl_ms=1500"], reg_log)
        reg_http = metrics_address(reg_log)
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            time.sleep(0.05)
        reg = open(port_file).read().strip()
        servers = []
        for shard in range(2):
            slog = os.path.join(d, "server%d.log" % shard)
            spawn([server, "--insecure", "--registry=" + reg, "--shard=%d" % shard, UCX,
                   "--checkpoint_dir=" + os.path.join(d, "ck"), "--lease_ttl_ms=1500",
                   "--metrics_address=127.0.0.1:0"], slog)
            servers.append(metrics_address(slog))
        # Workers exit when training ends: a thread finds each one's address
        # in its log as soon as it is written and scrapes it until it exits,
        # keeping the last scrape.
        procs = []
        last = [None, None]
        wlogs = [os.path.join(d, "worker%d.log" % rank) for rank in range(2)]
        done = threading.Event()

        def scraper():
            addresses = [None, None]
            while not done.is_set():
                for i, wlog in enumerate(wlogs):
                    if addresses[i] is None and os.path.exists(wlog):
                        m = re.search(r"metrics at http://(\S+)/metrics", open(wlog).read())
                        addresses[i] = m.group(1) if m else None
                    if addresses[i] is not None:
                        try:
                            last[i] = scrape(addresses[i])[0]
                        except OSError:
                            pass
                time.sleep(0.002)

        t = threading.Thread(target=scraper, daemon=True)
        t.start()
        for rank in range(2):
            procs.append(spawn([train, "--registry=" + reg, "--job=mlp", "--rank=%d" % rank,
                                "--world=2", "--servers=2", "--steps=%d" % STEPS,
                                "--layers=" + ",".join(map(str, LAYERS)), "--samples=512",
                                "--batch=8", "--optimizer=adam", "--strategy=zero2",
                                "--checkpoint_every_steps=40", "--log_every=1000000", UCX,
                                "--metrics_address=127.0.0.1:0",
                                "--out=" + os.path.join(d, "out%d.npy" % rank)], wlogs[rank]))
        for p in procs:
            p.wait(timeout=120)
        done.set()
        t.join()
        check(all(p.returncode == 0 for p in procs), "both workers trained %d steps" % STEPS)

        for rank, text in enumerate(last):
            check(text is not None, "worker %d scraped while training" % rank)
            if text is None:
                continue
            promtool(text, "worker %d" % rank)
            w = parse(text)
            step = value(w, "tessel_worker_step", job="mlp", rank=rank)
            check(step is not None and 0 < step <= STEPS, "worker %d step gauge: %s" % (rank, step))
            # A scrape is not atomic across series: the gauge (exposed first)
            # may lag the histograms by the step in progress.
            n = value(w, "tessel_worker_step_seconds_count", job="mlp", rank=rank)
            check(n is not None and step - 1 <= n <= step,
                  "worker %d step histogram counts every step after the first: %s of %s" %
                  (rank, n, step))
            for phase in ("push", "wait", "pull"):
                c = value(w, "tessel_worker_step_phase_seconds_count", job="mlp", rank=rank,
                          phase=phase)
                check(c is not None and step <= c <= step + 1,
                      "worker %d phase %s observed each step: %s of %s" % (rank, phase, c, step))
            s = value(w, "tessel_worker_step_seconds_sum", job="mlp", rank=rank)
            check(s is not None and s > 0, "worker %d step time sum %.4f s" % (rank, s or 0))

        # Servers: wait for the last checkpoint (step 120) to be finalized.
        deadline = time.time() + 20
        while time.time() < deadline:
            s0 = parse(scrape(servers[0])[0])
            if value(s0, "tessel_checkpoint_newest_step", job="mlp") == STEPS:
                break
            time.sleep(0.1)
        total_elements = 0
        pushes = 0
        for shard, a in enumerate(servers):
            text, ctype = scrape(a)
            check(ctype.startswith("text/plain; version=0.0.4"), "content type %r" % ctype)
            promtool(text, "server %d" % shard)
            s = parse(text)
            check(value(s, "tessel_server_job_step", job="mlp", shard=shard) == STEPS,
                  "server %d job step %s" % (shard, value(s, "tessel_server_job_step", job="mlp")))
            total_elements += value(s, "tessel_server_updated_elements_total", job="mlp",
                                    shard=shard) or 0
            pushes += value(s, "tessel_server_frames_received_total", shard=shard, type="push") or 0
            rb = value(s, "tessel_server_received_bytes_total", shard=shard)
            pb = value(s, "tessel_server_job_pushed_bytes_total", job="mlp", shard=shard)
            check(rb is not None and pb is not None and rb >= pb > 0,
                  "server %d bytes received %s >= the job's pushed bytes %s" % (shard, rb, pb))
            sent = value(s, "tessel_server_sent_bytes_total", shard=shard)
            pulled = value(s, "tessel_server_job_pulled_bytes_total", job="mlp", shard=shard)
            check(sent is not None and sent >= pulled > 0,
                  "server %d bytes sent %s >= the job's pulled bytes %s" % (shard, sent, pulled))
            folded = value(s, "tessel_server_job_folded_pushes_total", job="mlp", shard=shard)
            check(folded == 0, "server %d folded pushes exported, none at W=2 (prefix order "
                  "needs three ranks): %s" % (shard, folded))
            uc = value(s, "tessel_server_update_seconds_count", job="mlp", shard=shard)
            check(uc is not None and uc >= STEPS, "server %d bucket updates timed: %s" % (shard, uc))
            ok = value(s, "tessel_checkpoint_writes_total", job="mlp", shard=shard, result="ok")
            check(ok == STEPS // 40 + 1 or ok == STEPS // 40,
                  "server %d checkpoint writes ok: %s" % (shard, ok))
            check((value(s, "tessel_checkpoint_written_bytes_total", job="mlp", shard=shard) or 0)
                  > 0, "server %d checkpoint bytes written" % shard)
            check(value(s, "grpc_server_handled_total", grpc_service="ShardServer",
                        grpc_method="CreateJob", grpc_code="OK") == 2,
                  "server %d CreateJob OK counted (one per worker)" % shard)
            check(value(s, "tessel_server_update_queue_depth", shard=shard) is not None,
                  "server %d update queue depth exported" % shard)
        check(total_elements == STEPS * PARAMS,
              "updated elements over both shards = steps x parameters (%d = %d x %d)" %
              (total_elements, STEPS, PARAMS))
        check(pushes == 2 * STEPS * 1 or pushes >= 2 * STEPS,
              "push frames received: %d (>= 2 ranks x %d steps)" % (pushes, STEPS))
        s0 = parse(scrape(servers[0])[0])
        age = value(s0, "tessel_checkpoint_newest_age_seconds", job="mlp")
        check(value(s0, "tessel_checkpoint_newest_step", job="mlp") == STEPS and age is not None
              and 0 <= age < 60, "newest complete checkpoint step %s, age %.2f s" %
              (value(s0, "tessel_checkpoint_newest_step", job="mlp"), age or -1))

        # Servers heartbeat every lease_ttl/3 (500 ms): wait for one.
        deadline = time.time() + 10
        while True:
            text, _ = scrape(reg_http)
            if "Heartbeat" in text or time.time() > deadline:
                break
            time.sleep(0.1)
        promtool(text, "registry")
        g = parse(text)
        check(value(g, "tessel_registry_members", role="server") == 2,
              "registry: 2 server members (%s)" % value(g, "tessel_registry_members", role="server"))
        check((value(g, "grpc_server_handled_total", grpc_service="Registry", grpc_method="Join",
                     grpc_code="OK") or 0) >= 4, "registry: Join OK counted for servers and workers")
        hb = value(g, "grpc_server_handling_seconds_count", grpc_service="Registry",
                   grpc_method="Heartbeat")
        check(hb is not None and hb > 0, "registry: Heartbeat latency histogram (%s calls)" % hb)
        check(value(g, "tessel_registry_evictions_total", cause="lease_expired") is not None,
              "registry: evictions exported from the start")
        check(value(g, "tessel_build_info") == 1, "build info")
        names = set()
        for t in [text] + [scrape(a)[0] for a in servers] + [t for t in last if t]:
            names |= {k[0] for k in parse(t)}
        check_dashboard(dashboard, names, d)
        check_launcher(launch, d)
        with open(os.path.join(d, "scrape-server0.txt"), "w") as f:
            f.write(scrape(servers[0])[0])
        log("--- a server's scrape (excerpt) ---")
        for line in scrape(servers[0])[0].splitlines():
            if "mlp" in line and ("_total" in line or "step" in line) and "bucket" not in line:
                log("  " + line)
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
