#!/usr/bin/env python3
"""tests/netns.py, the namespaces-as-hosts helper, does what tests rely on.

  - hosts reach each other by IP over TCP, and a host's 127.0.0.1 is its own:
    a listener on one host's loopback is not reachable from another host;
  - hosts_file() names resolve inside the namespace at once (no DNS wait);
  - popen() gives the real pid (kill -9 reaches the process), inside the
    namespace (its eth0 has the host's IP);
  - two Bridges in one process get distinct networks and names;
  - close() kills every process it started and leaves no namespace, link or
    /etc/netns entry; a second close() is harmless;
  - what a process killed with -9 left behind is swept by the next Bridge().

Needs root. Usage: netns_test.py
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import netns
from proc_util import check, failures, log

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable or "python3"


def names_present(prefix_pid):
    """Namespaces, links and /etc/netns entries named for pid prefix_pid."""
    tag = "%s-%d-" % (netns.PREFIX, prefix_pid)
    got = [n for n in netns._netns_list() if n.startswith(tag)]
    got += [n for n in netns._links() if n.startswith(tag)]
    if os.path.isdir("/etc/netns"):
        got += ["/etc/netns/" + n for n in os.listdir("/etc/netns") if n.startswith(tag)]
    return got


def isolation():
    with netns.Bridge("isolation") as br:
        a, b = br.add_host("alpha"), br.add_host("beta")
        check(a.ip != b.ip and a.ip.startswith(str(br.network.network_address)[:-1]),
              "hosts get distinct addresses on the bridge's network (%s, %s in %s)" %
              (a.ip, b.ip, br.network))
        eth0 = a.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"]).stdout
        check(a.ip in eth0, "popen/run run inside the namespace: its eth0 has %s" % a.ip)
        check(b.tcp_reaches(a, port=41000), "beta reaches alpha's IP over TCP")
        # A listener on alpha's loopback only.
        p = a.popen([PY, "-c", "import socket,time\ns=socket.socket()\n"
                     "s.bind(('127.0.0.1',41001));s.listen();time.sleep(60)"])
        check(a.wait_listening(41001, 10, proc=p), "alpha listens on 127.0.0.1:41001")
        probe = "import socket,sys\ntry:\n socket.create_connection((sys.argv[1],41001),1)\n" \
                " print('connected')\nexcept OSError as e:\n print('refused', e)"
        own = a.run([PY, "-c", probe, "127.0.0.1"]).stdout.strip()
        other = b.run([PY, "-c", probe, "127.0.0.1"]).stdout.strip()
        check(own == "connected" and other.startswith("refused"),
              "alpha's 127.0.0.1 is its own: alpha connects (%s), beta does not (%s)" %
              (own, other[:60]))
        a.hosts_file({"tessel-registry": b})
        t = time.time()
        r = a.run(["getent", "ahostsv4", "tessel-registry"], timeout=10)
        took = time.time() - t
        check(r.returncode == 0 and r.stdout.split()[0] == b.ip and took < 2,
              "hosts_file: tessel-registry resolves to %s inside alpha in %.2f s" %
              (r.stdout.split()[0] if r.stdout else "?", took))
        r = b.run(["getent", "hosts", "tessel-registry"], timeout=10)
        check(r.returncode != 0, "beta has no such name (hosts files are per host)")
        victim = b.popen(["sleep", "60"])
        victim.send_signal(signal.SIGKILL)
        check(victim.wait(timeout=5) == -signal.SIGKILL and
              str(victim.pid) not in b.run(["ip", "netns", "pids", b.ns]).stdout.split(),
              "popen's pid is the process: SIGKILL ends it")
        straggler = a.popen(["sh", "-c", "sleep 60 & sleep 60"])
        with netns.Bridge("second") as br2:
            c = br2.add_host("alpha")
            check(br2.name != br.name and c.ns != a.ns and
                  not br2.network.overlaps(br.network),
                  "a second Bridge gets its own names and network (%s %s, %s %s)" %
                  (br.name, br.network, br2.name, br2.network))
        check(not br2.leftovers(), "the second Bridge's close leaves nothing")
        pids = a.run(["ip", "netns", "pids", a.ns]).stdout.split()
    check(straggler.poll() is not None, "close() killed the processes popen() started")
    alive = [q for q in pids if netns._alive(int(q))]
    check(not alive, "close() killed every process left in the namespaces (%s)" % alive)
    check(not br.leftovers(), "close() leaves no namespace, link or /etc/netns entry (%s)" %
          br.leftovers())
    br.close()
    check(True, "a second close() is harmless")


def sweep():
    """A process that dies by SIGKILL with namespaces up; the next Bridge()
    removes what it left, processes inside included."""
    code = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, %r)
        import netns
        br = netns.Bridge("doomed")
        h = br.add_host("h")
        h.hosts_file({})
        h.popen(["sleep", "120"])
        print("ready", flush=True)
        time.sleep(120)
    """ % HERE)
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check(line == "ready", "a child process set up a bridge and a host")
    before = names_present(p.pid)
    inside = []
    for ns in before:
        if not ns.startswith("/") and ns in netns._netns_list():
            inside += subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                     text=True).stdout.split()
    p.send_signal(signal.SIGKILL)
    p.wait()
    check(len(before) >= 3, "after kill -9 its namespace, links and /etc/netns remain (%s)" %
          before)
    netns._swept = False  # the sweep runs once per process; force it again
    with netns.Bridge("sweeper"):
        pass
    after = names_present(p.pid)
    check(not after, "the next Bridge() swept them (left: %s)" % after)
    time.sleep(0.2)
    alive = [q for q in inside if netns._alive(int(q))]
    check(inside and not alive, "and killed the processes left inside (%s, alive %s)" %
          (inside, alive))


def main():
    if os.geteuid() != 0:
        log("netns_test needs root: it creates network namespaces, veths and bridges")
        return 1
    t = time.time()
    try:
        isolation()
        sweep()
    except Exception as e:
        check(False, "netns_test: %s: %s" % (type(e).__name__, e))
    log("netns_test: %.1f s" % (time.time() - t))
    if failures:
        log("%d check(s) failed" % len(failures))
        return 1
    log("netns_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
