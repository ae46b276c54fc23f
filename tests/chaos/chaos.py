#!/usr/bin/env python3
"""Chaos soak: a job trained over and over on a cluster of hosts (network
namespaces, tests/netns.py) while faults of every class are injected, one
after another, under load.

The cluster lives for the whole soak: etcd, a registry on it
(--backend=etcd; --backend=memory and no etcd faults where /usr/bin/etcd is
missing), two shard servers, two worker hosts, each process on its own host
and UCX over tcp between them. Shard servers write checkpoints to a small
tmpfs. On the worker hosts a second job ("load": a larger MLP) trains for the
whole soak, so every fault lands on loaded servers and links.

Rounds. Round 0 trains the measured job ("chaos-0": MLP, zero2, Adam, 2
workers x 2 shards, --recover, checkpoints every EVERY steps) without
faults: its final parameters, every step's loss and the shards' state
digests are the reference. Each later round trains the same job under a new
name while faults are injected one at a time: a fault is applied, held, and
healed, then the next one waits until every rank has trained again. Checked
after every round: both workers exit 0, rank 0's final parameters are
bitwise the reference's, every step's loss is logged and bitwise the
reference's (each replayed step too: a lost or twice-applied update would
change it and every later one), every shard's state digest equals the
reference's. The load job must never give up: its workers stay alive (or
finish with 0) and keep training.

Fault classes, drawn as a shuffled cycle (each once before any repeats):
  kill        SIGKILL a worker or a server; restarted 0.2-2.5 s later with
              the same flags (a worker with --resume), as Kubernetes would.
  stall       SIGSTOP a worker or a server, SIGCONT after less than a lease
              (short) or more (long: the registry drops it; it re-joins by
              itself, nobody replaces it).
  partition   cut a host off: the veth's bridge end down ("link") or every
              packet to and from it dropped by iptables ("drop"), for less
              than a lease or more; hosts: a worker, a server, the registry,
              etcd.
  loss        drop 5-30% of the packets to and from a host (iptables
              statistic; this kernel has no netem) for 3-8 s.
  slow link   shape a host's egress (tbf: 4-40 Mbit/s, up to 300 ms queued)
              for 3-8 s: delay under load.
  disk full   fill the checkpoint tmpfs for 3-8 s: checkpoints fail and
              say so; training goes on.
  registry    SIGKILL the registry; restarted 0.2-2 s later.
Reported: faults per class, the recoveries (rollbacks to a checkpoint) and
ride-throughs, the time from a fault to every rank training again (median,
worst, per class), lost or double-applied updates, the load job's steps.

Usage: chaos.py REGISTRY SERVER TRAIN TESSELCTL
Environment: TESSEL_CHAOS_MINUTES (default 2: fault rounds start until then,
and at least one full cycle of classes runs), TESSEL_CHAOS_SEED (default 1),
TESSEL_CHAOS_REPORT (write a JSON summary there), TESSEL_CHAOS_KEEP=1 keeps
the logs of a passing run, TESSEL_CHAOS_LOAD=0 runs without the load job.
Needs root (namespaces, iptables, tc, mount).
"""
import glob
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]  # faults.py; tests/netns.py, proc_util.py
import netns  # noqa: E402
from faults import fault_classes, sh  # noqa: E402
from proc_util import log, read  # noqa: E402

REGISTRY, SERVER, TRAIN, CTL = [os.path.abspath(a) for a in sys.argv[1:5]]
MINUTES = float(os.environ.get("TESSEL_CHAOS_MINUTES", "2"))
SEED = int(os.environ.get("TESSEL_CHAOS_SEED", "1"))
LOAD = os.environ.get("TESSEL_CHAOS_LOAD", "1") != "0"
ETCD = "/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None
ROOT = tempfile.mkdtemp(prefix="chaos-", dir=os.environ.get("TEST_TMPDIR"))
LEASE_MS = 2000  # etcd's smallest lease with its default timing is 2 s
STEPS, EVERY = 8000, 100
WORLD, SHARDS = 2, 2
REG_PORT, SRV_PORT, ETCD_PORT = 7070, 7100, 2379
MODEL = ["--layers=64,128,10", "--samples=4096", "--batch=64", "--optimizer=adam",
         "--lr=0.01", "--strategy=zero2"]
LOAD_MODEL = ["--layers=128,512,512,10", "--samples=8192", "--batch=128", "--optimizer=adam",
              "--lr=0.001", "--strategy=zero2"]
# A fault whose job does not train again within this is a failure.
RECOVERY_LIMIT_S = 90
CKPT_MIB = 96


def tail(path, n=8):
    return [l for l in read(path).splitlines() if "UCX  WARN" not in l][-n:]


class Proc:
    """A process on a host that can be killed and started again the same way."""

    def __init__(self, host, argv, logpath):
        self.host, self.argv, self.log = host, argv, logpath
        self.p = None

    def start(self):
        self.p = self.host.popen(self.argv, stdout=open(self.log, "a"),
                                 stderr=subprocess.STDOUT)
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def kill(self):
        if self.alive():
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        if self.p is not None:
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


class Cluster:
    def __init__(self):
        self.bridge = netns.Bridge("chaos")
        names = (["etcd"] if ETCD else []) + ["registry", "server-0", "server-1", "train-0",
                                               "train-1"]
        self.hosts = {n: self.bridge.add_host(n) for n in names}
        self.ckdir = os.path.join(ROOT, "checkpoints")
        os.makedirs(self.ckdir)
        sh(["mount", "-t", "tmpfs", "-o", "size=%dm" % CKPT_MIB, "tmpfs", self.ckdir])
        self.mounted = True
        self.reg = "%s:%d" % (self.hosts["registry"].ip, REG_PORT)
        self.etcd = self.registry = None
        self.servers, self.workers, self.load = {}, {}, {}
        self.job = None

    def logpath(self, what):
        return os.path.join(ROOT, what + ".log")

    def start_etcd(self):
        h = self.hosts["etcd"]
        url = "http://%s:%d" % (h.ip, ETCD_PORT)
        self.etcd = Proc(h, [ETCD, "--name=chaos", "--data-dir=" + os.path.join(ROOT, "etcd"),
                             "--listen-client-urls=" + url, "--advertise-client-urls=" + url,
                             "--listen-peer-urls=http://127.0.0.1:2380",
                             "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                             "--initial-cluster=chaos=http://127.0.0.1:2380",
                             "--log-level=warn", "--logger=zap"], self.logpath("etcd")).start()
        if not h.wait_listening(ETCD_PORT, 20, proc=self.etcd.p):
            raise RuntimeError("etcd did not start: %s" % tail(self.etcd.log))

    def start_registry(self):
        argv = [REGISTRY, "--insecure", "--listen=" + self.reg, "--lease_ttl_ms=%d" % LEASE_MS]
        if ETCD:
            argv += ["--backend=etcd",
                     "--etcd_endpoints=%s:%d" % (self.hosts["etcd"].ip, ETCD_PORT)]
        self.registry = Proc(self.hosts["registry"], argv, self.logpath("registry")).start()
        if not self.hosts["registry"].wait_listening(REG_PORT, 20, proc=self.registry.p):
            raise RuntimeError("the registry did not start: %s" % tail(self.registry.log))

    def start_server(self, s):
        h = self.hosts["server-%d" % s]
        self.servers[s] = Proc(h, [SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                                   "--listen=%s:%d" % (h.ip, SRV_PORT), "--ucx_tls=tcp",
                                   "--lease_ttl_ms=%d" % LEASE_MS,
                                   "--checkpoint_dir=" + self.ckdir],
                               self.logpath("server%d" % s)).start()

    def start(self):
        if ETCD:
            self.start_etcd()
        self.start_registry()
        for s in range(SHARDS):
            self.start_server(s)
        end = time.time() + 30
        while time.time() < end:
            if len([m for m in self.members() if m.get("role") == "server"]) >= SHARDS:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the servers did not register: %s" %
                               [tail(p.log, 3) for p in self.servers.values()])
        if LOAD:
            for r in range(WORLD):
                self.start_load(r, resume=False)

    def worker_argv(self, job, r, model, steps, every, out, loss, resume):
        argv = [TRAIN, "--registry=" + self.reg, "--job=" + job, "--rank=%d" % r,
                "--world=%d" % WORLD, "--servers=%d" % SHARDS, "--steps=%d" % steps,
                "--ucx_tls=tcp", "--recover", "--recovery_timeout_s=%d" % RECOVERY_LIMIT_S,
                "--lease_ttl_ms=%d" % LEASE_MS, "--step_timeout_s=60",
                "--connect_timeout_s=60", "--checkpoint_every_steps=%d" % every,
                "--checkpoint_initial", "--log_every=1000000"] + model
        if out:
            argv.append("--out=" + out)
        if loss:
            argv.append("--loss_log=" + loss)
        if resume:
            argv.append("--resume")
        return argv

    def start_load(self, r, resume):
        self.load[r] = Proc(self.hosts["train-%d" % r],
                            self.worker_argv("load", r, LOAD_MODEL, 10 ** 8, 200, None,
                                             os.path.join(ROOT, "load-loss.txt"), resume),
                            self.logpath("load%d" % r)).start()

    def start_job(self, job):
        self.job = job
        d = os.path.join(ROOT, job)
        os.makedirs(d)
        self.job_dir = d
        for r in range(WORLD):
            self.workers[r] = Proc(self.hosts["train-%d" % r],
                                   self.worker_argv(job, r, MODEL, STEPS, EVERY,
                                                    os.path.join(d, "final.npy"),
                                                    os.path.join(d, "loss.txt"), False),
                                   os.path.join(d, "worker%d.log" % r)).start()

    def restart_worker(self, r):
        p = self.workers[r]
        p.argv = [a for a in p.argv if a != "--resume"] + ["--resume"]
        p.start()

    # --- looking ------------------------------------------------------------
    def ctl(self, args, timeout=10):
        try:
            r = self.hosts["train-0"].run([CTL, "--registry", self.reg] + args, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return r.stdout if r.returncode == 0 else None

    def members(self):
        out = self.ctl(["members", "-o", "json"])
        try:
            return [m for v in json.loads(out or "[]") for m in v.get("members", [])]
        except ValueError:
            return []

    def loss_lines(self, r, d=None):
        return read(os.path.join(d or self.job_dir, "loss.txt.rank%d" % r)).count("\n")

    def load_steps(self):
        return read(os.path.join(ROOT, "load-loss.txt.rank0")).count("\n")

    def job_running(self):
        return any(w.alive() for w in self.workers.values())

    def digests(self, job):
        """Every shard's state digest of `job`; waits up to 30 s for every
        shard server to be listed (after a fault one may still be re-joining)."""
        end = time.time() + 30
        got = None
        while time.time() < end:
            out = self.ctl(["shards", "--job", job, "-o", "json"], timeout=20)
            try:
                got = [s["stats"]["state_digest"] for s in json.loads(out)]
            except (TypeError, ValueError, KeyError):
                got = None
            if got and len(got) == SHARDS:
                return got
            time.sleep(0.2)
        return got

    def close(self):
        for group in (self.workers, self.load, self.servers):
            for p in group.values():
                p.kill()
        for p in (self.registry, self.etcd):
            if p:
                p.kill()
        self.bridge.close()
        if self.mounted:
            sh(["umount", "-l", self.ckdir], check=False)
            self.mounted = False


# --- the soak -----------------------------------------------------------------
def read_losses(d):
    out = {}
    for r in range(WORLD):
        for line in read(os.path.join(d, "loss.txt.rank%d" % r)).splitlines():
            k, v = line.split()
            out.setdefault((r, int(k)), []).append(v)
    return out


def replayed_so_far(d):
    """Steps logged more than once so far (a rollback replays them), the most
    of any rank."""
    per_rank = [0] * WORLD
    for (r, _), v in read_losses(d).items():
        per_rank[r] += len(v) - 1
    return max(per_rank)


def recoveries(d):
    n = 0
    for r in range(WORLD):
        n += read(os.path.join(d, "worker%d.log" % r)).count("recovered; going on")
    return n


def wait_trained_again(c, deadline):
    """Waits until every rank of the job has logged another step, or the
    job's workers have all exited. Returns the time it happened, or None."""
    base = {r: c.loss_lines(r) for r in range(WORLD)}
    while time.time() < deadline:
        if all(c.loss_lines(r) > base[r] for r in range(WORLD)):
            return time.time()
        if not c.job_running():
            return time.time()
        time.sleep(0.02)
    return None


def wait_workers(c, timeout):
    end = time.time() + timeout
    rcs = {}
    for r, w in c.workers.items():
        try:
            rcs[r] = w.p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            rcs[r] = "timeout"
    return rcs


def run_round(c, n, rng, makers, order, ref, faults):
    """Round n: the job under faults drawn from `order` (refilled as a
    shuffled cycle). Returns the round's problems."""
    job = "chaos-%d" % n
    c.start_job(job)
    problems = []
    replayed_before = 0  # steps replayed in this round before the fault in hand
    # Let the job get going before the first fault.
    end = time.time() + 60
    while time.time() < end and min(c.loss_lines(r) for r in range(WORLD)) < STEPS // 20:
        if not c.job_running():
            break
        time.sleep(0.05)
    while (makers and c.job_running() and
           min(c.loss_lines(r) for r in range(WORLD)) < STEPS * 8 // 10):
        if not order:
            order.extend(rng.sample(sorted(makers), len(makers)))
        cls = order.pop(0)
        f = makers[cls](rng)
        f.cls = cls
        rec0 = recoveries(c.job_dir)
        # The previous fault's replays are all logged by the time the next starts.
        replayed_now = replayed_so_far(c.job_dir)
        if faults and faults[-1]["round"] == n:
            faults[-1]["replayed"] = replayed_now - replayed_before
        replayed_before = replayed_now
        at = min(c.loss_lines(r) for r in range(WORLD))
        try:
            f.apply(c)
            time.sleep(max(0.0, f.hold - 1.0))
            # Did training go on during the fault? (every rank, its last second)
            lines = [c.loss_lines(r) for r in range(WORLD)]
            time.sleep(min(1.0, f.hold))
            went_on = all(c.loss_lines(r) > lines[r] for r in range(WORLD))
            finished = not c.job_running()
        finally:
            f.heal(c)
        healed = time.time()
        back = wait_trained_again(c, healed + RECOVERY_LIMIT_S)
        rec = recoveries(c.job_dir) - rec0
        entry = {"round": n, "class": cls, "what": f.what, "at_line": at,
                 "held_s": round(f.hold, 2), "recovered": rec > 0,
                 "trained_during": went_on or finished,
                 "training_again_s": round(back - healed, 2) if back else None}
        faults.append(entry)
        log("  round %d: %-22s %-50s %s" %
            (n, cls, f.what, "%s; training again %.2f s after the fault ended%s" %
             ("the job finished during it" if finished else
             "trained on during it" if went_on else "training stopped",
             back - healed, ", rolled back" if rec else "") if back else
             "NOT training again within %d s" % RECOVERY_LIMIT_S))
        if back is None:
            problems.append("%s: not training again within %d s" % (f.what, RECOVERY_LIMIT_S))
            break
        time.sleep(rng.uniform(0.2, 1.5))
    rcs = wait_workers(c, RECOVERY_LIMIT_S + STEPS * 0.2)
    if any(rc != 0 for rc in rcs.values()):
        problems.append("workers exited %s" % rcs)
    d = c.job_dir
    if faults and faults[-1]["round"] == n and "replayed" not in faults[-1]:
        faults[-1]["replayed"] = replayed_so_far(d) - replayed_before
    if ref is None:
        return problems, {"final": read_bytes(os.path.join(d, "final.npy")),
                          "loss": read_losses(d), "digests": c.digests(job)}
    if read_bytes(os.path.join(d, "final.npy")) != ref["final"]:
        problems.append("final parameters differ from round 0's")
    losses = read_losses(d)
    missing = [k for k in range(STEPS) if not any((r, k) in losses for r in range(WORLD))]
    differ = sorted(k for k, v in losses.items()
                    if k not in ref["loss"] or any(x != ref["loss"][k][0] for x in v))
    if missing:
        problems.append("%d steps never logged (first %s)" % (len(missing), missing[:5]))
    if differ:
        problems.append("%d steps' losses differ from round 0's (first %s)" %
                        (len(differ), differ[:5]))
    digests = c.digests(job)
    if digests != ref["digests"]:
        problems.append("shard state digests %s differ from round 0's %s" %
                        (digests, ref["digests"]))
    return problems, {"missing": len(missing), "differ": len(differ),
                      "replayed": sum(len(v) - 1 for v in losses.values())}


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def show(c, d):
    for f in sorted(glob.glob(os.path.join(d, "*.log")) + glob.glob(os.path.join(ROOT, "*.log"))):
        log("    --- " + os.path.relpath(f, ROOT))
        for line in tail(f):
            log("    " + line[:300])


def main():
    if os.geteuid() != 0:
        log("chaos: needs root (network namespaces, iptables, tc, mount)")
        return 1
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    rng = random.Random(SEED)
    makers = fault_classes(WORLD, SHARDS, LEASE_MS, ETCD)
    log("chaos: %.1f min, seed %d, %d fault classes (%s), registry on %s, load job %s, "
        "lease %d ms" % (MINUTES, SEED, len(makers), ", ".join(sorted(makers)),
                         "etcd" if ETCD else "memory", "on" if LOAD else "off", LEASE_MS))
    t0 = time.time()
    end = t0 + MINUTES * 60
    faults, rounds, failed = [], [], []
    c = Cluster()
    load_start = 0
    try:
        c.start()
        problems, ref = run_round(c, 0, rng, {}, [], None, [])
        if problems or ref["final"] is None or not ref["digests"]:
            log("chaos: round 0 (no faults) failed: %s" % problems)
            show(c, c.job_dir)
            return 1
        log("  round 0: no faults, %d steps: the reference (%.1f s)" % (STEPS, time.time() - t0))
        load_start = c.load_steps()
        order = []
        n = 1
        while time.time() < end or len({f["class"] for f in faults}) < len(makers):
            problems, stats = run_round(c, n, rng, makers, order, ref, faults)
            stats.update(round=n, problems=problems,
                         faults=sum(f["round"] == n for f in faults))
            rounds.append(stats)
            log("  round %d: %s (%d faults, %d steps replayed)" %
                (n, "OK" if not problems else "FAIL: " + "; ".join(problems), stats["faults"],
                 stats.get("replayed", 0)))
            if problems:
                failed.append(n)
                show(c, c.job_dir)
                break
            if LOAD and not all(p.alive() for p in c.load.values()):
                failed.append(n)
                log("chaos: the load job gave up: %s" %
                    {r: (p.p.returncode, tail(p.log, 3)) for r, p in c.load.items()})
                break
            n += 1
    finally:
        load_steps = c.load_steps() - load_start
        c.close()
        left = c.bridge.leftovers()
        if left:
            log("chaos: left behind: %s" % left)
            failed.append("cleanup")
    times = [f["training_again_s"] for f in faults if f["training_again_s"] is not None]
    by_class = {}
    for f in faults:
        by_class.setdefault(f["class"], []).append(f)
    summary = {
        "minutes": round((time.time() - t0) / 60, 1),
        "rounds": len(rounds),
        "faults": len(faults),
        "classes_covered": "%d of %d" % (len(by_class), len(makers)),
        "recoveries (rolled back)": sum(f["recovered"] for f in faults),
        "rode through (no rollback)": sum(not f["recovered"] for f in faults),
        "trained on during the fault": sum(f["trained_during"] for f in faults),
        "training again s median": round(statistics.median(times), 2) if times else None,
        "training again s worst": max(times) if times else None,
        "lost or double-applied steps": sum(r.get("missing", 0) + r.get("differ", 0)
                                            for r in rounds),
        "steps replayed": sum(r.get("replayed", 0) for r in rounds),
        "load job steps (rank 0)": load_steps if LOAD else "off",
        "failed rounds": len(failed),
    }
    log("\nchaos: per class: n, rolled back, trained on during the fault, steps replayed "
        "(per fault: median / worst), training again after the fault ended (median / worst s)")
    for cls in sorted(by_class):
        fs = by_class[cls]
        ts = [f["training_again_s"] for f in fs if f["training_again_s"] is not None]
        rs = [f["replayed"] for f in fs if "replayed" in f]
        log("  %-24s n=%-3d rolled back %-3d trained on %-3d replayed %-9s %s" % (
            cls, len(fs), sum(f["recovered"] for f in fs), sum(f["trained_during"] for f in fs),
            "%d / %d" % (statistics.median(rs), max(rs)) if rs else "-",
            "%.1f / %.1f" % (statistics.median(ts), max(ts)) if ts else "-"))
    log("chaos: summary")
    for k, v in summary.items():
        log("  %-30s %s" % (k, v))
    if os.environ.get("TESSEL_CHAOS_REPORT"):
        with open(os.environ["TESSEL_CHAOS_REPORT"], "w") as f:
            json.dump({"summary": summary, "faults": faults, "rounds": rounds}, f, indent=1)
    if failed:
        log("chaos: FAIL (logs in %s)" % ROOT)
        return 1
    if not os.environ.get("TESSEL_CHAOS_KEEP"):
        shutil.rmtree(ROOT, ignore_errors=True)
    log("chaos: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
