"""Network namespaces as hosts, for tests that need several machines.

Each host is a Linux network namespace with its own loopback and an eth0
whose address is on a /24 shared through a Linux bridge in the root
namespace, so hosts reach each other by IP, never through each other's
loopback (127.0.0.1 in one host is that host only). Needs root and iproute2
(`ip`, `ss`); stdlib only. A test that uses it is tagged "local" (Bazel's
sandbox blocks `ip netns`) and "plain_only".

Example:
    from netns import Bridge
    with Bridge("tessel") as br:              # a free 10.2xx.y.0/24
        a, b = br.add_host("registry"), br.add_host("server-0")
        b.hosts_file({"tessel-registry": a})   # /etc/hosts inside b
        p = a.popen(["tessel-registry", "--insecure", "--listen=%s:7070" % a.ip],
                    stdout=open("reg.log", "w"), stderr=subprocess.STDOUT)
        a.wait_listening(7070, timeout=10)
        b.run(["tesselctl", "--registry=tessel-registry:7070", "members"])
    # every process started through br is killed; namespaces, veths, the
    # bridge, /etc/netns/<ns>, firewall changes are gone.

Naming. Everything this module creates is named from PREFIX ("tsl") and the
pid of the creating process: the bridge link "tsl-<pid>-b<n>", the root end
of each veth "tsl-<pid>-v<k>", each namespace "tsl-<pid>-<n>-<host name>"
(and /etc/netns/<that>). Parallel test processes never collide, and a
Bridge() sweeps away what an earlier process that died without cleaning up
(kill -9, a Bazel timeout) left: anything with the prefix whose pid is no
longer running.

Name lookups. A namespace has no DNS server (its resolv.conf points at its own
loopback, so a lookup fails at once instead of timing out): names come from
hosts_file(). gRPC's default c-ares resolver then still waits about 3 s per
lookup for an AAAA answer nobody gives (measured with Debian 12's gRPC), so
popen() and run() set GRPC_DNS_RESOLVER=native (glibc: /etc/hosts answers
at once) unless the caller's env sets it. Kubernetes' cluster DNS answers
AAAA queries, so this is the test hosts' quirk, not a deployment's.

Firewall. With br_netfilter loaded and net.bridge.bridge-nf-call-iptables=1,
frames crossing a bridge go through the root namespace's iptables FORWARD
chain, where a DROP policy (Docker sets one) would silently cut hosts off.
So a Bridge inserts `-i BR -o BR -j ACCEPT` at the top of FORWARD where the
iptables tool exists, and removes it on close. If the first two hosts still
cannot reach each other over TCP (nftables drop rules, tables without the
tool), it sets bridge-nf-call-iptables=0 and restores the earlier value when
the last process that needed it is done (reference-counted under
/run/tessel-netns, so parallel tests do not restore it under each other).
"""
import atexit
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time

PREFIX = "tsl"
IP = shutil.which("ip") or "/sbin/ip"
NF_SYSCTL = "/proc/sys/net/bridge/bridge-nf-call-iptables"
STATE_DIR = "/run/tessel-netns"
# Set in the environment of every process started in a namespace (see Name
# lookups).
HOST_ENV = {"GRPC_DNS_RESOLVER": "native"}
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

_bridge_count = 0
_veth_count = 0
_swept = False


def _sh(argv, check=True, timeout=30):
    """Runs argv; returns its stdout. Raises RuntimeError naming the command
    and its stderr when check and it fails."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("netns: `%s` failed (exit %d): %s" %
                           (" ".join(argv), p.returncode, p.stderr.strip()))
    return p.stdout


def _alive(pid):
    """True while pid runs (a zombie, killed but not yet reaped, is dead)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _owner_pid(name, prefix):
    """The pid in a name made by this module ("<prefix>-<pid>-..."), or None."""
    m = re.match(r"^%s-(\d+)-" % re.escape(prefix), name)
    return int(m.group(1)) if m else None


def _netns_list():
    out = _sh([IP, "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links():
    out = _sh([IP, "-o", "link", "show"], check=False)
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _kill_netns_pids(ns, timeout=5.0):
    """SIGKILLs every process inside namespace ns; waits until none is left."""
    end = time.time() + timeout
    while True:
        pids = [int(p) for p in _sh([IP, "netns", "pids", ns], check=False).split()
                if p.isdigit()]
        if not pids:
            return True
        if time.time() > end:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _delete_netns(ns):
    _kill_netns_pids(ns)
    _sh([IP, "netns", "delete", ns], check=False)
    shutil.rmtree(os.path.join("/etc/netns", ns), ignore_errors=True)


def _host_env(env):
    out = dict(os.environ if env is None else env)
    for k, v in HOST_ENV.items():
        out.setdefault(k, v)
    return out


def _iptables():
    return shutil.which("iptables")


def _forward_rule(bridge):
    return ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]


def _nf_call_iptables():
    try:
        with open(NF_SYSCTL) as f:
            return f.read().strip()
    except OSError:
        return None


class _NfRef:
    """Reference count of the processes that need bridge-nf-call-iptables=0:
    the first saves the old value and sets 0, the last one out (or the sweep
    after it died) restores it. Files under STATE_DIR, under an flock."""

    def __init__(self):
        self.dir = os.path.join(STATE_DIR, "nf-off")
        self.saved = os.path.join(STATE_DIR, "nf-call-iptables.saved")

    def _locked(self, fn):
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(STATE_DIR, "lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return fn()

    def _users(self):
        users = []
        for f in os.listdir(self.dir):
            if f.isdigit() and _alive(int(f)):
                users.append(int(f))
            else:
                os.unlink(os.path.join(self.dir, f))
        return users

    def _restore_if_unused(self):
        if not self._users() and os.path.exists(self.saved):
            value = open(self.saved).read().strip()
            try:
                with open(NF_SYSCTL, "w") as f:
                    f.write(value)
            except OSError:
                pass
            os.unlink(self.saved)

    def acquire(self):
        def go():
            if not os.path.exists(self.saved):
                with open(self.saved, "w") as f:
                    f.write(_nf_call_iptables() or "1")
            open(os.path.join(self.dir, str(os.getpid())), "w").close()
            with open(NF_SYSCTL, "w") as f:
                f.write("0")
        self._locked(go)

    def release(self):
        def go():
            try:
                os.unlink(os.path.join(self.dir, str(os.getpid())))
            except FileNotFoundError:
                pass
            self._restore_if_unused()
        self._locked(go)

    def sweep(self):
        if os.path.isdir(self.dir):
            self._locked(self._restore_if_unused)


def sweep_stale(prefix=PREFIX):
    """Removes what dead processes left: namespaces (and the processes still
    in them), links, /etc/netns entries and FORWARD rules named with `prefix`
    and a pid that no longer runs; restores bridge-nf-call-iptables if its
    last user died. Returns what it removed (names)."""
    removed = []

    def stale(name):
        pid = _owner_pid(name, prefix)
        return pid is not None and pid != os.getpid() and not _alive(pid)

    for ns in _netns_list():
        if stale(ns):
            _delete_netns(ns)
            removed.append(ns)
    for link in _links():
        if stale(link):
            _sh([IP, "link", "delete", link], check=False)
            removed.append(link)
    if os.path.isdir("/etc/netns"):
        for ns in os.listdir("/etc/netns"):
            if stale(ns):
                shutil.rmtree(os.path.join("/etc/netns", ns), ignore_errors=True)
                removed.append("/etc/netns/" + ns)
    ipt = _iptables()
    if ipt:
        for line in _sh([ipt, "-w", "-S", "FORWARD"], check=False).splitlines():
            m = re.match(r"^-A FORWARD -i (\S+) -o \1 -j ACCEPT$", line)
            if m and stale(m.group(1)):
                _sh([ipt, "-w", "-D"] + _forward_rule(m.group(1)), check=False)
                removed.append("iptables FORWARD rule for " + m.group(1))
    _NfRef().sweep()
    return removed


def _used_networks():
    nets = []
    for cmd in ([IP, "-o", "-4", "addr", "show"], [IP, "-4", "route", "show"]):
        for tok in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b", _sh(cmd, check=False)):
            try:
                nets.append(ipaddress.ip_network(tok, strict=False))
            except ValueError:
                pass
    return nets


def _free_cidr():
    """A 10.20x.y.0/24 that overlaps no address or route in the root
    namespace, starting from one picked by pid so parallel runs differ."""
    used = _used_networks()
    start = os.getpid() % 2000
    for i in range(2000):
        k = (start + i) % 2000
        net = ipaddress.ip_network("10.%d.%d.0/24" % (201 + k // 250, k % 250))
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise RuntimeError("netns: no free 10.201-208.x.0/24 network for a bridge")


class Host:
    """One namespace on a Bridge: `ip` is its eth0 address, `name` the host
    name it was added with, `ns` the namespace's name (`ip netns exec NS`)."""

    def __init__(self, bridge, name, ns, ip, veth):
        self.bridge = bridge
        self.name = name
        self.ns = ns
        self.ip = ip
        self.veth = veth

    def __repr__(self):
        return "Host(%s, %s, ns=%s)" % (self.name, self.ip, self.ns)

    def argv(self, argv):
        """argv wrapped to run inside this host's namespace."""
        return [IP, "netns", "exec", self.ns] + [str(a) for a in argv]

    def popen(self, argv, env=None, stdout=None, stderr=None, **kwargs):
        """Starts argv inside the namespace (subprocess.Popen arguments; env
        is the whole environment, None inherits; plus HOST_ENV where env
        does not set those). `ip netns exec` execs the command itself, so
        the Popen's pid is the process's pid and kill()/send_signal() reach
        it. The Bridge kills it on close."""
        p = subprocess.Popen(self.argv(argv), env=_host_env(env), stdout=stdout, stderr=stderr,
                             **kwargs)
        self.bridge._procs.append(p)
        return p

    def run(self, argv, timeout=60, check=False, env=None, **kwargs):
        """subprocess.run inside the namespace; output captured as text
        unless stdout/stderr are given; killed after `timeout` seconds."""
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs["capture_output"] = True
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(argv), timeout=timeout, check=check, env=_host_env(env),
                              **kwargs)

    def hosts_file(self, mapping):
        """Writes /etc/netns/NS/hosts, which `ip netns exec` bind-mounts over
        /etc/hosts for processes started afterwards: localhost, this host's
        own name, then `mapping` {name: ip or Host}."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        entries = {self.name: self.ip}
        entries.update(mapping)
        for name, ip in entries.items():
            lines.append("%s\t%s" % (ip.ip if isinstance(ip, Host) else ip, name))
        d = os.path.join("/etc/netns", self.ns)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def listening(self):
        """{(address, port)} of the TCP sockets listening in the namespace."""
        out = self.run(["ss", "-Hltn"], timeout=10).stdout
        got = set()
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 4:
                addr, _, port = cols[3].rpartition(":")
                if port.isdigit():
                    got.add((addr.strip("[]"), int(port)))
        return got

    def wait_listening(self, port, timeout=15.0, proc=None):
        """Waits until something listens on TCP `port` in the namespace;
        False after `timeout` s or as soon as `proc` (a Popen) has exited."""
        end = time.time() + timeout
        while time.time() < end:
            if any(p == port for _, p in self.listening()):
                return True
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def tcp_reaches(self, other, port=47999, timeout=5.0):
        """True if a TCP connection from this host reaches `other` (a Host)
        on other.ip:port; a one-shot listener is started there for it."""
        py = sys.executable or "python3"
        server = other.popen([py, "-c",
                              "import socket,sys\n"
                              "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
                              "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(1);s.settimeout(%f)\n"
                              "c,_=s.accept();c.sendall(b'ok')\n" % timeout,
                              other.ip, str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not other.wait_listening(port, timeout, proc=server):
                return False
            r = self.run([py, "-c",
                          "import socket,sys\n"
                          "c=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=%f)\n"
                          "c.settimeout(%f);print(c.recv(2).decode())\n" % (timeout / 2, timeout / 2),
                          other.ip, str(port)], timeout=timeout + 2)
            return r.returncode == 0 and r.stdout.strip() == "ok"
        except subprocess.TimeoutExpired:
            return False
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()


class Bridge:
    """A Linux bridge in the root namespace with hosts (namespaces) on it.

    Bridge(name, cidr): `name` is a label for messages (the link itself is
    named "tsl-<pid>-b<n>", unique per process); `cidr` the hosts' /24 (or
    smaller) network, e.g. "10.201.0.0/24": the bridge takes the first
    address, hosts the next ones. cidr=None picks a free 10.20x.y.0/24,
    which is what tests run in parallel want; a given cidr that overlaps an
    address or route of the root namespace is refused.
    Also a context manager; close() runs at exit and on SIGTERM as well."""

    def __init__(self, name="tsl-br", cidr=None, prefix=PREFIX):
        global _bridge_count, _swept
        if os.geteuid() != 0:
            raise PermissionError("netns: network namespaces need root")
        if len("%s-%d-v99" % (prefix, 4194304)) > 15:
            raise ValueError("netns: prefix %r too long for 15-character link names" % prefix)
        if not _swept:
            gone = sweep_stale(prefix)
            if gone:
                print("netns: removed leftovers of dead runs: %s" % ", ".join(gone),
                      file=sys.stderr, flush=True)
            _swept = True
        self.label = name
        self.prefix = prefix
        self.index = _bridge_count
        _bridge_count += 1
        self.name = "%s-%d-b%d" % (prefix, os.getpid(), self.index)
        self.hosts = []
        self._procs = []
        self._closed = False
        self._forward_rule = False
        self._nf_ref = None
        if cidr is None:
            self.network = _free_cidr()
        else:
            self.network = ipaddress.ip_interface(cidr).network
            clash = [u for u in _used_networks() if u.prefixlen > 0 and u.overlaps(self.network)]
            if clash:
                raise RuntimeError("netns: bridge %s: network %s overlaps %s already in the root "
                                   "namespace; pass cidr=None for a free one" %
                                   (name, self.network, clash[0]))
        self._addresses = self.network.hosts()
        self.ip = str(next(self._addresses))
        atexit.register(self.close)
        if (signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and
                _is_main_thread()):
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            _sh([IP, "link", "add", self.name, "type", "bridge"])
            _sh([IP, "addr", "add", "%s/%d" % (self.ip, self.network.prefixlen), "dev",
                 self.name])
            _sh([IP, "link", "set", self.name, "up"])
            ipt = _iptables()
            if _nf_call_iptables() == "1" and ipt:
                if subprocess.run([ipt, "-w", "-I"] + _forward_rule(self.name),
                                  capture_output=True).returncode == 0:
                    self._forward_rule = True
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def add_host(self, name):
        """Creates namespace "<prefix>-<pid>-<n>-<name>" with lo up and eth0
        (a veth whose other end is on the bridge) up at the next free
        address, default route via the bridge. The second host added checks
        that TCP crosses the bridge (see the module's Firewall note)."""
        global _veth_count
        if self._closed:
            raise RuntimeError("netns: bridge %s is closed" % self.label)
        if not _HOST_NAME.match(name):
            raise ValueError("netns: host name %r: letters, digits, '-', '_', '.' only" % name)
        if any(h.name == name for h in self.hosts):
            raise ValueError("netns: bridge %s already has a host %r" % (self.label, name))
        try:
            ip = str(next(self._addresses))
        except StopIteration:
            raise RuntimeError("netns: network %s of bridge %s is full" %
                               (self.network, self.label))
        ns = "%s-%d-%d-%s" % (self.prefix, os.getpid(), self.index, name)
        veth = "%s-%d-v%d" % (self.prefix, os.getpid(), _veth_count)
        peer = "%s-%d-p%d" % (self.prefix, os.getpid(), _veth_count)
        _veth_count += 1
        if len(veth) > 15:
            raise RuntimeError("netns: too many hosts in one process (link name %s)" % veth)
        host = Host(self, name, ns, ip, veth)
        self.hosts.append(host)
        _sh([IP, "netns", "add", ns])
        _sh([IP, "link", "add", veth, "type", "veth", "peer", "name", peer])
        _sh([IP, "link", "set", peer, "netns", ns])
        _sh([IP, "link", "set", veth, "master", self.name])
        _sh([IP, "link", "set", veth, "up"])
        _sh(host.argv([IP, "link", "set", "lo", "up"]))
        _sh(host.argv([IP, "link", "set", peer, "name", "eth0"]))
        _sh(host.argv([IP, "addr", "add", "%s/%d" % (ip, self.network.prefixlen), "dev", "eth0"]))
        _sh(host.argv([IP, "link", "set", "eth0", "up"]))
        _sh(host.argv([IP, "route", "add", "default", "via", self.ip]))
        if os.path.exists("/etc/resolv.conf"):
            # No DNS server is reachable from a namespace: point lookups at
            # the host's own loopback, where they fail at once instead of
            # timing out (getent/gRPC would wait 5 s per query).
            d = os.path.join("/etc/netns", ns)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "resolv.conf"), "w") as f:
                f.write("# tests/netns.py: no DNS in test namespaces\n"
                        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        if len(self.hosts) == 2:
            self._check_forwarding(self.hosts[0], host)
        return host

    def _check_forwarding(self, a, b):
        if b.tcp_reaches(a):
            return
        if _nf_call_iptables() == "1" and self._nf_ref is None:
            self._nf_ref = _NfRef()
            self._nf_ref.acquire()
            print("netns: bridge %s: TCP between hosts was dropped with "
                  "bridge-nf-call-iptables=1; set it to 0 until this run ends" % self.label,
                  file=sys.stderr, flush=True)
            if b.tcp_reaches(a):
                return
        raise RuntimeError("netns: bridge %s: host %s (%s) cannot reach host %s (%s) over TCP; "
                           "a firewall in the root namespace may drop bridged traffic" %
                           (self.label, b.name, b.ip, a.name, a.ip))

    def close(self):
        """Kills every process started through this bridge and everything
        left in its namespaces, deletes the namespaces, veths, the bridge,
        /etc/netns/<ns>, and undoes its firewall changes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for p in self._procs:
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        for h in self.hosts:
            _delete_netns(h.ns)
            if h.veth in _links():
                _sh([IP, "link", "delete", h.veth], check=False)
        _sh([IP, "link", "delete", self.name], check=False)
        if self._forward_rule:
            _sh([_iptables(), "-w", "-D"] + _forward_rule(self.name), check=False)
            self._forward_rule = False
        if self._nf_ref is not None:
            self._nf_ref.release()
            self._nf_ref = None
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    def leftovers(self):
        """Names of this bridge's namespaces, links and /etc/netns entries that
        still exist (empty after close())."""
        left = [h.ns for h in self.hosts if h.ns in _netns_list()]
        links = _links()
        left += [n for n in [self.name] + [h.veth for h in self.hosts] if n in links]
        left += ["/etc/netns/" + h.ns for h in self.hosts
                 if os.path.exists(os.path.join("/etc/netns", h.ns))]
        return left


def _is_main_thread():
    import threading
    return threading.current_thread() is threading.main_thread()


def _exit_on_sigterm(signum, frame):
    # A Bazel timeout sends SIGTERM: unwind so finally blocks and atexit
    # handlers (Bridge.close) run.
    raise SystemExit(128 + signum)
