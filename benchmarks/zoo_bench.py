#!/usr/bin/python3
"""The model zoo's models (python/tests/zoo_models.py) at benchmark sizes:
step time and peak memory per worker of Tessel (ddp, zero2, fsdp) against
torch DDP and torch FSDP (gloo, CPU), 2 workers, in one run.

Models: ResNet-18 (torchvision, 10 classes) on 3x32x32 images, and the
Transformer LM (causal TransformerEncoder; sizes below), each trained with
Adam (lr 1e-3) on a fixed random batch per worker, one BLAS thread per
process. A step is zero_grad + forward + backward + the optimizer step.

Contenders, each after a quiet machine (>= 90 % idle for 3 one-second
windows, or --quiet_max_s: flagged NOT-QUIET), in an order rotated every
repeat:
  single        one process, the same per-worker batch, no communication:
                the compute a step costs.
  torch-ddp     torch DistributedDataParallel, gloo on loopback, 2 processes,
                default 25 MiB buckets: THE BASELINE (the ratio columns).
  torch-fsdp    torch.distributed.fsdp.FullyShardedDataParallel, gloo, 2
                processes, one FSDP unit per top-level module (as tessel
                fsdp's units), when this torch can run it on the CPU; otherwise
                the table says why (torch 1.13 cannot: see the output).
  tessel-<s>    tessel.torch's DistributedOptimizer, strategy s, 2 workers and
                2 shard servers under tessel-launch.
Every side times a step the same way: a barrier (not timed), then the step;
the step's time is the slower rank's; a run's figure is its median over
--steps steps after 3 warm-up steps, and the summary the median of the
quiet repeats' figures (of all repeats' where none was quiet).

Memory, per worker process (the larger of the 2 ranks):
  peak RSS    getrusage's ru_maxrss at the end of the run (everything the
              process touched: Python, torch, the model, Tessel's shared
              buffers), and its growth over the RSS at the start of the run
              (after imports and the process group or tessel.torch.init).
  heap peak   glibc mallinfo2's bytes in use (what torch's CPU allocator holds,
              with the rest of the process's malloc), sampled after forward,
              after backward and after the optimizer step, the largest sample.
Tessel's shard servers hold the optimizer state (zero2, fsdp) and the fp32
masters: their peak RSS, summed over the 2 servers, is the last column.

Usage: bazel run //benchmarks:zoo_bench -- [--models=resnet18,lm] [--repeats=3]
         [--steps=10] [--contenders=single,torch-ddp,torch-fsdp,tessel-ddp,...]
         [--quiet_max_s=30]
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from bench_common import (free_port, gloo_slowest, one_thread, one_thread_env, run_steps,
                          tessel_sync, times_line, torch_banner, wait_quiet)

WARM, WORKERS, SERVERS = 3, 2, 2
RESNET_BATCH = 16                                      # images per worker, 3x32x32
LM = dict(vocab=4096, seq=32, d_model=128, nhead=4, layers=2)
LM_BATCH = 8                                           # sequences per worker
CONTENDERS = ["single", "torch-ddp", "torch-fsdp", "tessel-ddp", "tessel-zero2", "tessel-fsdp"]
BASELINE = "torch-ddp"


# --- the step, shared by every contender ------------------------------------

def make_model(name):
    import torch
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    import zoo_models
    return zoo_models.TransformerLM(**LM)


def batch(name, rank):
    import torch
    g = torch.Generator().manual_seed(1 + rank)
    if name == "resnet18":
        return (torch.randn(RESNET_BATCH, 3, 32, 32, generator=g),
                torch.randint(0, 10, (RESNET_BATCH,), generator=g))
    tokens = torch.randint(0, LM["vocab"], (LM_BATCH, LM["seq"] + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(out, y):
    import torch
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


class Memory:
    """This process's memory: RSS at the start, sampled heap bytes, peak RSS."""

    def __init__(self):
        self.libc = ctypes.CDLL("libc.so.6")
        self.libc.mallinfo2.restype = _MallInfo2
        self.start_rss = self.rss_kib()
        self.heap_peak = 0

    @staticmethod
    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def sample(self):
        m = self.libc.mallinfo2()
        self.heap_peak = max(self.heap_peak, m.uordblks + m.hblkhd)

    def report(self):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return {"peak_rss_mib": peak / 1024, "rss_growth_mib": (peak - self.start_rss) / 1024,
                "heap_peak_mib": self.heap_peak / 2**20}


def train(model, opt, x, y, steps, mem, barrier=None, slowest=None):
    """Per-step seconds after WARM warm-up steps of zero_grad, forward, backward
    and the optimizer step (bench_common.run_steps). Samples the heap after
    each phase."""
    def step():
        opt.zero_grad()
        loss = loss_of(model(x), y)
        mem.sample()
        loss.backward()
        mem.sample()
        opt.step()

    return run_steps(step, steps, WARM, barrier=barrier, slowest=slowest, after=mem.sample)


def child_single(args):
    import torch
    one_thread()
    mem = Memory()
    model = make_model(args.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = batch(args.model, 0)
    ts = train(model, opt, x, y, args.steps, mem)
    return {"times": ts, "ranks": [mem.report()]}


def import_torch_fsdp():
    """torch.distributed.fsdp's FullyShardedDataParallel. torch 1.13's does not
    import on Python 3.11 (a dataclass field with an unhashable default, which
    3.11 refuses); the import is retried with such defaults turned into
    default_factory ones, so that what FSDP itself does on the CPU is what the
    table reports. Raises what the import or the retry raised."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel, None
    except ValueError as e:
        first = f"{type(e).__name__}: {e}"
    import dataclasses
    original = dataclasses._get_field

    def lenient(cls, name, type_, kw_only):
        try:
            return original(cls, name, type_, kw_only)
        except ValueError as e:
            if "mutable default" not in str(e):
                raise
            default = cls.__dict__[name]
            setattr(cls, name, dataclasses.field(default_factory=lambda: default))
            return original(cls, name, type_, kw_only)

    for mod in [m for m in sys.modules if m.startswith("torch.distributed._shard")
                or m.startswith("torch.distributed.fsdp")]:
        del sys.modules[mod]
    dataclasses._get_field = lenient
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    finally:
        dataclasses._get_field = original
    return FullyShardedDataParallel, first


def torch_rank(rank, port, kind, model_name, steps, out_dir):
    """One rank of torch-ddp or torch-fsdp; writes out_dir/r<rank>.json."""
    import torch
    import torch.distributed as dist
    one_thread()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORKERS)
    mem = Memory()
    result = {}
    try:
        model = make_model(model_name)
        if kind == "torch-ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
        else:
            fsdp, note = import_torch_fsdp()
            if note:
                result["note"] = f"import needed a Python 3.11 work-around ({note[:120]})"
            units = [m for _, m in model.named_children() if any(True for _ in m.parameters())]

            def policy(module, recurse, **kw):
                return recurse or module in units
            wrapped = fsdp(model, auto_wrap_policy=policy)
        opt = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
        x, y = batch(model_name, rank)
        result["times"] = train(wrapped, opt, x, y, steps, mem, barrier=dist.barrier,
                                slowest=gloo_slowest)
        result["memory"] = mem.report()
    except Exception as e:  # torch-fsdp where this torch cannot run it: say why
        result = {"unavailable": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}",
                  **({"note": result["note"]} if "note" in result else {})}
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    # No teardown: torch 1.13's ~ProcessGroupGloo can deadlock when DDP's Reducer
    # drops the last reference to it at exit (seen here, one run in ~10).
    os._exit(0)


def child_torch(args):
    import torch.multiprocessing as mp
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(torch_rank, args=(port, args.child, args.model, args.steps, d),
                           nprocs=WORKERS, join=True, start_method="spawn")
        ranks = []
        for r in range(WORKERS):
            with open(os.path.join(d, f"r{r}.json")) as f:
                ranks.append(json.load(f))
    bad = next((r for r in ranks if "unavailable" in r), None)
    if bad:
        return {"unavailable": bad["unavailable"] + (f"; {bad['note']}" if "note" in bad else "")}
    return {"times": ranks[0]["times"], "ranks": [r["memory"] for r in ranks]}


def server_peak_rss_mib():
    """The peak RSS (VmHWM) of the shard servers tessel-launch (our parent)
    started, summed; None if none is found."""
    total, found = 0, 0
    parent = os.getppid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != parent or "server" not in comm:
                continue
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
            found += 1
        except (OSError, ValueError, StopIteration):
            continue
    return total / 1024 if found else None


def child_tessel_worker(args):
    """One rank under tessel-launch; writes args.out + .r<rank>.json."""
    import torch
    import tessel.torch as tt
    one_thread()
    tt.init()
    mem = Memory()
    model = make_model(args.model)
    opt = tt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3), model=model,
                                  strategy=args.strategy)
    worker = opt.workers[0]  # the job's worker: barrier and max over ranks
    rank, world = tt.rank(), tt.size()
    x, y = batch(args.model, rank)
    barrier, slowest = tessel_sync(worker, rank, world)
    ts = train(model, opt, x, y, args.steps, mem, barrier=barrier, slowest=slowest)
    result = {"times": ts, "memory": mem.report()}
    if rank == 0:
        result["servers_mib"] = server_peak_rss_mib()
    with open(f"{args.out}.r{rank}.json", "w") as f:
        json.dump(result, f)
    opt.close()
    tt.shutdown()


# --- the driver ---------------------------------------------------------------

def child_env(args):
    env = one_thread_env()
    paths = [p for p in (args.python_root, args.zoo_root, env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = ":".join(paths)
    return env


def run_contender(args, name, model, run_dir):
    """Runs one contender on one model; returns its result dict."""
    here = os.path.abspath(__file__)
    out = os.path.join(run_dir, f"{name}-{model}")
    common = [f"--model={model}", f"--steps={args.steps}", f"--out={out}",
              f"--zoo_root={args.zoo_root}"]
    if name.startswith("tessel-"):
        strategy = name[len("tessel-"):]
        cmd = [args.launch, f"--nproc_per_node={WORKERS}", f"--servers={SERVERS}",
               f"--job=zoo-{strategy}-{model}", "--timeout_s=900",
               f"--run_dir={out}-logs", "--", "/usr/bin/python3", here,
               "--child=tessel-worker", f"--strategy={strategy}", *common]
    else:
        cmd = ["/usr/bin/python3", here, f"--child={name}", *common]
    run = subprocess.run(cmd, env=child_env(args), capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        raise SystemExit(f"zoo_bench: {name} on {model} failed (exit {run.returncode}); "
                         "command: " + " ".join(cmd))
    if name.startswith("tessel-"):
        ranks = []
        for r in range(WORKERS):
            with open(f"{out}.r{r}.json") as f:
                ranks.append(json.load(f))
        return {"times": ranks[0]["times"], "ranks": [r["memory"] for r in ranks],
                "servers_mib": ranks[0].get("servers_mib")}
    with open(out) as f:
        return json.load(f)


def describe(model):
    n = sum(p.numel() for p in make_model(model).parameters())
    if model == "resnet18":
        return (f"resnet18: torchvision ResNet-18, 10 classes, {n:,} parameters "
                f"({n * 4 / 1e6:.1f} MB fp32), {RESNET_BATCH} images of 3x32x32 per worker")
    return (f"lm: Transformer LM, vocab {LM['vocab']}, seq {LM['seq']}, d_model "
            f"{LM['d_model']}, {LM['nhead']} heads, {LM['layers']} layers, {n:,} parameters "
            f"({n * 4 / 1e6:.1f} MB fp32), {LM_BATCH} sequences per worker")


def step_ms(runs):
    """A contender's step time: the median of its quiet runs' medians (of all
    its runs' when none was quiet), in ms."""
    quiet = [r for r in runs if r["quiet"]] or runs
    return statistics.median(statistics.median(r["times"]) for r in quiet) * 1e3


def print_summary(args, models, contenders, results, unavailable, not_quiet):
    """The table: per model and contender, the step time (and its ratio to the
    baseline's) and the memory columns the module's docs describe."""
    print(f"\nsummary: step = median over the quiet repeats (all {args.repeats} where none "
          f"was quiet) of each run's median step, {not_quiet} run(s) NOT-QUIET; memory per "
          f"worker process, the larger rank, the largest over repeats; servers = the 2 shard "
          f"servers' peak RSS summed")
    print(f"{'model':8} {'contender':13} {'step ms':>8} {'vs ddp':>7} {'peak RSS':>9} "
          f"{'growth':>8} {'heap peak':>10} {'servers':>8}")
    print(f"{'':8} {'':13} {'':>8} {'':>7} {'MiB':>9} {'MiB':>8} {'MiB':>10} {'MiB':>8}")
    for m in models:
        base = results.get((m, BASELINE))
        base_ms = step_ms(base) if base else None
        for c in contenders:
            if (m, c) in unavailable:
                print(f"{m:8} {c:13} {'n/a':>8}  {unavailable[(m, c)]}")
                continue
            rs = results[(m, c)]
            ms = step_ms(rs)
            ratio = f"{ms / base_ms:7.2f}" if base_ms else f"{'-':>7}"
            peak = max(x["peak_rss_mib"] for r in rs for x in r["ranks"])
            growth = max(x["rss_growth_mib"] for r in rs for x in r["ranks"])
            heap = max(x["heap_peak_mib"] for r in rs for x in r["ranks"])
            servers = [r["servers_mib"] for r in rs if r.get("servers_mib") is not None]
            srv = f"{max(servers):8.0f}" if servers else f"{'-':>8}"
            print(f"{m:8} {c:13} {ms:8.1f} {ratio} {peak:9.0f} {growth:8.0f} "
                  f"{heap:10.0f} {srv}{'  (baseline)' if c == BASELINE else ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", default="zero2", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="resnet18", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--launch", default="", help="tessel-launch (the Bazel target sets it)")
    ap.add_argument("--python_root", default="", help="folder holding the tessel package")
    ap.add_argument("--zoo_root", default="", help="folder holding zoo_models.py")
    ap.add_argument("--models", default="resnet18,lm")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run (after 3 warm-up)")
    ap.add_argument("--quiet_max_s", type=float, default=30)
    args = ap.parse_args()
    if args.zoo_root:
        sys.path.insert(0, args.zoo_root)

    if args.child:
        if args.child == "tessel-worker":
            return child_tessel_worker(args)
        result = {"single": child_single, "torch-ddp": child_torch,
                  "torch-fsdp": child_torch}[args.child](args)
        with open(args.out, "w") as f:
            json.dump(result, f)
        return None

    if not args.launch or not os.path.exists(args.launch):
        raise SystemExit("zoo_bench: --launch=PATH to tessel-launch is required "
                         "(bazel run //benchmarks:zoo_bench sets it)")
    models = [m for m in args.models.split(",") if m]
    contenders = [c for c in args.contenders.split(",") if c]
    torch_banner("zoo_bench")
    print(f"zoo_bench: Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores; {WORKERS} workers (1 BLAS thread each), {SERVERS} shard "
          f"servers for Tessel; Adam lr 1e-3; {args.repeats} repeats x {args.steps} steps "
          f"(+{WARM} warm-up); baseline {BASELINE}")
    for m in models:
        print("  " + describe(m))
    sys.stdout.flush()
    results = {(m, c): [] for m in models for c in contenders}
    unavailable = {}
    not_quiet = 0
    with tempfile.TemporaryDirectory(prefix="zoo_bench-") as run_dir:
        for rep in range(args.repeats):
            order = contenders[rep % len(contenders):] + contenders[:rep % len(contenders)]
            rep_dir = os.path.join(run_dir, f"rep{rep}")
            os.makedirs(rep_dir)
            for m in models:
                for c in order:
                    if (m, c) in unavailable:
                        continue
                    quiet, idle, _ = wait_quiet(args.quiet_max_s)
                    not_quiet += 0 if quiet else 1
                    r = run_contender(args, c, m, rep_dir)
                    if "unavailable" in r:
                        unavailable[(m, c)] = r["unavailable"]
                        print(f"repeat {rep + 1}  {m:<8} {c:<13} unavailable: "
                              f"{r['unavailable']}", flush=True)
                        continue
                    r["quiet"] = quiet
                    results[(m, c)].append(r)
                    print(f"repeat {rep + 1}  {m:<8} {c:<13} "
                          f"{times_line(r['times'], quiet, idle)}", flush=True)
    print_summary(args, models, contenders, results, unavailable, not_quiet)
    return None


if __name__ == "__main__":
    main()
