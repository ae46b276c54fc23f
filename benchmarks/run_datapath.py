#!/usr/bin/env python3
"""Tessel's data path against the all-reduce it replaces, measured fairly.

Every contender runs in the same invocation, interleaved (one run of each per
repeat, the order rotated each repeat), each after the machine was quiet
(>= 90 % idle CPU for 3 one-second windows in a row, or --quiet_max_s passed:
such a run is flagged NOT-QUIET). Every contender times a step the same way:
a barrier, then the step, and the step's time is the slowest rank's; each run
reports the median over --iters steps (after 3 warm-up steps), and the summary
gives min / median / max of those per-run medians and the ratio of medians,
and per contender the p90 of each run's steps (nearest rank; min / median /
max over runs) with the spread of its per-run medians (max / min).

Contenders, for each world size W in --workers:
  tessel-<opt>     datapath_bench: W workers push and pull S bytes through
                   --servers shard servers (UCX shared memory), the update
                   <opt> (sgd, adam) on the servers.
  mpi-allreduce    Open MPI MPI_Allreduce (its default transports).
  mpi-rs_ag        Open MPI MPI_Reduce_scatter_block + MPI_Allgather: the
                   push (reduce-scatter) and pull (all-gather) of a step.
  mpi-allreduce-<opt>  the fair baseline: MPI_Allreduce, then every rank
                   turns the sum into the mean and runs the same update <opt>
                   over the whole vector with the kernels Tessel's servers run
                   (benchmarks/ddp_update.h): what a DDP step does, while
                   Tessel's step includes its servers' update.
  gloo-allreduce   Gloo's C++ ring allreduce over TCP on lo (libgloo-dev).
  gloo-allreduce-<opt>  the same fair baseline over Gloo's allreduce.
  tessel-<opt>-tN  with --update_threads=N,...: the servers run N update
                   threads (default: one contender, the servers' default).
  tessel-<opt>-copied with --copied: the same with --ucx_zero_copy=false
                   (every payload copied through UCX's queues, the path before
                   zero-copy), for an in-place/copied comparison in one run.
  tessel-<opt>[-copied]-nofold with --no_fold: the same with the servers'
                   --fold_prefix=false (a bucket is reduced only once all W
                   pushes are in), to measure prefix order (W >= 3) in one run.
  tessel-<opt>-<mode> with --poll_modes: every process with --poll_mode=<mode>
                   (auto: poll only while the host's polling threads fit its
                   cores; spin: always; event: sleep on the wake-up fd at once).
  tessel-<opt>[-...]-inplace with --in_place: the workers' --rejoin_in_place=false
                   (JobSpec.in_place_update: the shards keep one served version and
                   update in place; a lost worker then costs a rollback), against the
                   default (two versions, for a replacement to rejoin in place).
  tessel-<opt>[-...]-noinline with --no_inline: the servers'
                   --inline_update_max_bytes=0 (every bucket through an update
                   thread, none reduced on the transport's thread).
  tessel-<opt>-auth-<mode> with --data_auth=off,header,payload: the servers'
                   data-path authentication: off (--data_auth=off), header
                   tags (--data_auth=on --data_integrity=header) or header
                   and payload tags (--data_integrity=payload), one contender
                   per mode, for the cost of authentication in one run.
  tessel-<opt>-base with --base_bench: another build's datapath_bench (e.g. an
                   earlier commit's), for a before/after measured in one run.
  with --tcp:      tessel-tcp-sgd (UCX over TCP) and mpi-tcp-allreduce
                   (--mca pml ob1 --mca btl tcp,self).
  machine-triad    the machine's memory floor, measured in the same run:
                   triad_steps (a = b + 3 c over three arrays of S bytes, one
                   thread per core), timed and summarised like the others (its
                   own spread of per-run medians is what this machine's
                   bandwidth varies by); not a baseline in the ratios, but
                   each Tessel contender's step / triad is printed. --no_triad
                   leaves it out.
  with --cma:      tessel-cma-sgd: UCX without shared memory (cma,tcp,self),
                   so nothing is read in place: payloads go by UCX's
                   rendezvous, RMA gets over cma (the path where shared
                   memory is not reachable), against the same baselines.

Ratio lines, one per (W, size, Tessel variant, baseline), end the output:
  64    W=2 tessel-sgd   21.10 ms vs mpi-allreduce   25.32 ms  ratio 1.20x
(> 1: Tessel's step is faster; ratio = baseline median / Tessel median).
A tessel-<opt> contender is compared with the raw allreduce lines and with the
fair baseline of the same optimizer (mpi-allreduce-<opt>, gloo-allreduce-<opt>).

Usage: bazel run //benchmarks:run_datapath -- [--workers=2,4] [--servers=2]
         [--sizes_mib=1,16,64,256] [--repeats=5] [--iters=10]
         [--optimizers=sgd,adam] [--tcp] [--no_gloo] [--quiet_max_s=120]
         [--update_threads=1,2] [--base_bench=OTHER/datapath_bench] [--copied]
         [--no_fold] [--in_place] [--no_inline] [--cma] [--poll_modes=auto,spin,event]
         [--data_auth=off,header,payload] [--no_mpi] [--clip=MAX_NORM] [--no_triad]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import build_gloo, parse, wait_quiet

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_tcp_if_include", "lo",
          "--mca", "oob_tcp_if_include", "lo"]


def is_baseline(name):
    """A contender Tessel's are compared with (not Tessel's, not the machine's floor)."""
    return not name.startswith("tessel-") and not name.startswith("machine-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--mpi", required=True)
    ap.add_argument("--triad", default="", help="triad_steps (the machine-triad contender)")
    ap.add_argument("--no_triad", action="store_true",
                    help="leave out the machine-triad contender")
    ap.add_argument("--gloo_src", required=True)
    ap.add_argument("--ddp_update_lib", default="",
                    help="libtessel_ddp_update.so (bazel-bin/benchmarks): gloo-allreduce-<opt> contenders")
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--sizes_mib", default="1,16,64,256")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--optimizers", default="sgd,adam")
    ap.add_argument("--tcp", action="store_true")
    ap.add_argument("--no_gloo", action="store_true")
    ap.add_argument("--no_mpi", action="store_true",
                    help="no Open MPI contenders (Tessel against itself, e.g. --data_auth)")
    ap.add_argument("--cma", action="store_true",
                    help="add tessel-cma-sgd: UCX_TLS cma,tcp,self (no shared memory: RMA gets)")
    ap.add_argument("--update_threads", default="",
                    help="comma-separated: one Tessel contender per value, tessel-<opt>-tN, "
                         "its servers run --update_threads=N (default: one, the servers' own)")
    ap.add_argument("--base_bench", default="",
                    help="a second datapath_bench (e.g. built from an earlier commit): "
                         "contenders tessel-<opt>-base, for a before/after in one run")
    ap.add_argument("--copied", action="store_true",
                    help="also run each Tessel contender with --ucx_zero_copy=false "
                         "(tessel-<opt>-copied): payloads copied through UCX's queues")
    ap.add_argument("--no_fold", action="store_true",
                    help="also run each Tessel contender with the servers' --fold_prefix=false "
                         "(tessel-<opt>[-copied]-nofold)")
    ap.add_argument("--poll_modes", default="",
                    help="comma-separated auto,spin,event: one Tessel contender per mode "
                         "(tessel-<opt>-<mode>), every process run with --poll_mode=<mode> "
                         "(default: one contender, the default mode, auto)")
    ap.add_argument("--in_place", action="store_true",
                    help="also run each Tessel contender with the workers' --rejoin_in_place=false "
                         "(tessel-<opt>-inplace: one served version, updated in place)")
    ap.add_argument("--no_inline", action="store_true",
                    help="also run each Tessel contender with the servers' "
                         "--inline_update_max_bytes=0 (tessel-<opt>-noinline: every bucket "
                         "handed to an update thread)")
    ap.add_argument("--data_auth", default="",
                    help="comma-separated off,header,payload: one Tessel contender per mode "
                         "(tessel-<opt>-auth-<mode>), the servers run with --data_auth=off, "
                         "--data_auth=on --data_integrity=header, or ... =payload (default: one "
                         "contender, the servers' default)")
    ap.add_argument("--quiet_max_s", type=float, default=120)
    ap.add_argument("--clip", type=float, default=0,
                    help="> 0: each Tessel contender twice, tessel-<opt>-overlap (every gradient "
                         "handed over at the step's start) and tessel-<opt>-clip (the same, "
                         "clipped by the job-wide norm with this max_norm on held steps)")
    ap.add_argument("--timeout_s", type=float, default=900, help="per contender run")
    args = ap.parse_args()
    worlds = [int(w) for w in args.workers.split(",")]
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    if args.repeats < 1 or args.iters < 1 or not worlds or not sizes:
        ap.error("--repeats, --iters, --workers and --sizes_mib must be positive")
    if not args.no_mpi and shutil.which("mpirun") is None:
        sys.exit("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    tmp = tempfile.mkdtemp(prefix="run-datapath-")
    gloo = None
    if not args.no_gloo:
        gloo = os.path.join(tmp, "gloo_allreduce")
        build_gloo(args.gloo_src, gloo, args.ddp_update_lib or None)
    size_arg = ",".join(str(s) for s in sizes)
    contenders = []  # (world, name, argv)
    threads = [int(t) for t in args.update_threads.split(",") if t] or [0]

    def tessel(bench, w, opt, tls="posix,sysv,self"):  # a datapath_bench command line
        return [bench, f"--workers={w}", f"--servers={args.servers}", f"--sizes_mib={size_arg}",
                f"--iters={args.iters}", f"--optimizer={opt}", f"--ucx_tls={tls}"]

    for w in worlds:
        for opt in args.optimizers.split(","):
            for t in threads:
                name = f"tessel-{opt}" + (f"-t{t}" if t else "")
                extra = [f"--update_threads={t}"] if t else []
                variants = [(name, [])]
                modes = [m for m in args.poll_modes.split(",") if m]
                if modes:
                    variants = [(f"{name}-{m}", [f"--poll_mode={m}"]) for m in modes]
                auth_args = {"off": "--data_auth=off",
                             "header": "--data_auth=on --data_integrity=header",
                             "payload": "--data_auth=on --data_integrity=payload"}
                auth_modes = [m for m in args.data_auth.split(",") if m]
                if any(m not in auth_args for m in auth_modes):
                    ap.error("--data_auth: expected off, header or payload")
                if auth_modes:
                    variants = [(f"{n}-auth-{m}", a + [f"--server_args={auth_args[m]}"])
                                for n, a in variants for m in auth_modes]
                if args.clip:  # the same hand-over, unclipped and clipped (held steps)
                    variants = [(n + "-overlap", a + ["--overlap"]) for n, a in variants] + \
                               [(n + "-clip", a + [f"--clip_max_norm={args.clip}"])
                                for n, a in variants]
                if args.copied:
                    variants += [(n + "-copied", a + ["--ucx_zero_copy=false"])
                                 for n, a in list(variants)]
                for vname, vargs in variants:
                    contenders.append((w, vname, tessel(args.bench, w, opt) + extra + vargs))
                    if args.in_place:
                        contenders.append((w, vname + "-inplace", tessel(args.bench, w, opt) +
                                           extra + vargs +
                                           ["--worker_args=--rejoin_in_place=false"]))
                    if args.no_inline:
                        contenders.append((w, vname + "-noinline", tessel(args.bench, w, opt) +
                                           extra + vargs + ["--inline_update_max_bytes=0"]))
                    if args.no_fold:
                        contenders.append((w, vname + "-nofold", tessel(args.bench, w, opt) +
                                           extra + vargs + ["--fold_prefix=false"]))
            if args.base_bench:
                contenders.append((w, f"tessel-{opt}-base", tessel(args.base_bench, w, opt)))
        fair = [f"allreduce-{opt}" for opt in args.optimizers.split(",") if opt]
        for mode in () if args.no_mpi else ["allreduce", "rs_ag"] + fair:
            contenders.append((w, f"mpi-{mode}",
                               MPIRUN + ["-np", str(w), args.mpi, size_arg, str(args.iters), mode]))
        if gloo:
            contenders.append((w, "gloo-allreduce", [gloo, str(w), size_arg, str(args.iters)]))
            for opt in args.optimizers.split(",") if args.ddp_update_lib else []:
                contenders.append((w, f"gloo-allreduce-{opt}",
                                   [gloo, f"--update={opt}", str(w), size_arg, str(args.iters)]))
        if args.triad and not args.no_triad:
            contenders.append((w, "machine-triad", [args.triad, str(os.cpu_count() or 1),
                                                    size_arg, str(args.iters)]))
        if args.cma:
            contenders.append((w, "tessel-cma-sgd", tessel(args.bench, w, "sgd", "cma,tcp,self")))
        if args.tcp:
            contenders.append((w, "tessel-tcp-sgd", tessel(args.bench, w, "sgd", "tcp,self")))
            contenders.append((w, "mpi-tcp-allreduce",
                               MPIRUN + ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "-np",
                                         str(w), args.mpi, size_arg, str(args.iters),
                                         "allreduce"]))
    # The other build's datapath_bench starts its own build's shard servers
    # (testing/process.h's FindBinary looks in $RUNFILES_DIR first: this build's).
    base_env = {k: v for k, v in os.environ.items() if k not in ("RUNFILES_DIR", "TEST_SRCDIR")}
    results = {}  # (world, name, size) -> [per-run median ms]
    rpcs = {}  # (world, tessel name, size) -> most (shard, registry) control calls in a run
    phases = {}  # (world, tessel name, size) -> [(push, wait, pull) ms per run]
    cpus = {}  # (world, name, size) -> [CPU ms per step, all processes, per run]
    p90s = {}  # (world, name, size) -> [p90 of the run's step times, ms, per run]
    not_quiet = 0
    print(f"# {len(contenders)} contenders x {args.repeats} repeats, interleaved; sizes "
          f"{size_arg} MiB; {args.iters} timed steps per run; W = {args.workers}", flush=True)
    for rep in range(args.repeats):
        k = rep % len(contenders)
        for w, name, argv in contenders[k:] + contenders[:k]:
            quiet, idle, waited = wait_quiet(args.quiet_max_s)
            not_quiet += 0 if quiet else 1
            start = time.time()
            p = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout_s,
                               env=base_env if argv[0] == args.base_bench else None)
            calls, phase, cpu, p90 = {}, {}, {}, {}
            rows = parse(p.stdout, calls, phase, cpu, p90=p90)
            for s, q in p90.items():
                p90s.setdefault((w, name, s), []).append(q)
            for s, c in cpu.items():
                cpus.setdefault((w, name, s), []).append(c)
            for s, ph in phase.items():
                phases.setdefault((w, name, s), []).append(ph)
            for s, c in calls.items():
                prev = rpcs.get((w, name, s), (0, 0))
                rpcs[(w, name, s)] = (max(prev[0], c[0]), max(prev[1], c[1]))
            print(f"repeat {rep + 1} W={w} {name:18} {'quiet' if quiet else 'NOT-QUIET'} "
                  f"(idle {idle}% after {waited:.0f} s) {time.time() - start:6.1f} s  " +
                  " ".join(f"{s}:{rows[s]:.2f}ms" for s in sizes if s in rows), flush=True)
            if p.returncode != 0 or any(s not in rows for s in sizes):
                sys.stdout.write(p.stdout[-2000:] + p.stderr[-2000:])
                sys.exit(f"{name} W={w} failed (exit {p.returncode})")
            for s in sizes:
                results.setdefault((w, name, s), []).append(rows[s])
    print(f"\n# per-run median step time, ms: min / median / max over {args.repeats} runs; "
          f"busbw GB/s at the median (allreduce convention, S * 2(W-1)/W / t); "
          f"{not_quiet} run(s) NOT-QUIET")
    print(f"{'W':>2} {'contender':18} {'S_MiB':>6} {'min':>9} {'median':>9} {'max':>9} "
          f"{'busbw':>8}")
    for (w, name, s), ts in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        med = statistics.median(ts)
        busbw = (s << 20) * 2.0 * (w - 1) / w / (med / 1e3) / 1e9
        print(f"{w:>2} {name:18} {s:>6} {min(ts):9.2f} {med:9.2f} {max(ts):9.2f} {busbw:8.3f}")
    print(f"\n# p90 of each run's {args.iters} step times (nearest rank), ms: min / median / max "
          f"over runs; spread = max / min of the per-run medians above (issue 46: <= 1.3)")
    for (w, name, s), qs in sorted(p90s.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        ts = results.get((w, name, s), [])
        spread = max(ts) / min(ts) if ts and min(ts) > 0 else float("nan")
        print(f"{w:>2} {name:18} {s:>6}  p90 {min(qs):9.2f} {statistics.median(qs):9.2f} "
              f"{max(qs):9.2f}  spread {spread:5.2f}")
    print(f"\n# Tessel's control RPCs (gRPC) during a run's {args.iters} timed steps, rank 0, the "
          f"most in any run: shard servers (per step: must be 0), registry (lease heartbeats, "
          f"by time)")
    for (w, name, s), (shard, registry) in sorted(rpcs.items()):
        print(f"{w:>2} {name:18} {s:>6}  shard {shard}  registry {registry}")
    print("\n# Tessel's step by phase (Worker::last_step_phases of the slowest rank), median ms "
          "over runs: push (handing the gradients to the transport), wait (until the first "
          "updated bucket returns: the other ranks' pushes, reduction, update), pull (the rest); "
          "update: the busiest server's reduce + update per step, summed over its update threads "
          "(ShardStats.update_us; nan for builds without it)")
    for (w, name, s), ps in sorted(phases.items()):
        med = [statistics.median(p[k] for p in ps) for k in range(4)]
        print(f"{w:>2} {name:18} {s:>6}  push {med[0]:8.2f}  wait {med[1]:8.2f}  pull {med[2]:8.2f}"
              f"  update {med[3]:8.2f}")
    triads = {(w, s): statistics.median(ts) for (w, n, s), ts in results.items()
              if n == "machine-triad"}
    if triads:
        print("\n# the memory floor, measured in this run: machine-triad (a = b + 3 c over three "
              "arrays of S bytes, one thread per core: 3 S moved); each Tessel contender's "
              "median step / the triad's median (1.0: the step moves no more than a triad of "
              "its size), and the spreads of per-run medians side by side")
        for (w, n, s), ts in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
            if not n.startswith("tessel-") or (w, s) not in triads:
                continue
            tri = results[(w, "machine-triad", s)]
            print(f"{w:>2} {n:18} {s:>6}  step/triad {statistics.median(ts) / triads[(w, s)]:6.2f}"
                  f"  spread {max(ts) / min(ts):5.2f} (triad {max(tri) / min(tri):5.2f})")
    print("\n# CPU per step, ms (every process of the contender, every thread: workers and shard "
          "servers, MPI or Gloo ranks; the timed steps and their barriers), median over runs; "
          "ratio = Tessel / baseline (< 1: Tessel spends less)")
    for (w, name, s), cs in sorted(cpus.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        print(f"{w:>2} {name:18} {s:>6}  cpu {statistics.median(cs):9.2f} ms/step")
    for w in worlds:
        for s in sizes:
            for t in [n for n, in {(n,) for _, n, _ in contenders} if n.startswith("tessel-")]:
                if (w, t, s) not in cpus:
                    continue
                tcpu = statistics.median(cpus[(w, t, s)])
                for b in sorted({n for _, n, _ in contenders if is_baseline(n)}):
                    if ("tcp" in b) != ("tcp" in t) or (w, b, s) not in cpus:
                        continue
                    bcpu = statistics.median(cpus[(w, b, s)])
                    print(f"{s:<5} W={w} {t:15} cpu {tcpu:8.2f} ms vs {b:18} {bcpu:8.2f} ms  "
                          f"cpu ratio {tcpu / bcpu:.2f}x")
    print("\n# ratio of medians: baseline / Tessel (> 1: Tessel's step is faster); a fair "
          "baseline (allreduce-<opt>: the all-reduce, then the update on every rank) only "
          "against Tessel with the same optimizer")

    def same_update(tessel_name, baseline):
        """A raw baseline fits every Tessel contender; allreduce-<opt> only tessel-...<opt>..."""
        fair = baseline.rsplit("-", 1)[-1] if baseline.split("-")[-2:-1] == ["allreduce"] else ""
        return not fair or fair in tessel_name.split("-")
    names = sorted({n for _, n, _ in contenders})
    for w in worlds:
        for s in sizes:
            for t in [n for n in names if n.startswith("tessel-")]:
                tmed = statistics.median(results[(w, t, s)])
                tcp = "tcp" in t
                for b in [n for n in names if is_baseline(n) and ("tcp" in n) == tcp
                          and same_update(t, n)]:
                    bmed = statistics.median(results[(w, b, s)])
                    print(f"{s:<5} W={w} {t:15} {tmed:8.2f} ms vs {b:18} {bmed:8.2f} ms  "
                          f"ratio {bmed / tmed:.2f}x")
    def speed_ups(title, pairs):  # pairs: (this contender, the one it is compared with)
        if not pairs:
            return
        print("\n# " + title)
        for w in worlds:
            for s in sizes:
                for t, b in pairs:
                    bmed = statistics.median(results[(w, b, s)])
                    tmed = statistics.median(results[(w, t, s)])
                    print(f"{s:<5} W={w} {t:15} {tmed:8.2f} ms vs {b:18} {bmed:8.2f} ms  "
                          f"speed-up {bmed / tmed:.2f}x")

    speed_ups("before/after in this run: --base_bench's median / this build's (> 1: this build "
              "is faster)",
              [(b[:-len("-base")], b) for b in names
               if b.endswith("-base") and b[:-len("-base")] in names])
    speed_ups("updates on the transport's thread in this run: --inline_update_max_bytes=0's "
              "median / the default's (> 1: small buckets updated inline are faster)",
              [(b[:-len("-noinline")], b) for b in names if b.endswith("-noinline")])
    speed_ups("prefix order in this run: --fold_prefix=false's median / the default's (> 1: "
              "folding ranks as they arrive is faster)",
              [(b[:-len("-nofold")], b) for b in names if b.endswith("-nofold")])
    speed_ups("data-path authentication in this run: --data_auth=off's median / this mode's "
              "(< 1: authentication costs; 0.95x = 5 % slower)",
              [(b, b.replace("-auth-header", "-auth-off").replace("-auth-payload", "-auth-off"))
               for b in names if b.endswith(("-auth-header", "-auth-payload"))
               and b.replace("-auth-header", "-auth-off").replace("-auth-payload", "-auth-off")
               in names])
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
