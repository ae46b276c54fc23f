#!/usr/bin/env python3
"""Tessel across hosts: every process in its own network namespace.

Each "host" is a network namespace with its own loopback and its own IP on a
bridge (tests/netns.py): the registry on host tessel-registry, shard servers
0 and 1 on tessel-server-0 and -1, workers 0 and 1 on tessel-train-0 and -1.
Nothing can reach another host's 127.0.0.1, so an address that registers
the loopback, or a transport that only works on one machine, fails here.
Data moves over UCX tcp (shared memory cannot cross hosts).

UCX 1.13 in a namespace sees two tcp devices, lo and eth0, and with the
default UCX_NET_DEVICES listens on both (inside --ucx_port_range) but never
dials a peer's loopback address: a remote tcp/lo address counts as
unreachable (with UCX_NET_DEVICES=lo every connection fails "Destination is
unreachable"). So nothing beyond --ucx_tls=tcp is needed.

Runs, one after another, of the same job (the built-in MLP 64-128-10, zero2,
Adam, 3000 steps, 2 workers x 2 shards, checkpoint every 100 steps,
--recover):
  reference       tessel-demo: a local cluster compared with the same
                  training in one process ("max relative difference 0"); its
                  final parameters are the bits every run below must match.
  1 host, tcp     every process in one namespace over 127.0.0.1, --ucx_tls=tcp
  1 host, shm     the same over shared memory (posix,sysv,self)
  5 hosts         --listen=IP:PORT on each host's own IP, flags on the
                  command line
  5 hosts, config the deployment contract: --config=FILE (JSON, one for all),
                  wildcard --listen=0.0.0.0 with the address to register from
                  POD_IP (registry), --advertise_address (server 0) or found
                  (server 1: the first non-loopback IPv4), names through
                  /etc/hosts (tessel-registry:7070), --shard_from_hostname
                  with HOSTNAME=tessel-server-N, ranks from
                  JOB_COMPLETION_INDEX, --ucx_port_range, --health_listen
  5 hosts, kill   the config run again, with shard server 1 killed (-9) in its
                  namespace mid-training and restarted there with the same
                  flags; the workers recover by themselves.
Checked: every worker exits 0; rank 0's final parameters are bitwise the
reference's; every shard's state digest equals the 1-host tcp run's; on
several hosts every server registered its host's IP (never 127.0.0.1); in
the config runs every TCP listener of a server or worker host is a declared
port (gRPC, health) or inside --ucx_port_range, servers and the registry are
SERVING (grpc.health.v1, probed from a worker host), and a worker host's own
127.0.0.1 reaches nothing of theirs; after the kill, both workers report
the recovery and the restarted server serves again.
Reported, never asserted: steps/s of each run (the median of rank 0's
progress lines) and the recovery time (kill -> training again -> first step
done).

Needs root (network namespaces). Usage:
  multihost_test.py REGISTRY SERVER TRAIN TESSELCTL DEMO HEALTH_PROBE
TESSEL_MULTIHOST_KEEP=1 keeps the logs of a passing run (a failing run's are
always kept and their ends printed); TESSEL_MULTIHOST_BUDGET_S bounds the
whole run (default 240 s).
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import netns
from proc_util import check, failures, log

REGISTRY, SERVER, TRAIN, CTL, DEMO, PROBE = [os.path.abspath(a) for a in sys.argv[1:7]]
ROOT = tempfile.mkdtemp(prefix="multihost-", dir=os.environ.get("TEST_TMPDIR"))
# The whole test gives up (and cleans up) after this many seconds.
BUDGET_S = float(os.environ.get("TESSEL_MULTIHOST_BUDGET_S", "240"))
DEADLINE = time.time() + BUDGET_S
STEPS, EVERY, KILL_AT, LOG_EVERY = 3000, 100, 1000, 100
LEASE_MS = 1500
MODEL = {"layers": "64,128,10", "samples": 4096, "batch": 64, "optimizer": "adam", "lr": 0.01,
         "strategy": "zero2", "steps": STEPS}
REG_PORT, REG_HEALTH, SRV_PORT, SRV_HEALTH = 7070, 7071, 7100, 7101
UCX_PORTS = (7200, 7299)
SHARDS, WORLD = 2, 2
SHM = "posix,sysv,self"

results = []  # one dict per run, for the summary


def left(cap):
    """Seconds a wait may take: at most cap, never past the deadline."""
    return max(0.5, min(cap, DEADLINE - time.time()))


def flag_args(d):
    return ["--%s=%s" % (k, str(v).lower() if isinstance(v, bool) else v) for k, v in d.items()]


def tail(path, n=10):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f if "UCX  WARN" not in l][-n:]
    except FileNotFoundError:
        return ["(no log)"]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Proc:
    """A process of the cluster: what it runs where, so it can be restarted
    identically (same host, argv and environment)."""

    def __init__(self, host, argv, env, logpath):
        self.host, self.argv, self.env, self.log = host, argv, env, logpath
        self.p = None

    def start(self):
        env = dict(os.environ, **self.env)
        self.p = self.host.popen(self.argv, env=env, stdout=open(self.log, "a"),
                                 stderr=subprocess.STDOUT)
        return self

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.kill()
        if self.p:
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


class Cluster:
    """One job's processes. layout: "onehost" (one namespace, 127.0.0.1),
    "explicit" (5 namespaces, --listen=IP:PORT, command-line flags) or
    "config" (5 namespaces, --config=FILE, wildcard listens)."""

    NAMES = ["tessel-registry", "tessel-server-0", "tessel-server-1", "tessel-train-0",
             "tessel-train-1"]

    def __init__(self, name, layout, tls):
        self.name, self.layout, self.tls = name, layout, tls
        self.d = os.path.join(ROOT, re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))
        os.makedirs(self.d)
        self.ckdir = os.path.join(self.d, "checkpoints")
        self.final = os.path.join(self.d, "final.npy")
        self.loss = os.path.join(self.d, "loss.txt")
        self.bridge = netns.Bridge(name)
        if layout == "onehost":
            one = self.bridge.add_host("onehost")
            self.hosts = {n: one for n in self.NAMES}
        else:
            self.hosts = {n: self.bridge.add_host(n) for n in self.NAMES}
            table = {n: h.ip for n, h in self.hosts.items()}
            for h in self.hosts.values():
                h.hosts_file(table)  # what cluster DNS gives a pod
        self.servers, self.workers = {}, {}
        self.registry = None
        self.t_workers = None

    def ip(self, n):
        return "127.0.0.1" if self.layout == "onehost" else self.hosts[n].ip

    def server_port(self, s):
        """One port on every host; distinct ones when all share one host."""
        return SRV_PORT + 10 + s if self.layout == "onehost" else SRV_PORT

    def logpath(self, what):
        return os.path.join(self.d, what + ".log")

    # --- starting -------------------------------------------------------
    def config_file(self):
        """The job config, as deploy/ mounts it into every pod."""
        cfg = {
            "common": {"registry": "tessel-registry:%d" % REG_PORT, "pool": "default"},
            "registry": {"listen": "0.0.0.0:%d" % REG_PORT,
                         "health_listen": "0.0.0.0:%d" % REG_HEALTH, "backend": "memory",
                         "lease_ttl_ms": LEASE_MS},
            "server": {"listen": "0.0.0.0:%d" % SRV_PORT,
                       "health_listen": "0.0.0.0:%d" % SRV_HEALTH,
                       "ucx_port_range": "%d-%d" % UCX_PORTS, "ucx_tls": self.tls,
                       "checkpoint_dir": self.ckdir, "lease_ttl_ms": LEASE_MS,
                       "shard_from_hostname": True},
            "worker": dict(MODEL, job="mh", world=WORLD, servers=SHARDS, ucx_tls=self.tls,
                           ucx_port_range="%d-%d" % UCX_PORTS, checkpoint_every_steps=EVERY,
                           checkpoint_initial=True, recover=True, recovery_timeout_s=30,
                           lease_ttl_ms=LEASE_MS, step_timeout_s=30, connect_timeout_s=30,
                           log_every=LOG_EVERY, out=self.final, loss_log=self.loss),
        }
        path = os.path.join(self.d, "tessel.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        return path

    def start(self):
        reg_host = self.hosts["tessel-registry"]
        port_file = os.path.join(self.d, "registry.addr")
        if self.layout == "config":
            cfg = self.config_file()
            self.reg = "tessel-registry:%d" % REG_PORT
            self.registry = Proc(reg_host, [REGISTRY, "--insecure", "--config=" + cfg, "--port_file=" + port_file],
                                 {"POD_IP": reg_host.ip}, self.logpath("registry")).start()
        else:
            self.reg = "%s:%d" % (self.ip("tessel-registry"), REG_PORT)
            self.registry = Proc(reg_host, [REGISTRY, "--insecure", "--listen=" + self.reg,
                                            "--port_file=" + port_file,
                                            "--lease_ttl_ms=%d" % LEASE_MS],
                                 {}, self.logpath("registry")).start()
        if not reg_host.wait_listening(REG_PORT, left(20), proc=self.registry.p):
            raise RuntimeError("%s: the registry did not listen on port %d: %s" %
                               (self.name, REG_PORT, tail(self.registry.log)))
        self.reg_addr_file = port_file
        for s in range(SHARDS):
            n = "tessel-server-%d" % s
            host = self.hosts[n]
            if self.layout == "config":
                argv = [SERVER, "--insecure", "--config=" + cfg]
                if s == 0:
                    argv.append("--advertise_address=" + host.ip)
                env = {"HOSTNAME": n}
            else:
                argv = [SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                        "--listen=%s:%d" % (self.ip(n), self.server_port(s)),
                        "--ucx_tls=" + self.tls, "--lease_ttl_ms=%d" % LEASE_MS,
                        "--checkpoint_dir=" + self.ckdir]
                env = {}
            self.servers[s] = Proc(host, argv, env, self.logpath("server%d" % s)).start()
        self.wait_servers(set(range(SHARDS)))
        self.t_workers = time.time()
        for r in range(WORLD):
            n = "tessel-train-%d" % r
            if self.layout == "config":
                argv, env = [TRAIN, "--config=" + cfg], {"JOB_COMPLETION_INDEX": str(r)}
            else:
                argv = [TRAIN, "--registry=" + self.reg, "--job=mh", "--rank=%d" % r,
                        "--world=%d" % WORLD, "--servers=%d" % SHARDS, "--ucx_tls=" + self.tls,
                        "--checkpoint_every_steps=%d" % EVERY, "--checkpoint_initial",
                        "--recover", "--recovery_timeout_s=30", "--lease_ttl_ms=%d" % LEASE_MS,
                        "--step_timeout_s=30", "--connect_timeout_s=30",
                        "--log_every=%d" % LOG_EVERY, "--out=" + self.final,
                        "--loss_log=" + self.loss] + flag_args(MODEL)
                env = {}
            self.workers[r] = Proc(self.hosts[n], argv, env, self.logpath("worker%d" % r)).start()

    # --- looking ---------------------------------------------------------
    def ctl(self, args, timeout=15):
        """tesselctl run on worker 0's host, as a user there would."""
        r = self.hosts["tessel-train-0"].run([CTL, "--registry", self.reg] + args,
                                             timeout=left(timeout))
        return r.stdout if r.returncode == 0 else None

    def members(self):
        """{shard: (grpc_address, pid)} of the servers in the registry."""
        out = self.ctl(["members", "--group", "default", "-o", "json"])
        got = {}
        for view in json.loads(out or "[]"):
            for m in view.get("members", []):
                if m.get("role") == "server":
                    got[int(m.get("rank", 0))] = (m.get("grpc_address", ""),
                                                  int(m.get("pid", 0)))
        return got

    def wait_servers(self, shards, pids=None, timeout=30):
        """Waits until every shard in `shards` is registered (by the process
        with pids[shard] when given)."""
        end = time.time() + left(timeout)
        while time.time() < end:
            m = self.members()
            if all(s in m and (pids is None or m[s][1] == pids[s]) for s in shards):
                return m
            for s in shards:
                if self.servers[s].p.poll() is not None:
                    raise RuntimeError("%s: server %d exited (%s): %s" %
                                       (self.name, s, self.servers[s].p.returncode,
                                        tail(self.servers[s].log)))
            time.sleep(0.1)
        raise RuntimeError("%s: servers %s did not register within %d s: %s" %
                           (self.name, sorted(shards), timeout,
                            [tail(self.servers[s].log, 3) for s in shards]))

    def steps_done(self, rank):
        lines = [l for l in read("%s.rank%d" % (self.loss, rank)).split("\n") if l.strip()]
        try:
            return int(lines[-1].split()[0]) + 1 if lines else 0
        except (ValueError, IndexError):
            return 0

    def loss_lines(self, rank):
        return read("%s.rank%d" % (self.loss, rank)).count("\n")

    def wait_workers(self, timeout):
        end = time.time() + left(timeout)
        rcs = {}
        for r, w in self.workers.items():
            try:
                rcs[r] = w.p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                rcs[r] = "timeout"
        self.wall_s = time.time() - self.t_workers
        return rcs

    def shard_digests(self):
        out = self.ctl(["shards", "--job", "mh", "-o", "json"])
        try:
            return [s["stats"]["state_digest"] for s in json.loads(out)]
        except (TypeError, ValueError, KeyError):
            return None

    def probe(self, from_host, address, service=""):
        r = self.hosts[from_host].run([PROBE, "--address=" + address, "--service=" + service,
                                       "--timeout_ms=2000"], timeout=left(10))
        return (r.stdout + r.stderr).strip()

    def rate(self):
        """Median steps/s of rank 0's progress lines after the first (the
        first includes connecting and the first checkpoint)."""
        rates = [float(x) for x in re.findall(r"([\d.]+) steps/s", read(self.logpath("worker0")))]
        return statistics.median(rates[1:] if len(rates) > 1 else rates) if rates else None

    def show(self):
        for f in sorted(os.listdir(self.d)):
            if f.endswith(".log"):
                log("    --- %s/%s" % (self.name, f))
                for line in tail(os.path.join(self.d, f)):
                    log("    " + line[:300])

    def close(self):
        self.bridge.close()
        left_over = self.bridge.leftovers()
        check(not left_over, "%s: every namespace, veth, bridge and /etc/netns entry removed%s" %
              (self.name, (" (left: %s)" % left_over) if left_over else ""))


def same_bits(path, ref):
    try:
        with open(path, "rb") as f:
            return f.read() == ref
    except FileNotFoundError:
        return False


def listeners_ok(c, host_name, allowed_ports, ucx_range):
    """Every TCP listener in the namespace is an allowed port or in the UCX
    range. Returns (ok, the listeners)."""
    got = c.hosts[host_name].listening()
    bad = sorted("%s:%d" % a for a in got
                 if a[1] not in allowed_ports and not ucx_range[0] <= a[1] <= ucx_range[1])
    return not bad, sorted("%s:%d" % a for a in got), bad


def reference():
    """tessel-demo with the same model: its cluster's final parameters, which
    it compares with the same training in one process."""
    d = os.path.join(ROOT, "reference")
    os.makedirs(d)
    args = [DEMO, "--servers=%d" % SHARDS, "--workers=%d" % WORLD, "--ucx_tls=tcp",
            "--timeout_s=120", "--log_every=%d" % STEPS] + flag_args(MODEL)
    t = time.time()
    r = subprocess.run(args, capture_output=True, text=True, timeout=left(180),
                       env=dict(os.environ, TMPDIR=d))
    out = r.stdout + r.stderr
    m = re.search(r"logs in (\S+)", out)
    ok = check(r.returncode == 0 and "max relative difference vs single process: 0 " in out and m,
               "reference: tessel-demo's %d-process cluster equals one-process training "
               "(max relative difference 0; %.1f s)" % (SHARDS + WORLD, time.time() - t))
    if not ok:
        log(out[-3000:])
        raise RuntimeError("no reference")
    with open(os.path.join(m.group(1), "final.npy"), "rb") as f:
        return f.read()


def clean_run(name, layout, tls, ref, digests_ref):
    """One clean run; checks correctness; returns the shard digests."""
    t0 = time.time()
    c = Cluster(name, layout, tls)
    res = {"name": name, "hosts": 1 if layout == "onehost" else 5, "tls": tls,
           "listen": {"onehost": "127.0.0.1", "explicit": "host IP",
                      "config": "0.0.0.0 + advertise"}[layout]}
    results.append(res)
    digests = None
    try:
        c.start()
        if layout != "onehost":
            check_addresses(c)
        if layout == "config":
            check_config_cluster(c)
        rcs = c.wait_workers(120)
        ok = check(all(v == 0 for v in rcs.values()),
                   "%s: both workers finish %d steps (exit %s, %.1f s)" %
                   (name, STEPS, rcs, c.wall_s))
        res["rate"], res["wall"] = c.rate(), c.wall_s
        res["bitwise"] = same_bits(c.final, ref)
        check(res["bitwise"], "%s: final parameters bitwise equal to the reference" % name)
        digests = c.shard_digests()
        if digests_ref is not None:
            check(digests == digests_ref and digests,
                  "%s: every shard's state digest equals the 1-host tcp run's" % name)
        else:
            check(digests and len(digests) == SHARDS, "%s: %d shard digests read" %
                  (name, len(digests or [])))
        if not ok or not res["bitwise"]:
            c.show()
    except Exception as e:
        check(False, str(e) if str(e).startswith(name) else "%s: %s" % (name, e))
        c.show()
    finally:
        c.close()
        res["total"] = time.time() - t0
    return digests


def check_addresses(c):
    """Every server registered its own host's IP, which other hosts can
    dial; never a loopback."""
    m = c.members()
    for s in range(SHARDS):
        addr = m.get(s, ("", 0))[0]
        want = c.hosts["tessel-server-%d" % s].ip
        check(addr.rsplit(":", 1)[0] == want,
              "%s: server %d registered %s (its host's IP is %s)" % (c.name, s, addr, want))
    addr = read(c.reg_addr_file).strip()
    check(addr == "%s:%d" % (c.hosts["tessel-registry"].ip, REG_PORT),
          "%s: the registry reports %s (its host's IP %s)" %
          (c.name, addr, c.hosts["tessel-registry"].ip))


def check_config_cluster(c):
    """Ports and health as a NetworkPolicy and kubelet probes see them."""
    for s in range(SHARDS):
        n = "tessel-server-%d" % s
        ok, got, bad = listeners_ok(c, n, {SRV_PORT, SRV_HEALTH}, UCX_PORTS)
        check(ok, "%s: %s listens only on %d, %d and UCX ports %d-%d (%s%s)" %
              (c.name, n, SRV_PORT, SRV_HEALTH, UCX_PORTS[0], UCX_PORTS[1], ", ".join(got),
               "; outside: " + ", ".join(bad) if bad else ""))
        for service in ("", "liveness"):
            got = c.probe("tessel-train-0", "%s:%d" % (n, SRV_HEALTH), service)
            check(got == "SERVING", "%s: %s's health service %r is SERVING from "
                  "tessel-train-0 (%s)" % (c.name, n, service, got))
    got = c.probe("tessel-train-0", "tessel-registry:%d" % REG_HEALTH)
    check(got == "SERVING", "%s: the registry is ready from tessel-train-0 (%s)" % (c.name, got))
    # The bug a wildcard listen that registers 127.0.0.1 causes: another host
    # dials its own loopback, where nothing of the server's is.
    got = c.probe("tessel-train-0", "127.0.0.1:%d" % SRV_HEALTH)
    check(got.startswith("UNREACHABLE"),
          "%s: from tessel-train-0, 127.0.0.1:%d is its own loopback, not a server's (%s)" %
          (c.name, SRV_HEALTH, got[:80]))


def kill_run(ref, digests_ref):
    """The config run with shard server 1 killed (-9) mid-training and
    restarted in its namespace with the same flags."""
    name = "5 hosts, config, kill"
    t0 = time.time()
    c = Cluster(name, "config", "tcp")
    res = {"name": name, "hosts": 5, "tls": "tcp", "listen": "0.0.0.0 + advertise"}
    results.append(res)
    try:
        c.start()
        end = time.time() + left(60)
        while c.steps_done(1) < KILL_AT and time.time() < end:
            if any(w.p.poll() is not None for w in c.workers.values()):
                break
            time.sleep(0.002)
        at = c.steps_done(1)
        victim = c.servers[1]
        kill_t = time.time()
        victim.p.send_signal(signal.SIGKILL)
        victim.p.wait(timeout=10)
        log("%s: killed server 1 (pid %d, in namespace %s) at step %d of %d" %
            (name, victim.p.pid, victim.host.ns, at, STEPS))
        check(KILL_AT <= at < STEPS - 2 * EVERY, "%s: the kill landed mid-training (step %d)" %
              (name, at))
        victim.start()  # the same host, argv and environment
        restart_t = time.time()
        # Poll every rank's loss log: the first line written after a rank's
        # "recovered" time is its first step done after the recovery.
        snaps = {r: [] for r in range(WORLD)}
        end = time.time() + left(90)
        while time.time() < end and any(w.p.poll() is None for w in c.workers.values()):
            now = time.time()
            for r in range(WORLD):
                snaps[r].append((now, c.loss_lines(r)))
            time.sleep(0.005)
        rcs = c.wait_workers(60)
        ok = check(all(v == 0 for v in rcs.values()),
                   "%s: both workers finish %d steps (exit %s, %.1f s)" %
                   (name, STEPS, rcs, c.wall_s))
        rec = {}
        for r in range(WORLD):
            m = re.findall(r"recovered; going on from step (\d+) \(unix_ms (\d+)\)",
                           read(c.logpath("worker%d" % r)))
            if m:
                rec[r] = (int(m[-1][0]), int(m[-1][1]) / 1000.0)
        check(len(rec) == WORLD, "%s: every worker recovered by itself (%s)" %
              (name, ", ".join("rank %d from step %d" % (r, s) for r, (s, _) in rec.items())))
        if len(rec) == WORLD:
            back = max(t for _, t in rec.values())
            first = []
            for r, (_, t) in rec.items():
                before = [n for ts, n in snaps[r] if ts <= t]
                base = before[-1] if before else 0
                after = [ts for ts, n in snaps[r] if ts > t and n > base]
                if after:
                    first.append(after[0])
            res["recovery_s"] = back - kill_t
            res["first_step_s"] = (max(first) - kill_t) if len(first) == WORLD else None
            res["rollback"] = min(s for s, _ in rec.values())
            res["restart_s"] = restart_t - kill_t
            check(res["rollback"] % EVERY == 0 and res["rollback"] <= at,
                  "%s: rolled back to the checkpoint of step %d (killed at step %d)" %
                  (name, res["rollback"], at))
        res["rate"], res["wall"] = c.rate(), c.wall_s
        res["bitwise"] = same_bits(c.final, ref)
        check(res["bitwise"], "%s: final parameters bitwise equal to the reference" % name)
        digests = c.shard_digests()
        check(digests == digests_ref and digests,
              "%s: every shard's state digest equals the 1-host tcp run's" % name)
        m = c.members()
        want = c.hosts["tessel-server-1"].ip
        check(m.get(1, ("", 0))[1] == victim.p.pid and m[1][0].rsplit(":", 1)[0] == want,
              "%s: the restarted server 1 (pid %d) registered %s" %
              (name, victim.p.pid, m.get(1, ("?", 0))[0]))
        got = c.probe("tessel-train-1", "tessel-server-1:%d" % SRV_HEALTH)
        check(got == "SERVING", "%s: the restarted server 1 is ready (%s)" % (name, got))
        if not ok or not res["bitwise"]:
            c.show()
    except Exception as e:
        check(False, str(e) if str(e).startswith(name) else "%s: %s" % (name, e))
        c.show()
    finally:
        c.close()
        res["total"] = time.time() - t0


def summary():
    log("\nmultihost: the same job (MLP %s, %s, %d steps, 2 workers x 2 shards, checkpoint "
        "every %d steps)" % (MODEL["layers"], MODEL["strategy"], STEPS, EVERY))
    log("%-24s %5s  %-23s %-20s %8s %8s %8s  %s" %
        ("run", "hosts", "transport", "listen", "steps/s", "train s", "total s", "bitwise"))
    for r in results:
        log("%-24s %5d  %-23s %-20s %8s %8s %8s  %s" %
            (r["name"], r["hosts"], "UCX " + r["tls"], r["listen"],
             "%.0f" % r["rate"] if r.get("rate") else "-",
             "%.2f" % r["wall"] if r.get("wall") else "-",
             "%.1f" % r["total"] if r.get("total") else "-",
             {True: "yes", False: "NO"}.get(r.get("bitwise"), "-")))
    log("steps/s: median of rank 0's progress lines (every %d steps) after the first; "
        "train s: workers started -> both exited; total s: with namespaces, start-up and "
        "checks. Speed is reported, never asserted (2 shared cores)." % LOG_EVERY)
    for r in results:
        if "recovery_s" in r:
            log("recovery (%s): server 1 killed -9, restarted %.2f s later; workers training "
                "again (rolled back to step %d) %.2f s after the kill, first step done %s s "
                "after it" % (r["name"], r["restart_s"], r["rollback"], r["recovery_s"],
                              "%.2f" % r["first_step_s"] if r.get("first_step_s") else "?"))


def main():
    if os.geteuid() != 0:
        log("multihost_test needs root: it creates network namespaces, veths and a bridge")
        return 1
    # A Bazel timeout sends SIGTERM: unwind, so every Cluster closes (kills
    # its processes, removes its namespaces) before the SIGKILL.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t0 = time.time()
    try:
        ref = reference()
        digests = clean_run("1 host, tcp", "onehost", "tcp", ref, None)
        clean_run("1 host, shm", "onehost", SHM, ref, digests)
        clean_run("5 hosts", "explicit", "tcp", ref, digests)
        clean_run("5 hosts, config", "config", "tcp", ref, digests)
        kill_run(ref, digests)
    except Exception as e:
        check(False, "multihost: %s" % e)
    except SystemExit:
        log("multihost: terminated; every cluster started so far is stopped and removed")
        raise
    finally:
        summary()
        log("multihost: %.1f s in all" % (time.time() - t0))
    if failures:
        log("%d check(s) failed; logs in %s" % (len(failures), ROOT))
        return 1
    if os.environ.get("TESSEL_MULTIHOST_KEEP"):
        log("multihost: logs kept in %s" % ROOT)
    else:
        shutil.rmtree(ROOT, ignore_errors=True)
    log("multihost: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
