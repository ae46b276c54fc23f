"""A tessel.torch.parallel job survives a shard server's death and a worker's.

examples/hybrid_attention.py with PP2 x DP2 (zero2, SGD) and TP2 x PP2 (zero1,
Adam), checkpointing every 10 steps, runs twice on a cluster of its own (a
registry, 2 shard servers sharing a checkpoint directory, 4 worker processes
under tessel-launch --registry): once clean, once with shard server 1 killed
(-9) mid-training and restarted with the same flags 0.5 s later, as Kubernetes
would. Every process must notice (in opt.step() or waiting on a peer in
Pipeline.step()), roll back to the newest checkpoint complete in every
partition job, and go on; the final parameters must equal the clean run's
bit for bit. Then PP2 x DP2 once more with worker rank 1 killed (-9) instead:
tessel-launch --max_restarts=1 starts it again, the others welcome it as a
replacement, it resumes from the checkpoint every partition agrees on, the
others roll back there, and the run again ends bitwise as the clean one.

Usage: parallel_recovery_test.py --registry=BIN --server=BIN --launch=BIN --example=PY
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

LEASE_MS = 3000
STEPS = 240


class Cluster:
    """A registry and 2 shard servers (spawned here, so one can be killed)."""

    def __init__(self, args, d):
        self.args, self.d = args, d
        os.makedirs(d)
        self.procs = []
        port = os.path.join(d, "registry.port")
        self.spawn([args.registry, "--insecure", "--listen=127.0.0.1:0", f"--port_file={port}",
                    f"--lease_ttl_ms={LEASE_MS}"], "registry.log")
        for _ in range(200):
            if os.path.exists(port) and open(port).read().strip():
                break
            time.sleep(0.05)
        self.address = open(port).read().strip()
        self.ckdir = os.path.join(d, "checkpoints")
        self.servers = {s: self.start_server(s) for s in range(2)}

    def spawn(self, cmd, log):
        p = subprocess.Popen(cmd, stdout=open(os.path.join(self.d, log), "a"),
                             stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def start_server(self, s):
        return self.spawn([self.args.server, "--insecure", f"--registry={self.address}", f"--shard={s}",
                           f"--lease_ttl_ms={LEASE_MS}", f"--checkpoint_dir={self.ckdir}",
                           "--update_threads=2"], f"server{s}.log")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(timeout=10)


def worker_pid(job, rank):
    """The pid of the first start of worker `rank` of `job` (from its environment)."""
    want = {f"TESSEL_JOB={job}".encode(), f"TESSEL_RANK={rank}".encode()}
    for pid in os.listdir("/proc"):
        try:
            env = set(open(f"/proc/{pid}/environ", "rb").read().split(b"\0"))
        except (OSError, ValueError):
            continue
        if want <= env and b"TESSEL_RESTART_COUNT=0" in env:
            return int(pid)
    return None


def train(args, root, name, shape, kill_at=None, kill_worker=False):
    """Runs the job; returns (every rank's output, the final parameters, seconds). With
    kill_at, shard server 1 (or, with kill_worker, worker rank 1) dies at that step."""
    tp, pp, micro, optimizer, strategy = shape
    c = Cluster(args, os.path.join(root, name))
    out = os.path.join(c.d, "out")
    cmd = [args.launch, f"--registry={c.address}", "--nproc_per_node=4", f"--job={name}",
           "--timeout_s=240", f"--max_restarts={1 if kill_worker else 0}", f"--run_dir={os.path.join(c.d, 'run')}", "--",
           "/usr/bin/python3", args.example, f"--tp={tp}", f"--pp={pp}",
           f"--micro_batches={micro}", f"--steps={STEPS}", f"--optimizer={optimizer}",
           "--lr=0.01", f"--strategy={strategy}", "--checkpoint_every_steps=10", "--log_every=1",
           f"--out={out}"]
    start = time.monotonic()
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    killed = threading.Event()

    def read():
        for line in launcher.stdout:
            lines.append(line)
            m = re.match(r"step (\d+): loss", line)
            if kill_at is not None and m and int(m.group(1)) >= kill_at and not killed.is_set():
                killed.set()
                if kill_worker:
                    pid = worker_pid(name, 1)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                    continue
                c.servers[1].send_signal(signal.SIGKILL)
                c.servers[1].wait()
                time.sleep(0.5)
                c.servers[1] = c.start_server(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        rc = launcher.wait(timeout=300)
    except subprocess.TimeoutExpired:
        launcher.kill()
        rc = "timeout"
    reader.join(timeout=10)
    secs = time.monotonic() - start
    c.stop()
    text = "".join(lines)
    for log in sorted(os.listdir(os.path.join(c.d, "run"))):  # the other ranks' output
        if log.startswith("worker") and log != "worker0.log":
            text += open(os.path.join(c.d, "run", log), errors="replace").read()
    if rc != 0:
        print(text[-6000:])
        for log in sorted(os.listdir(os.path.join(c.d, "run"))):
            print(f"--- {log}")
            print(open(os.path.join(c.d, "run", log), errors="replace").read()[-3000:])
        sys.exit(f"FAIL: {name}: tessel-launch exited {rc}")
    params = {}
    for p in range(pp):
        for k, v in torch.load(os.path.join(out, f"stage{p}.pt")).items():
            params[f"{p}.{k}"] = v
    return text, params, secs


def main():
    ap = argparse.ArgumentParser()
    for flag in ("registry", "server", "launch", "example"):
        ap.add_argument(f"--{flag}", required=True)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="parallel-recovery-", dir=os.environ.get("TEST_TMPDIR"))
    failures = []
    for name, shape in (("pp2-dp2", (1, 2, 2, "sgd", "zero2")),
                        ("tp2-pp2", (2, 2, 2, "adam", "zero1"))):
        _, clean, clean_s = train(args, root, name + "-clean", shape)
        text, faulty, fault_s = train(args, root, name + "-kill", shape, kill_at=STEPS // 2 + 5)
        rolled = {int(r): int(to) for r, to in
                  re.findall(r"rank (\d+) step \d+: rolled back to step (\d+)", text)}
        m = re.search(r"recoveries (\d+)", text)
        recoveries = int(m.group(1)) if m else -1
        same = all(torch.equal(clean[k], faulty[k]) for k in clean)
        print(f"{name}: clean {clean_s:.1f} s; shard server 1 killed at step {STEPS // 2 + 5} and "
              f"restarted: {fault_s:.1f} s, rank 0 recoveries {recoveries}, final parameters "
              f"{'bitwise equal' if same else 'DIFFERENT'} to the clean run", flush=True)
        print(f"{name}: rollback step per rank {rolled}")
        if recoveries < 1:
            failures.append(f"{name}: rank 0 did not recover")
        if sorted(rolled) != [0, 1, 2, 3] or len(set(rolled.values())) != 1:
            failures.append(f"{name}: not every rank rolled back to one step: {rolled}")
        if not same:
            failures.append(f"{name}: the recovered run is not bitwise the clean one")
    shape = (1, 2, 2, "sgd", "zero2")
    _, clean, _ = train(args, root, "pp2-dp2-clean2", shape)
    text, faulty, fault_s = train(args, root, "pp2-dp2-worker", shape, kill_at=STEPS // 2 + 5,
                                  kill_worker=True)
    rolled = {int(r): int(to) for r, to in
              re.findall(r"rank (\d+) step \d+: rolled back to step (\d+)", text)}
    resumed = re.findall(r"rank 1: resumed at step (\d+)", text)
    same = all(torch.equal(clean[k], faulty[k]) for k in clean)
    print(f"pp2-dp2: worker rank 1 killed at step {STEPS // 2 + 5}, restarted by tessel-launch: "
          f"{fault_s:.1f} s; survivors rolled back to {rolled}, the replacement resumed at "
          f"{resumed}; final parameters {'bitwise equal' if same else 'DIFFERENT'} to the clean "
          f"run", flush=True)
    if sorted(rolled) != [0, 2, 3] or len(set(rolled.values())) != 1:
        failures.append(f"worker kill: the survivors did not all roll back to one step: {rolled}")
    if [int(r) for r in resumed] != list(set(rolled.values()))[:1]:
        failures.append(f"worker kill: the replacement resumed at {resumed}, the others at "
                        f"{rolled}")
    if not same:
        failures.append("worker kill: the recovered run is not bitwise the clean one")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
