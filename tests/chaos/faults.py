"""The chaos soak's faults (tests/chaos/chaos.py): each applies itself to a
cluster, is held, and heals. A cluster is anything with the attributes they
use: hosts {name: netns.Host}, workers and servers {index: process with
kill/signal/alive}, registry, ckdir, job_running(), restart_worker(r),
start_server(s)."""
import errno
import os
import shutil
import signal
import subprocess

import netns

IPTABLES = shutil.which("iptables")
TC = shutil.which("tc") or "/sbin/tc"


def sh(argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError("`%s` failed: %s" % (" ".join(argv), p.stderr.strip()))
    return p


class Fault:
    """One fault: apply(), hold, heal(). `cls` is its class for the report."""

    def __init__(self, cls, what, hold):
        self.cls, self.what, self.hold = cls, what, hold

    def apply(self, c):
        raise NotImplementedError

    def heal(self, c):
        pass


class Kill(Fault):
    def __init__(self, kind, who, down):
        Fault.__init__(self, "kill " + kind, "kill -9 %s %d, back after %.1f s" %
                       (kind, who, down), down)
        self.kind, self.who = kind, who

    def apply(self, c):
        p = c.workers[self.who] if self.kind == "worker" else c.servers[self.who]
        p.kill()

    def heal(self, c):
        if self.kind == "worker":
            if c.job_running():  # the job may have finished meanwhile
                c.restart_worker(self.who)
        else:
            c.start_server(self.who)


class Stall(Fault):
    def __init__(self, kind, who, hold, long_):
        Fault.__init__(self, "stall %s %s" % (kind, "long" if long_ else "short"),
                       "SIGSTOP %s %d for %.1f s" % (kind, who, hold), hold)
        self.kind, self.who = kind, who

    def target(self, c):
        return c.workers[self.who] if self.kind == "worker" else c.servers[self.who]

    def apply(self, c):
        self.target(c).signal(signal.SIGSTOP)

    def heal(self, c):
        self.target(c).signal(signal.SIGCONT)


def _others(c, host):
    return [h for h in c.hosts.values() if h is not host]


class Partition(Fault):
    def __init__(self, host, hold, long_, how):
        Fault.__init__(self, "partition %s %s" % (host.split("-")[0], "long" if long_ else
                                                  "short"),
                       "partition %s (%s) for %.1f s" % (host, how, hold), hold)
        self.host, self.how = host, how

    def apply(self, c):
        h = c.hosts[self.host]
        if self.how == "link":
            sh([netns.IP, "link", "set", h.veth, "down"])
        else:  # dropped both ways, silently: at h, and at every other host
            sh(h.argv([IPTABLES, "-w", "-I", "INPUT", "-i", "eth0", "-j", "DROP"]))
            for o in _others(c, h):
                sh(o.argv([IPTABLES, "-w", "-I", "INPUT", "-s", h.ip, "-j", "DROP"]))

    def heal(self, c):
        h = c.hosts[self.host]
        if self.how == "link":
            sh([netns.IP, "link", "set", h.veth, "up"], check=False)
        else:
            sh(h.argv([IPTABLES, "-w", "-D", "INPUT", "-i", "eth0", "-j", "DROP"]), check=False)
            for o in _others(c, h):
                sh(o.argv([IPTABLES, "-w", "-D", "INPUT", "-s", h.ip, "-j", "DROP"]),
                   check=False)


class Loss(Fault):
    def __init__(self, host, hold, p):
        Fault.__init__(self, "packet loss", "drop %d%% of %s's packets for %.1f s" %
                       (p * 100, host, hold), hold)
        self.host, self.p = host, p

    def rules(self, c):
        h = c.hosts[self.host]
        stat = ["-m", "statistic", "--mode", "random", "--probability", "%.3f" % self.p, "-j",
                "DROP"]
        yield h, ["INPUT", "-i", "eth0"] + stat
        for o in _others(c, h):
            yield o, ["INPUT", "-s", h.ip] + stat

    def apply(self, c):
        for h, rule in self.rules(c):
            sh(h.argv([IPTABLES, "-w", "-I"] + rule))

    def heal(self, c):
        for h, rule in self.rules(c):
            sh(h.argv([IPTABLES, "-w", "-D"] + rule), check=False)


class SlowLink(Fault):
    def __init__(self, host, hold, mbit):
        Fault.__init__(self, "slow link", "shape %s's egress to %d Mbit/s for %.1f s" %
                       (host, mbit, hold), hold)
        self.host, self.mbit = host, mbit

    def apply(self, c):
        sh(c.hosts[self.host].argv([TC, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                                    "%dmbit" % self.mbit, "burst", "32kbit", "latency",
                                    "300ms"]))

    def heal(self, c):
        sh(c.hosts[self.host].argv([TC, "qdisc", "del", "dev", "eth0", "root"]), check=False)


class DiskFull(Fault):
    def __init__(self, hold):
        Fault.__init__(self, "disk full", "checkpoint volume full for %.1f s" % hold, hold)
        self.path = None

    def apply(self, c):
        self.path = os.path.join(c.ckdir, ".ballast")
        chunk = b"\0" * (1 << 20)
        with open(self.path, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        with open(self.path + "2", "wb", buffering=0) as f:  # the last partial MiB too
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise

    def heal(self, c):
        for p in (self.path, self.path + "2"):
            try:
                os.unlink(p)
            except (OSError, TypeError):
                pass


class RegistryRestart(Fault):
    def __init__(self, down):
        Fault.__init__(self, "registry restart", "kill -9 the registry, back after %.1f s" %
                       down, down)

    def apply(self, c):
        c.registry.kill()

    def heal(self, c):
        c.registry.start()


def fault_classes(world, shards, lease_ms, etcd):
    """Every class of fault, {name: maker taking an rng}, for a cluster of
    `world` workers and `shards` servers with leases of `lease_ms`; the etcd
    partitions only if `etcd`."""
    short = lambda rng: rng.uniform(0.3, 0.8) * lease_ms / 1000.0  # noqa: E731
    long_ = lambda rng: lease_ms / 1000.0 + rng.uniform(1.0, 4.0)  # noqa: E731
    how = lambda rng: rng.choice(["link", "drop"]) if IPTABLES else "link"  # noqa: E731
    makers = {
        "kill worker": lambda rng: Kill("worker", rng.randrange(world), rng.uniform(0.2, 2.5)),
        "kill server": lambda rng: Kill("server", rng.randrange(shards), rng.uniform(0.2, 2.5)),
        "stall worker short": lambda rng: Stall("worker", rng.randrange(world), short(rng),
                                                False),
        "stall worker long": lambda rng: Stall("worker", rng.randrange(world), long_(rng), True),
        "stall server short": lambda rng: Stall("server", rng.randrange(shards), short(rng),
                                                False),
        "stall server long": lambda rng: Stall("server", rng.randrange(shards), long_(rng), True),
        "registry restart": lambda rng: RegistryRestart(rng.uniform(0.2, 2.0)),
    }
    targets = {"train": lambda rng: "train-%d" % rng.randrange(world),
               "server": lambda rng: "server-%d" % rng.randrange(shards),
               "registry": lambda rng: "registry"}
    if etcd:
        targets["etcd"] = lambda rng: "etcd"
    for t, pick in targets.items():
        makers["partition %s short" % t] = (
            lambda pick: lambda rng: Partition(pick(rng), short(rng), False, how(rng)))(pick)
        makers["partition %s long" % t] = (
            lambda pick: lambda rng: Partition(pick(rng), long_(rng), True, how(rng)))(pick)
    anyhost = lambda rng: rng.choice(  # noqa: E731
        ["train-0", "train-1", "server-0", "server-1", "registry"])
    if IPTABLES:
        makers["packet loss"] = lambda rng: Loss(anyhost(rng), rng.uniform(3, 8),
                                                 rng.uniform(0.05, 0.3))
    makers["slow link"] = lambda rng: SlowLink(anyhost(rng), rng.uniform(3, 8),
                                               rng.randint(4, 40))
    makers["disk full"] = lambda rng: DiskFull(rng.uniform(3, 8))
    return makers
