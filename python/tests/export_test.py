"""tesselctl checkpoint export and tessel.torch.load_pretrained, end to end:
a registry and 2 shard servers (--checkpoint_dir) stay up while 2 workers
train ExportNet with zero2 in two parameter groups (jobs J and J.g1,
checkpoints every 3 steps; export_worker.py), rank 0 saving its state_dict
after steps 3 and 6. After the workers exit, the servers' checkpoints are
exported in each format, at the latest step and at --step 3, and read with
readers that share no code with the writers (safetensors_ref.py, torch.load,
np.load): each tensor is bitwise rank 0's parameter or buffer under its name
(the 0-d scale as [1]; BatchNorm's running statistics float32 and
num_batches_tracked int64, 0-d, from the job exp.buffers). The torch file
loads into a fresh model with load_state_dict(strict=True) and evaluates
bitwise as rank 0's model did. load_pretrained of each file into a fresh model gives rank
0's parameters bitwise. An unknown job or step, or an existing file, exits
non-zero with a message on stderr and leaves no file.

Usage: export_test.py --launch=tessel-launch --worker=export_worker.py
    --registry=tessel-registry --server=tessel-server --ctl=tesselctl
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import driver
import export_worker
import safetensors_ref
import tessel.torch as tt

JOB = "exp"
UCX_TLS = "posix,sysv,self"
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


class Cluster:
    """A registry and 2 shard servers on loopback, sharing one checkpoint folder."""

    def __init__(self, args, work):
        self.procs = []
        port_file = os.path.join(work, "registry.port")
        self.spawn([args.registry, "--insecure", "--listen=127.0.0.1:0", f"--port_file={port_file}"],
                   os.path.join(work, "registry.log"))
        deadline = time.monotonic() + 20
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline:
                sys.exit("FAIL: the registry did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            self.registry = f.read().strip()
        for shard in range(2):
            self.spawn([args.server, "--insecure", f"--registry={self.registry}", f"--shard={shard}",
                        f"--ucx_tls={UCX_TLS}", f"--checkpoint_dir={os.path.join(work, 'ckpt')}"],
                       os.path.join(work, f"server{shard}.log"))

    def spawn(self, argv, log):
        self.procs.append(subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT))

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)


def ctl(args, reg, *words):
    return subprocess.run([args.ctl, f"--registry={reg}", *words], capture_output=True, text=True,
                          timeout=60)


def wait_for_checkpoint(args, reg, job, step):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = ctl(args, reg, "checkpoint", "list", "--job", job)  # a table: STEP first
        if r.returncode == 0 and any(line.split()[:1] == [str(step)]
                                     for line in r.stdout.splitlines()):
            return True
        time.sleep(0.1)
    return False


def read_export(path, fmt):
    """name -> float32 numpy array, each read by a reader independent of tesselctl's."""
    if fmt == "safetensors":
        tensors, meta = safetensors_ref.read(path)
        check(meta.get("format") == "pt" and meta.get("tessel.job") == JOB,
              f"safetensors metadata names the format and the job: {meta}")
        return tensors
    if fmt == "torch":
        sd = torch.load(path, map_location="cpu")
        check(type(sd).__name__ == "OrderedDict" and
              all(t.dtype == (torch.int64 if k.endswith("num_batches_tracked") else torch.float32)
                  for k, t in sd.items()),
              "torch.load gives an OrderedDict of float32 tensors, num_batches_tracked int64")
        return {k: v.numpy() for k, v in sd.items()}
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def compare(got, want, params, what):
    """got: name -> array from a file; want: rank 0's state_dict (parameters and buffers)."""
    check(sorted(got) == sorted(want), f"{what}: the names are the model's state_dict keys "
                                       f"({sorted(got)})")
    for name, t in want.items():
        if name not in got:
            continue
        a = got[name]
        # 0-d parameters are registered as [1]; buffers keep their shape (0-d too).
        shape = list(t.shape) if t.dim() > 0 or name not in params else [1]
        check(list(a.shape) == shape and a.dtype == t.numpy().dtype and
              a.tobytes() == t.numpy().tobytes(),
              f"{what}: {name} {shape} {a.dtype} bitwise rank 0's")


def main():
    ap = argparse.ArgumentParser()
    for flag in ("launch", "worker", "registry", "server", "ctl"):
        ap.add_argument("--" + flag, required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="export-")
    out = os.path.join(work, "out")
    os.mkdir(out)
    start = time.monotonic()
    cluster = Cluster(args, work)
    try:
        os.environ["TESSEL_UCX_TLS"] = UCX_TLS
        torch.set_num_threads(1)  # as the workers: the same kernels for the eval comparison
        _, train_s = driver.launch(args.launch, JOB, ["/usr/bin/python3", args.worker, out],
                                   flags=[f"--registry={cluster.registry}"], timeout_s=120)
        reg = cluster.registry
        check(all(wait_for_checkpoint(args, reg, j, 6) for j in (JOB, JOB + ".g1")),
              "the servers completed the step-6 checkpoints of exp and exp.g1")
        sizes = {}
        for step in (6, 3):
            want = torch.load(os.path.join(out, f"step{step}.pt"))
            params = {n for n, _ in export_worker.make_model().named_parameters()}
            want_eval = torch.load(os.path.join(out, f"eval{step}.pt"))
            for fmt, ext in (("safetensors", "safetensors"), ("torch", "pt"), ("npz", "npz")):
                path = os.path.join(out, f"exp{step}.{ext}")
                step_flag = [] if step == 6 else ["--step", "3"]  # 6: the latest, by default
                t0 = time.monotonic()
                r = ctl(args, reg, "checkpoint", "export", "--job", JOB, "--format", fmt,
                        "--out", path, *step_flag)
                secs = time.monotonic() - t0
                if not check(r.returncode == 0 and os.path.exists(path),
                             f"export {fmt} step {step}: {r.stdout.strip()} {r.stderr.strip()}"):
                    continue
                sizes[(fmt, step)] = (os.path.getsize(path), secs)
                check("exp, exp.g1" in r.stdout, f"export {fmt} names both group jobs")
                check(not os.path.exists(path + ".tmp"), f"export {fmt}: no FILE.tmp left")
                compare(read_export(path, fmt), want, params, f"{fmt} step {step}")
                model = export_worker.make_model(seed=99)
                loaded = tt.load_pretrained(model, path)
                check(loaded.format == fmt and all(
                    torch.equal(v, want[n]) and v.shape == want[n].shape
                    and v.dtype == want[n].dtype for n, v in model.state_dict().items()),
                    f"load_pretrained({fmt} step {step}, strict) gives rank 0's parameters and "
                    f"buffers bitwise")
                if fmt == "torch":  # torch's own strict load
                    fresh = export_worker.make_model(seed=98)
                    fresh.load_state_dict(torch.load(path), strict=True)
                    fresh.eval()
                    with torch.no_grad():
                        got_eval = fresh(export_worker.eval_input())
                    check(torch.equal(got_eval, want_eval),
                          f"torch load_state_dict(strict=True) of the step-{step} export: eval "
                          f"outputs bitwise rank 0's model's")
        for (fmt, step), (size, secs) in sorted(sizes.items()):
            print(f"  {fmt:12s} step {step}: {size} bytes, export {secs:.2f} s")

        # Refusals: a message on stderr, a non-zero exit, and no file.
        for words, code, fragment, name in (
                (["--job", "nosuch"], 3, "job 'nosuch' has no complete checkpoint", "nojob.npz"),
                (["--job", JOB, "--step", "5"], 3, "no complete checkpoint of job 'exp' at step 5",
                 "nostep.npz"),
                (["--job", JOB], 1, "exists", "exp6.npz")):
            path = os.path.join(out, name)
            existed = os.path.exists(path)
            before = os.path.getsize(path) if existed else None
            r = ctl(args, reg, "checkpoint", "export", *words, "--format", "npz", "--out", path)
            check(r.returncode == code and fragment in r.stderr and
                  (os.path.getsize(path) == before if existed else not os.path.exists(path)) and
                  not os.path.exists(path + ".tmp"),
                  f"export {' '.join(words)} -> {name}: exit {r.returncode} (want {code}), "
                  f"stderr {r.stderr.strip()!r}, no file written")
        r = ctl(args, reg, "checkpoint", "export", "--job", JOB, "--format", "npz", "--out",
                os.path.join(out, "exp6.npz"), "--force")
        check(r.returncode == 0, "--force overwrites an existing file")
    finally:
        cluster.stop()
    print(f"training {train_s:.1f} s, whole test {time.monotonic() - start:.1f} s")
    driver.finish(failures)


if __name__ == "__main__":
    main()
