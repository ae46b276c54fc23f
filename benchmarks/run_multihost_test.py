#!/usr/bin/env python3
"""The multi-host benchmark runs and measures what it claims, in one short
run (root: network namespaces).

Runs benchmarks/run_multihost.py for 2 hosts x 2 ranks, 2 server hosts, 1
MiB, 1 repeat of 4 timed steps, without Gloo (its library is not installed
here), and checks what the output says against what the data paths must do:
  - every contender printed a step time, CPU per step and host-link bytes;
  - Tessel's flat path (tessel-tcp-flat) moves each worker's push and pull
    over its host's link: tx and rx per step are each L x S (= 2 S) within
    10% (headers and control traffic on top), the counters measured on eth0
    inside the host;
  - Tessel's default here is host aggregation (the servers are on other
    hosts), and it says so: one partial sum leaves a host per bucket and one
    pull's parameters arrive, tx and rx each S within 10%: half the flat
    path's bytes;
  - Open MPI reduces inside a host first: tx + rx is at most 2.5 S per host
    (its ring over two hosts moves 2 S; more would mean ranks of one host
    were not on one host);
  - ratio lines in run_datapath's form;
  - no namespace, veth or bridge is left behind.
Usage: run_multihost_test.py RUN_MULTIHOST.PY BENCH SERVER REGISTRY MPI GLOO_SRC NETNS_DIR
"""
import os
import re
import subprocess
import sys

SCRIPT, BENCH, SERVER, REGISTRY, MPI, GLOO_SRC, NETNS_DIR = [os.path.abspath(a)
                                                             for a in sys.argv[1:8]]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


proc = None
if os.geteuid() != 0:
    print("SKIP: needs root (network namespaces)")
    sys.exit(0)
argv = [sys.executable, SCRIPT, "--bench=" + BENCH, "--server=" + SERVER,
        "--registry=" + REGISTRY, "--mpi=" + MPI, "--gloo_src=" + GLOO_SRC,
        "--netns=" + NETNS_DIR, "--hosts=2", "--per_host=2", "--servers=2", "--sizes_mib=1",
        "--repeats=1", "--iters=4", "--no_gloo", "--quiet_max_s=2", "--timeout_s=120"]
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
try:
    out, _ = proc.communicate(timeout=300)
except subprocess.TimeoutExpired:
    proc.kill()
    out, _ = proc.communicate()
    check(False, "the benchmark finished within 300 s")
print(out[-6000:])
check(proc.returncode == 0, "run_multihost exited 0 (%s)" % proc.returncode)
for name in ("tessel-tcp", "tessel-tcp-flat", "mpi-allreduce", "mpi-tcp-allreduce"):
    check(re.search(r"^H=2xL=2\s+%s\s+1\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s*$" % re.escape(name), out,
                    re.M) is not None, "%s: a step time" % name)
    check(re.search(r"^H=2xL=2\s+%s\s+1\s+cpu\s+[0-9.]+ ms/step" % re.escape(name), out, re.M)
          is not None, "%s: CPU per step" % name)
links = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
    r"^H=2xL=2\s+(\S+)\s+1\s+tx\s+([0-9.]+)\s+rx\s+([0-9.]+)", out, re.M)}
tx, rx = links.get("tessel-tcp-flat", (0, 0))
check(1.8 <= tx <= 2.2 and 1.8 <= rx <= 2.2,
      "Tessel's flat path: each host sends and receives L x S = 2 MiB per step (tx %.2f, rx %.2f)"
      % (tx, rx))
htx, hrx = links.get("tessel-tcp", (0, 0))
check(0.9 <= htx <= 1.1 and 0.9 <= hrx <= 1.1,
      "Tessel's host aggregation: each host sends and receives S = 1 MiB per step (tx %.2f, rx %.2f)"
      % (htx, hrx))
check(re.search(r"^# tessel-tcp: rank 0's payloads: .*host aggregation: 2 hosts \(ranks 0-1; 2-3\)",
                out, re.M) is not None, "tessel-tcp chose host aggregation and said so")
check(re.search(r"^# tessel-tcp-flat: rank 0's payloads: .*flat \(--aggregation=flat\)", out, re.M)
      is not None, "tessel-tcp-flat stayed flat and said so")
mtx, mrx = links.get("mpi-allreduce", (0, 99))
check(0.5 <= mtx + mrx <= 2.5,
      "Open MPI reduces inside a host first: tx + rx %.2f MiB <= 2.5 S per host" % (mtx + mrx))
check(re.search(r"^1\s+H=2xL=2 tessel-tcp\s+[0-9.]+ ms vs mpi-allreduce\s+[0-9.]+ ms  ratio "
                r"[0-9.]+x  cpu ratio [0-9.]+x", out, re.M) is not None, "ratio lines")
check(re.search(r"^1\s+H=2xL=2 tessel-tcp\s+[0-9.]+ ms vs tessel-tcp-flat\s+[0-9.]+ ms  ratio ",
                out, re.M) is not None, "host aggregation against the flat path")
left = [l for l in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                  text=True).stdout.splitlines() if "mhbench" in l]
check(not left, "no namespace left behind (%s)" % left)
print("%d check(s) failed" % len(failures) if failures else "PASS")
sys.exit(1 if failures else 0)
