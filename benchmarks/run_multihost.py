#!/usr/bin/env python3
"""Tessel's data path across hosts against the all-reduce it replaces.

Hosts are network namespaces on this machine (tests/netns.py): each has its
own eth0 on a bridge, so every byte between hosts crosses a veth pair and the
kernel's tcp stack, as it would a network. They share this machine's cores
and memory: what the run measures is the data path's shape (bytes over host
links, messages, CPU), not a real network's speed.

Topology: H worker hosts with L ranks each (W = H * L), and for Tessel S more
hosts with one shard server each and one host for the registry. Rank r runs
on worker host r // L for every contender.

Contenders (each run of each gets fresh processes; interleaved, the order
rotated each repeat, each after the machine was quiet as in run_datapath):
  tessel-tcp          datapath_bench workers (one process per rank, in its
                      host's namespace) over UCX tcp to the S server hosts,
                      as they choose by default (--aggregation=auto: host
                      aggregation here, docs/hierarchical.md): the ranks of a
                      host sum their gradients over shared memory, one partial
                      sum per bucket goes to the servers (reduce in rank order,
                      SGD), one pull per host, the parameters passed on inside.
  tessel-tcp-flat     the same with --aggregation=flat: every rank pushes and
                      pulls over its host's link itself.
  mpi-allreduce       Open MPI MPI_Allreduce: shared memory (vader) between
                      the ranks of a host, tcp between hosts. mpirun starts
                      its daemons in the hosts' namespaces through an rsh agent
                      (`ip netns exec`, and a UTS namespace per host so each
                      has its own host name: Open MPI uses shared memory only
                      between ranks it sees on one node).
  mpi-tcp-allreduce   the same over tcp only (btl tcp,self).
  gloo-allreduce      Gloo's ring allreduce over tcp (eth0), one process per
                      rank in its host's namespace.
Open MPI runs with mpi_yield_when_idle=1: this machine has fewer cores than
processes, and Open MPI's default busy polling then makes a 1 MiB allreduce
across these hosts ~25x slower (measured: 16.9 ms against 0.62 ms).

Every contender times a step the same way (a barrier, then the step; the
step's time is the slowest rank's) and samples, over its timed steps, each
process's CPU and each host's eth0 byte counters (benchmarks/bench_probe.h).
Printed: per-run median step times (min / median / max over runs), CPU per
step of all the contender's processes, bytes per step over a worker host's
link (tx and rx, the mean over worker hosts; Tessel's server hosts carry the
other end), and ratio-of-medians lines in run_datapath's form:
  64    H=2xL=2 tessel-tcp   21.10 ms vs mpi-allreduce   25.32 ms  ratio 1.20x

Needs root (network namespaces), Open MPI, and Gloo (libgloo-dev: installed
when missing).

Usage: bazel run //benchmarks:run_multihost -- [--hosts=2] [--per_host=2]
         [--servers=2] [--sizes_mib=1,16,64] [--repeats=3] [--iters=10]
         [--no_gloo] [--no_mpi_tcp] [--no_flat] [--bucket_bytes=N] [--quiet_max_s=120]
         [--keep_logs]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import build_gloo, parse, wait_quiet

REG_PORT, SRV_PORT = 7070, 7100
# Servers speak tcp only, so every byte between a worker and a server crosses
# a host link; workers may also use shared memory, which UCX offers between
# the ranks of one host (the host aggregation's first level).
UCX_TLS = "tcp,self"
WORKER_TLS = "tcp,sm,self"


class Hosts:
    """The namespaces of one benchmark, created once and reused by every run
    (processes do not outlive their run)."""

    def __init__(self, netns, tmp, n_workers_hosts, n_servers):
        self.bridge = netns.Bridge("mhbench")
        self.workers = [self.bridge.add_host("w%d" % h) for h in range(n_workers_hosts)]
        self.servers = [self.bridge.add_host("s%d" % s) for s in range(n_servers)]
        self.registry = self.bridge.add_host("reg")
        # Open MPI's rsh agent: the host (an IP) -> its namespace, and a UTS
        # namespace with the host's own name.
        self.map = os.path.join(tmp, "hosts.map")
        with open(self.map, "w") as f:
            for k, h in enumerate(self.workers):
                f.write("%s %s mh-w%d\n" % (h.ip, h.ns, k))
        self.agent = os.path.join(tmp, "netns_agent.sh")
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\n"
                    "# Open MPI plm_rsh_agent: HOST CMD... -> CMD in HOST's namespace\n"
                    "host=\"$1\"; shift\n"
                    "ns=$(awk -v h=\"$host\" '$1==h {print $2}' %s)\n"
                    "name=$(awk -v h=\"$host\" '$1==h {print $3}' %s)\n"
                    "[ -n \"$ns\" ] || { echo \"netns_agent: unknown host $host\" >&2; exit 1; }\n"
                    "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c "
                    "\"hostname $name; exec $*\"\n" % (self.map, self.map))
        os.chmod(self.agent, 0o755)

    def close(self):
        self.bridge.close()


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_tessel(args, hosts, bins, run_dir, sizes, aggregation):
    """One run of tessel-tcp (aggregation "auto") or tessel-tcp-flat ("flat");
    returns (exit code, stdout of the report)."""
    os.makedirs(run_dir)
    W, L = args.hosts * args.per_host, args.per_host
    logs = lambda n: open(os.path.join(run_dir, n + ".log"), "w")
    procs = []
    deadline = time.time() + args.timeout_s
    try:
        reg = "%s:%d" % (hosts.registry.ip, REG_PORT)
        procs.append(hosts.registry.popen([bins["registry"], "--insecure", "--listen=" + reg],
                                          stdout=logs("registry"), stderr=subprocess.STDOUT))
        if not hosts.registry.wait_listening(REG_PORT, timeout=20, proc=procs[-1]):
            return 1, "the registry did not listen"
        for s, h in enumerate(hosts.servers):
            procs.append(h.popen([bins["server"], "--insecure", "--registry=" + reg, "--shard=%d" % s,
                                  "--listen=%s:%d" % (h.ip, SRV_PORT), "--ucx_tls=" + UCX_TLS],
                                 stdout=logs("server%d" % s), stderr=subprocess.STDOUT))
        for s, h in enumerate(hosts.servers):
            if not h.wait_listening(SRV_PORT, timeout=20, proc=procs[1 + s]):
                return 1, "shard server %d did not listen" % s
        result = os.path.join(run_dir, "result")
        workers = []
        for r in range(W):
            workers.append(hosts.workers[r // L].popen(
                [bins["bench"], "--role=worker", "--registry=" + reg, "--rank=%d" % r,
                 "--workers=%d" % W, "--servers=%d" % args.servers,
                 "--sizes_mib=" + ",".join(map(str, sizes)), "--iters=%d" % args.iters,
                 "--ucx_tls=" + WORKER_TLS, "--optimizer=sgd", "--link_dev=eth0",
                 "--aggregation=" + aggregation, "--result=" + result] +
                (["--bucket_bytes=%d" % args.bucket_bytes] if args.bucket_bytes else []),
                stdout=logs("worker%d" % r), stderr=subprocess.STDOUT))
        procs += workers
        for r, p in enumerate(workers):
            try:
                rc = p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                return 1, "worker %d did not finish in %.0f s" % (r, args.timeout_s)
            if rc != 0:
                with open(os.path.join(run_dir, "worker%d.log" % r), errors="replace") as f:
                    return rc, "worker %d exited %d: %s" % (r, rc, f.read()[-1500:])
    finally:
        kill_all(procs)
    rep = subprocess.run([bins["bench"], "--role=report", "--result=" + result,
                          "--workers=%d" % W, "--servers=%d" % args.servers,
                          "--sizes_mib=" + ",".join(map(str, sizes)), "--ucx_tls=" + UCX_TLS,
                          "--optimizer=sgd"], capture_output=True, text=True, timeout=60)
    return rep.returncode, rep.stdout + rep.stderr


def mpi_argv(args, hosts, bins, hostfile, btl, sizes):
    W = args.hosts * args.per_host
    return ["unshare", "--uts", "/bin/sh", "-c", 'hostname mh-w0; exec "$0" "$@"', "mpirun",
            "--allow-run-as-root", "--oversubscribe", "--hostfile", hostfile, "-np", str(W),
            "--map-by", "slot", "--bind-to", "none", "--mca", "plm_rsh_agent", hosts.agent,
            "--mca", "pml", "ob1", "--mca", "btl", btl, "--mca", "btl_tcp_if_include", "eth0",
            "--mca", "oob_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1",
            bins["mpi"], ",".join(map(str, sizes)), str(args.iters), "allreduce", "eth0"]


def run_gloo(args, hosts, bins, run_dir, sizes):
    os.makedirs(run_dir)
    store = os.path.join(run_dir, "store")
    os.makedirs(store)
    W, L = args.hosts * args.per_host, args.per_host
    procs = []
    try:
        for r in range(W):
            procs.append(hosts.workers[r // L].popen(
                [bins["gloo"], str(W), ",".join(map(str, sizes)), str(args.iters), str(r), store,
                 "eth0"], stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                stderr=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True))
        out, err = procs[0].communicate(timeout=args.timeout_s)
        rc = procs[0].returncode
        for p in procs[1:]:
            rc = rc or p.wait(timeout=30)
        return rc, out + err
    except subprocess.TimeoutExpired:
        return 1, "gloo did not finish in %.0f s" % args.timeout_s
    finally:
        kill_all(procs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="datapath_bench")
    ap.add_argument("--server", required=True, help="tessel-server")
    ap.add_argument("--registry", required=True, help="tessel-registry")
    ap.add_argument("--mpi", required=True, help="mpi_allreduce")
    ap.add_argument("--gloo_src", required=True, help="gloo_allreduce.cc")
    ap.add_argument("--netns", required=True, help="the directory of tests/netns.py")
    ap.add_argument("--hosts", type=int, default=2, help="worker hosts H")
    ap.add_argument("--per_host", type=int, default=2, help="ranks per worker host L")
    ap.add_argument("--servers", type=int, default=2, help="shard servers S (a host each)")
    ap.add_argument("--sizes_mib", default="1,16,64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no_gloo", action="store_true")
    ap.add_argument("--no_mpi_tcp", action="store_true", help="leave out mpi-tcp-allreduce")
    ap.add_argument("--no_flat", action="store_true", help="leave out tessel-tcp-flat")
    ap.add_argument("--bucket_bytes", type=int, default=0,
                    help="Tessel's bucket size (0: the workers' default, 4 MiB)")
    ap.add_argument("--quiet_max_s", type=float, default=120)
    ap.add_argument("--timeout_s", type=float, default=600, help="per contender run")
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",") if s]
    if (args.repeats < 1 or args.iters < 1 or args.hosts < 1 or args.per_host < 1 or
            args.servers < 1 or not sizes or min(sizes) < 1):
        ap.error("--hosts, --per_host, --servers, --repeats, --iters and --sizes_mib must be "
                 "positive")
    if os.geteuid() != 0:
        sys.exit("run_multihost needs root: hosts are network namespaces")
    if shutil.which("mpirun") is None:
        sys.exit("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    if shutil.which("unshare") is None:
        sys.exit("unshare not found (util-linux)")
    sys.path.insert(0, args.netns)
    import netns  # tests/netns.py

    tmp = tempfile.mkdtemp(prefix="run-multihost-")
    bins = {"bench": args.bench, "server": args.server, "registry": args.registry,
            "mpi": args.mpi}
    if not args.no_gloo:
        bins["gloo"] = os.path.join(tmp, "gloo_allreduce")
        build_gloo(args.gloo_src, bins["gloo"])
    W, H, L = args.hosts * args.per_host, args.hosts, args.per_host
    topo = "H=%dxL=%d" % (H, L)
    hosts = Hosts(netns, tmp, H, args.servers)
    hostfile = os.path.join(tmp, "hostfile")
    with open(hostfile, "w") as f:
        for h in hosts.workers:
            f.write("%s slots=%d\n" % (h.ip, L))
    contenders = ["tessel-tcp", "mpi-allreduce"]
    if not args.no_flat:
        contenders.insert(1, "tessel-tcp-flat")
    if not args.no_mpi_tcp:
        contenders.append("mpi-tcp-allreduce")
    if not args.no_gloo:
        contenders.append("gloo-allreduce")
    results, cpus, links = {}, {}, {}  # (name, size) -> [per run]
    not_quiet = 0
    print("# %s: %d worker hosts x %d ranks (W=%d), %d shard server hosts (Tessel), UCX_TLS=%s "
          "(workers %s); %d contenders x %d repeats, interleaved; sizes %s MiB; %d timed steps "
          "per run" % (topo, H, L, W, args.servers, UCX_TLS, WORKER_TLS, len(contenders),
                       args.repeats, args.sizes_mib, args.iters), flush=True)
    try:
        for rep in range(args.repeats):
            k = rep % len(contenders)
            for name in contenders[k:] + contenders[:k]:
                quiet, idle, waited = wait_quiet(args.quiet_max_s)
                not_quiet += 0 if quiet else 1
                start = time.time()
                run_dir = os.path.join(tmp, "%s-%d" % (name, rep))
                if name.startswith("tessel-tcp"):
                    rc, out = run_tessel(args, hosts, bins, run_dir, sizes,
                                         "flat" if name == "tessel-tcp-flat" else "auto")
                elif name == "gloo-allreduce":
                    rc, out = run_gloo(args, hosts, bins, run_dir, sizes)
                else:
                    btl = "vader,tcp,self" if name == "mpi-allreduce" else "tcp,self"
                    p = hosts.workers[0].run(mpi_argv(args, hosts, bins, hostfile, btl, sizes),
                                             timeout=args.timeout_s)
                    rc, out = p.returncode, p.stdout + p.stderr
                cpu, link = {}, {}
                rows = parse(out, cpu=cpu, link=link)
                paths = [l.split("payloads: ", 1)[1] for l in out.splitlines()
                         if l.startswith("# tessel datapath") and "payloads: " in l]
                if paths and rep == 0:
                    print(f"# {name}: rank 0's payloads: {paths[0]}", flush=True)
                print(f"repeat {rep + 1} {name:18} {'quiet' if quiet else 'NOT-QUIET'} "
                      f"(idle {idle}% after {waited:.0f} s) {time.time() - start:6.1f} s  " +
                      " ".join(f"{s}:{rows[s]:.2f}ms" for s in sizes if s in rows), flush=True)
                if rc != 0 or any(s not in rows for s in sizes):
                    sys.stdout.write(out[-3000:])
                    sys.exit(f"{name} failed (exit {rc}); logs in {tmp}")
                for s in sizes:
                    results.setdefault((name, s), []).append(rows[s])
                    if s in cpu:
                        cpus.setdefault((name, s), []).append(cpu[s])
                    # One rank per worker host: rank h * L is on host h.
                    per_host = [link.get(s, {}).get(h * L) for h in range(H)]
                    if all(v is not None and v[0] >= 0 for v in per_host):
                        links.setdefault((name, s), []).append(
                            (statistics.mean(v[1] for v in per_host),
                             statistics.mean(v[0] for v in per_host)))
    finally:
        hosts.close()
    med = statistics.median
    print(f"\n# per-run median step time, ms: min / median / max over {args.repeats} runs; "
          f"{not_quiet} run(s) NOT-QUIET")
    print(f"{'topology':10} {'contender':18} {'S_MiB':>6} {'min':>9} {'median':>9} {'max':>9}")
    for s in sizes:
        for name in contenders:
            ts = results[(name, s)]
            print(f"{topo:10} {name:18} {s:>6} {min(ts):9.2f} {med(ts):9.2f} {max(ts):9.2f}")
    print("\n# CPU per step, ms: every process of the contender (Tessel: workers and shard "
          "servers; MPI and Gloo: the ranks), every thread, over the timed steps and their "
          "barriers; median over runs")
    for s in sizes:
        for name in contenders:
            if (name, s) in cpus:
                print(f"{topo:10} {name:18} {s:>6}  cpu {med(cpus[(name, s)]):9.2f} ms/step")
    print("\n# bytes per step over a worker host's link (eth0: tx = leaving the host, rx = "
          "arriving), the mean over worker hosts, median over runs; MiB")
    for s in sizes:
        for name in contenders:
            if (name, s) in links:
                v = links[(name, s)]
                tx, rx = med(x[0] for x in v) / 2**20, med(x[1] for x in v) / 2**20
                print(f"{topo:10} {name:18} {s:>6}  tx {tx:9.2f}  rx {rx:9.2f}  "
                      f"(tx+rx {tx + rx:9.2f} = {(tx + rx) / s:5.2f} x S)")
    print("\n# ratio of medians: baseline / Tessel (> 1: Tessel's step is faster); cpu ratio: "
          "Tessel / baseline (< 1: Tessel spends less)")
    for s in sizes:
        for t in [n for n in contenders if n.startswith("tessel-")]:
            tmed = med(results[(t, s)])
            others = [n for n in contenders if not n.startswith("tessel-")]
            if t == "tessel-tcp" and "tessel-tcp-flat" in contenders:
                others.append("tessel-tcp-flat")  # what host aggregation gains
            for b in others:
                bmed = med(results[(b, s)])
                line = (f"{s:<5} {topo} {t:12} {tmed:8.2f} ms vs {b:18} {bmed:8.2f} ms  "
                        f"ratio {bmed / tmed:.2f}x")
                if (t, s) in cpus and (b, s) in cpus:
                    line += f"  cpu ratio {med(cpus[(t, s)]) / med(cpus[(b, s)]):.2f}x"
                print(line)
    if args.keep_logs:
        print(f"\n# logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
