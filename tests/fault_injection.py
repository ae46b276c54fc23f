#!/usr/bin/env python3
"""Fault injection: kill -9 workers and shard servers of a training job at
random moments, restart them, and check that automatic recovery loses and
repeats nothing.

Each seeded run trains the MLP with tessel-train (W workers, S shard servers,
checkpoints every few steps, --recover) and injects one or two faults: a
random worker rank or shard is killed with SIGKILL at a random time (mid-step,
or while a checkpoint is being written), stays dead for a random while, and
is restarted the way an operator or Kubernetes would (a worker with --resume,
a server with the same --shard and --checkpoint_dir). The job must finish on
its own, and then, against a clean run of the same steps:
  - rank 0's final parameters are bitwise equal,
  - every shard's state digest (parameters, optimizer state, step) is equal,
  - every step's loss, including each replayed step, is bitwise equal, and
    no step is missing (a lost or twice-applied update would change the
    parameters and every later loss).
Under zero1, zero2 and fsdp a lost worker (killed or paused past its lease) must not
roll the job back at all: its replacement rejoins the step in flight (a run
whose faults are all worker faults fails if any shard counts a recovery).
It prints runs, faults, recoveries, rollbacks, lost/double-applied updates, stale frames
refused by servers, and recovery times.

Usage: fault_injection.py REGISTRY SERVER TRAIN TESSELCTL [CRASH_SENDER]
With CRASH_SENDER (transport's ucx_crash_sender) a fault may also be a
"wedge": a process dies inside a send into a shard server's shared-memory
receive queue, as a worker killed mid-push does; the server must find it
and renew its endpoint, and the job recover, with the same checks.
Environment: TESSEL_FAULT_RUNS (default 4), TESSEL_FAULT_SEED (default 1),
TESSEL_FAULT_STEPS (default 240), TESSEL_FAULT_REPORT (write a JSON summary),
TESSEL_FAULT_STRATEGIES (default zero2,ddp,fsdp@host,zero1-bf16,ddp@host,
zero1,fsdp,zero2@host; runs cycle through them, so CI's 4 runs leave ddp on
the device path, plain zero1 and the CPU's fsdp to the longer runs). "@host" computes on the device code path's CPU
emulation (tessel-train --device=host: device buffers, streams, per-unit
copies, DeviceStaging's reload after recovery), and is checked against the
clean run on the CPU: it must give the CPU's bits through every fault.
DDP writes no checkpoint: a replacement worker takes the survivors' state and
nothing rolls back; the same checks apply.
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

from proc_util import cleanup, crash_into, log, shards_json, spawn, start_registry, wait_all
from proc_util import read_losses as proc_read_losses

REGISTRY, SERVER, TRAIN, CTL = sys.argv[1:5]
# Optional: ucx_crash_sender, for "wedge" faults (a process dies inside a
# send into a shard server's shared-memory receive queue, as a worker killed
# mid-push does; the server must find the wedge and renew its endpoint).
CRASH = sys.argv[5] if len(sys.argv) > 5 else None
RUNS = int(os.environ.get("TESSEL_FAULT_RUNS", "4"))
SEED = int(os.environ.get("TESSEL_FAULT_SEED", "1"))
STEPS = int(os.environ.get("TESSEL_FAULT_STEPS", "240"))
ROOT = tempfile.mkdtemp(prefix="fault-", dir=os.environ.get("TEST_TMPDIR"))
WORLD, SHARDS, EVERY = 2, 2, 5
LEASE_MS = 1500
RECOVERY_TIMEOUT_S = 25
# strategy[-precision][@device]: zero1/zero2/fsdp/ddp in fp32, and zero1 in
# bf16 (mixed precision: half on the wire and on workers, fp32 masters on
# servers); @host: the device code path on the CPU emulation.
STRATEGIES = os.environ.get("TESSEL_FAULT_STRATEGIES",
                            "zero2,ddp,fsdp@host,zero1-bf16,ddp@host,zero1,fsdp,zero2@host"
                            ).split(",")


def in_place(strategy):
    """Whether a lost worker of this strategy rejoins the step in flight (no
    rollback: worker/internal/rejoin.h)."""
    return strategy.split("@")[0].split("-")[0] in ("zero1", "zero2", "fsdp")


def on_cpu(strategy):
    """The strategy computed on the CPU: the clean run a fault run must equal."""
    return strategy.split("@")[0]
MODEL = ["--layers=32,256,256,8", "--samples=4096", "--batch=64", "--optimizer=adam",
         "--lr=0.01", "--ucx_tls=posix,sysv,self"]



class Cluster:
    """One registry, SHARDS servers, WORLD workers of one job."""

    def __init__(self, d, strategy, write_delay_ms):
        self.d, self.strategy, self.write_delay_ms = d, strategy, write_delay_ms
        os.makedirs(d)
        self.registry, self.reg = start_registry(REGISTRY, d, LEASE_MS)
        self.ckdir = os.path.join(d, "checkpoints")
        self.servers = {s: self.start_server(s) for s in range(SHARDS)}
        self.wait_servers()
        self.workers = {r: self.start_worker(r, resume=False) for r in range(WORLD)}

    def start_server(self, s):
        return spawn([SERVER, "--insecure", "--registry=" + self.reg, "--shard=%d" % s,
                      "--ucx_tls=posix,sysv,self", "--lease_ttl_ms=%d" % LEASE_MS,
                      "--checkpoint_dir=" + self.ckdir,
                      "--checkpoint_write_delay_ms=%d" % self.write_delay_ms,
                      # concurrent bucket updates through every fault
                      "--update_threads=2"],
                     os.path.join(self.d, "server%d.log" % s))

    def wait_servers(self):
        for _ in range(200):
            out = subprocess.run([CTL, "--registry", self.reg, "members", "-o", "json"],
                                 capture_output=True, text=True).stdout
            if out.count('"role": "server"') >= SHARDS:
                return
            time.sleep(0.05)
        raise RuntimeError("servers did not register")

    def start_worker(self, r, resume):
        name, _, device = self.strategy.partition("@")
        args = [TRAIN, "--registry=" + self.reg, "--job=fi", "--rank=%d" % r,
                "--world=%d" % WORLD, "--servers=%d" % SHARDS, "--steps=%d" % STEPS,
                "--strategy=" + name.split("-")[0],
                "--precision=" + (name.split("-") + ["fp32"])[1],
                "--recover", "--recovery_timeout_s=%d" % RECOVERY_TIMEOUT_S,
                "--step_timeout_s=60", "--lease_ttl_ms=%d" % LEASE_MS, "--log_every=1000000",
                "--out=" + os.path.join(self.d, "final.npy"),
                "--loss_log=" + os.path.join(self.d, "loss.txt")] + MODEL
        if not self.strategy.startswith("ddp"):  # DDP keeps its state on the workers
            args += ["--checkpoint_every_steps=%d" % EVERY, "--checkpoint_initial"]
        if device:
            args.append("--device=" + device)
        if resume:
            args.append("--resume")
        return spawn(args, os.path.join(self.d, "worker%d.log" % r))

    def wedge_server(self, s):
        """Runs ucx_crash_sender into the live server s's receive queue (a
        restarted one may not have joined yet, and its dead predecessor may
        still be listed); True if it died inside the send."""
        _, died = crash_into(CRASH, CTL, self.reg, "default", "server", s,
                             pid=self.servers[s].pid)
        return died

    def steps_done(self):
        try:
            with open(os.path.join(self.d, "loss.txt.rank%d" % (WORLD - 1))) as f:
                lines = f.read().split("\n")
            done = [l for l in lines if l.strip()]
            return int(done[-1].split()[0]) + 1 if done else 0
        except FileNotFoundError:
            return 0

    def checkpoint_in_progress(self):
        for d in glob.glob(os.path.join(self.ckdir, "fi", "step-*")):
            if not os.path.exists(os.path.join(d, "MANIFEST.json")) and os.listdir(d):
                return True
        return False

    def shards_json(self):
        return shards_json(CTL, self.reg, "fi")

    def wait_workers(self, timeout):
        return wait_all(self.workers, timeout)


def read_losses(d):
    return proc_read_losses(d, WORLD)


def tail(path, n=8):
    try:
        with open(path, errors="replace") as f:
            return "".join(l for l in f.readlines() if "UCX  WARN" not in l)[-4000:].splitlines()[-n:]
    except FileNotFoundError:
        return []


def show_logs(d):
    """The end of every log of a failed run (CI deletes the directory)."""
    for f in sorted(glob.glob(os.path.join(d, "*.log"))):
        log("    --- " + os.path.basename(f))
        for line in tail(f):
            log("    " + line[:300])


def clean_run(strategy):
    d = os.path.join(ROOT, "clean-" + strategy)
    c = Cluster(d, strategy, 0)
    rcs = c.wait_workers(120)
    if any(rc != 0 for rc in rcs.values()):
        show_logs(d)
        raise RuntimeError("clean %s run failed: %s (see %s)" % (strategy, rcs, d))
    shards = c.shards_json()
    cleanup()
    return {"final": open(os.path.join(d, "final.npy"), "rb").read(),
            "loss": read_losses(d),
            "digests": [s["stats"]["state_digest"] for s in shards]}


def recovered_times(c):
    """unix ms of every 'recovered; going on' (a rollback) and 'rejoined in place;
    going on' line in the workers' logs."""
    times = []
    for f in glob.glob(os.path.join(c.d, "worker*.log")):
        for line in open(f, errors="replace"):
            if "; going on from step" in line and "unix_ms" in line:  # rolled back or in place
                times.append(int(line.rsplit("unix_ms", 1)[1].strip(" )\n")))
    return sorted(times)


def fault_run(i, rng, clean):
    strategy = STRATEGIES[i % len(STRATEGIES)]
    mid_checkpoint = rng.random() < 0.3
    d = os.path.join(ROOT, "run%03d-%s" % (i, strategy))
    c = Cluster(d, strategy, 5 if mid_checkpoint else 0)
    faults = []
    zombies = []
    nfaults = 1 if rng.random() < 0.6 else 2
    for f in range(nfaults):
        # kill: SIGKILL, then a restart. pause: SIGSTOP past the lease (a
        # partition or a long stall), a replacement takes over, then SIGCONT:
        # the stale process must stand down, its frames refused.
        kind, how = rng.choice([("worker", "kill"), ("server", "kill"), ("worker", "kill"),
                                ("server", "kill"), ("worker", "pause"), ("server", "pause")] +
                               ([("server", "wedge")] if CRASH else []))
        who = rng.randrange(WORLD if kind == "worker" else SHARDS)
        at = rng.randrange(STEPS // 10, STEPS * 8 // 10)
        # Wait until training has reached step `at` (or a checkpoint write is
        # under way, for mid-checkpoint faults).
        end = time.time() + 60
        while time.time() < end and c.steps_done() < at:
            if all(p.poll() is not None for p in c.workers.values()):
                break
            time.sleep(0.005)
        ddp_worker = strategy.startswith("ddp") and kind == "worker"
        if (how in ("pause", "wedge") or ddp_worker) and faults:
            # Pause only a process that is training: a replacement still
            # starting up would merely start late. (Kills may land inside
            # the previous recovery, except a DDP worker's: DDP keeps its
            # state only on the workers, and killing the last one that holds
            # it before the replacement has it loses the job by design. A
            # wedge needs a live server to write into.)
            end = time.time() + 30
            while time.time() < end and c.steps_done() <= faults[-1]["at_step"] + 2:
                time.sleep(0.01)
        if mid_checkpoint:
            end = time.time() + 3
            while time.time() < end and not c.checkpoint_in_progress():
                time.sleep(0.002)
        time.sleep(rng.random() * 0.02)  # land anywhere inside a step
        in_ckpt = c.checkpoint_in_progress()
        target = c.workers[who] if kind == "worker" else c.servers[who]
        if c.steps_done() >= STEPS or any(p.poll() is not None for p in c.workers.values()):
            break  # training is over: nothing left to recover
        kill_ms = int(time.time() * 1000)
        at_step = c.steps_done()
        if how == "wedge":
            if not c.wedge_server(who):
                zombies.append("ucx_crash_sender did not die inside its send to server %d" % who)
            down = 0
        elif how == "kill":
            target.send_signal(signal.SIGKILL)
            target.wait()
            down = rng.uniform(0.1, 2.5)
        else:
            target.send_signal(signal.SIGSTOP)
            down = LEASE_MS / 1000.0 + rng.uniform(0.5, 1.5)  # the lease lapses meanwhile
        faults.append({"kind": kind, "how": how, "who": who, "at_step": at_step,
                       "down_s": round(down, 2), "mid_checkpoint": in_ckpt, "kill_ms": kill_ms})
        if how == "wedge":
            log("  run %d (%s): a writer dies inside a send into server %d's receive queue near "
                "step %d%s" % (i, strategy, who, at_step,
                               " during a checkpoint write" if in_ckpt else ""))
            continue  # the server renews its own endpoint
        log("  run %d (%s): %s %s %d near step %d%s, replaced after %.1fs" %
            (i, strategy, "kill -9" if how == "kill" else "SIGSTOP", kind, who, at_step,
             " during a checkpoint write" if in_ckpt else "", down))
        time.sleep(down)
        if kind == "worker":
            c.workers[who] = c.start_worker(who, resume=True)
        else:
            c.servers[who] = c.start_server(who)
        if how == "pause":
            time.sleep(rng.uniform(0.8, 2.0))  # the replacement holds the rank by now
            target.send_signal(signal.SIGCONT)  # the stale process wakes up
            # It stands down at once if the replacement holds the rank; if the
            # job finished meanwhile it re-joins, waits for the others and
            # gives up after the recovery timeout. Either way it must exit
            # non-zero and must not have trained beside the replacement.
            try:
                rc = target.wait(timeout=RECOVERY_TIMEOUT_S + 20)
            except subprocess.TimeoutExpired:
                rc = "still running"
            faults[-1]["stale_process_rc"] = rc
            if rc == 0 or rc == "still running":
                zombies.append("%s %d resumed after SIGSTOP and did not stand down (rc %s)" %
                               (kind, who, rc))
    rcs = c.wait_workers(180)
    result = {"run": i, "strategy": strategy, "faults": faults, "rcs": rcs, "dir": d}
    problems = list(zombies)
    if any(rc != 0 for rc in rcs.values()):
        problems.append("workers exited %s" % rcs)
    final = os.path.join(d, "final.npy")
    if not os.path.exists(final) or open(final, "rb").read() != clean["final"]:
        problems.append("final parameters differ from the clean run")
    losses = read_losses(d)
    # A killed worker cannot log the step it was in; some other rank has.
    missing = [k for k in range(STEPS) if not any((r, k) in losses for r in range(WORLD))]
    differ = sorted(k for k, v in losses.items() if any(x != clean["loss"][k][0] for x in v))
    result["replayed_steps"] = max(
        sum(len(v) - 1 for (r, _), v in losses.items() if r == rank) for rank in range(WORLD))
    result["missing_steps"], result["differing_steps"] = len(missing), len(differ)
    if missing:
        problems.append("steps never logged: %s" % missing[:10])
    if differ:
        problems.append("steps whose loss differs from the clean run: %s" % differ[:10])
    shards = c.shards_json()
    if shards is None:
        problems.append("tesselctl shards failed")
        result["stale"] = result["applied"] = result["rollbacks"] = 0
    else:
        digests = [s.get("stats", {}).get("state_digest") for s in shards]
        if digests != clean["digests"]:
            problems.append("shard state digests differ from the clean run")
        steps = [int(s.get("stats", {}).get("step", 0)) for s in shards]
        if steps != [STEPS] * SHARDS:
            problems.append("shards ended at steps %s, expected %d" % (steps, STEPS))
        result["stale"] = sum(int(s.get("stats", {}).get("staleEpochFrames",
                                                         s.get("stats", {}).get("stale_epoch_frames", 0)))
                              for s in shards)
        result["applied"] = sum(int(s.get("stats", {}).get("appliedSteps",
                                                           s.get("stats", {}).get("applied_steps", 0)))
                                for s in shards)
        # Rollbacks: times the job was replaced on a shard by a recovery.
        result["rollbacks"] = max(int(s.get("stats", {}).get("recoveries", 0)) for s in shards)
        if (in_place(strategy) and faults and all(f["kind"] == "worker" for f in faults)
                and result["rollbacks"] > 0):
            problems.append("a lost worker rolled the job back %d time(s); it rejoins in place "
                            "(zero1/zero2)" % result["rollbacks"])
    times = recovered_times(c)
    result["recoveries"] = 0
    result["recovery_ms"] = []
    for n, f in enumerate(faults):
        nxt = faults[n + 1]["kill_ms"] if n + 1 < len(faults) else float("inf")
        after = [t for t in times if f["kill_ms"] < t < nxt]
        if after:
            result["recoveries"] += 1
            result["recovery_ms"].append(max(after) - f["kill_ms"])
            f["recovery_ms"] = max(after) - f["kill_ms"]
    result["problems"] = problems
    cleanup()
    if problems:
        show_logs(d)
    if not problems:
        shutil.rmtree(d, ignore_errors=True)
    return result


def main():
    t0 = time.time()
    log("fault injection: %d runs, seed %d, %d steps, %d workers x %d shards, checkpoint every %d"
        % (RUNS, SEED, STEPS, WORLD, SHARDS, EVERY))
    try:
        clean = {}
        for s in STRATEGIES[:min(RUNS, len(STRATEGIES))]:
            if on_cpu(s) not in clean:
                clean[on_cpu(s)] = clean_run(on_cpu(s))
        results = []
        for i in range(RUNS):
            rng = random.Random(SEED * 1000003 + i)
            strategy = STRATEGIES[i % len(STRATEGIES)]
            r = fault_run(i, rng, clean[on_cpu(strategy)])
            results.append(r)
            log("  run %d (%s): %s; replayed %d steps, %d rollback(s), servers refused %d stale "
                "frames, recovery %s ms" % (i, strategy, "OK" if not r["problems"] else
                                            "FAIL: " + "; ".join(r["problems"]) + " (" + r["dir"]
                                            + ")", r["replayed_steps"], r["rollbacks"], r["stale"],
                                            r["recovery_ms"]))
    finally:
        cleanup()
    faults = [f for r in results for f in r["faults"]]
    rec = [t for r in results for t in r["recovery_ms"]]
    failed = [r for r in results if r["problems"]]
    summary = {
        "runs": len(results),
        "faults": len(faults),
        "worker_faults": sum(f["kind"] == "worker" for f in faults),
        "server_faults": sum(f["kind"] == "server" for f in faults),
        "paused_then_replaced": sum(f["how"] == "pause" for f in faults),
        "server_queues_wedged": sum(f["how"] == "wedge" for f in faults),
        "stale_processes_stood_down": sum(f.get("stale_process_rc") not in (None, 0, "still running")
                                          for f in faults),
        "mid_checkpoint_faults": sum(bool(f["mid_checkpoint"]) for f in faults),
        "recoveries": sum(r["recoveries"] for r in results),
        "rollbacks": sum(r["rollbacks"] for r in results),
        "worker_faults_without_rollback": sum(
            1 for r in results if in_place(r["strategy"]) and r["rollbacks"] == 0
            for f in r["faults"] if f["kind"] == "worker"),
        "lost_or_double_applied_steps": sum(r["missing_steps"] + r["differing_steps"]
                                            for r in results),
        "final_state_mismatches": sum(any("differ" in p or "ended at" in p for p in r["problems"])
                                      for r in results),
        "replayed_steps": sum(r["replayed_steps"] for r in results),
        "stale_frames_refused_by_servers": sum(r["stale"] for r in results),
        "recovery_ms_median": statistics.median(rec) if rec else None,
        "recovery_ms_max": max(rec) if rec else None,
        "failed_runs": len(failed),
        "recovery_ms_by_fault": {
            "%s %s" % (kind, how): "n=%d median=%s max=%s" % (
                len(ms), statistics.median(ms) if ms else "-", max(ms) if ms else "-")
            for kind, how in (("worker", "kill"), ("worker", "pause"), ("server", "kill"),
                              ("server", "pause"), ("server", "wedge"))
            for ms in [[f["recovery_ms"] for f in faults
                        if f["kind"] == kind and f["how"] == how and "recovery_ms" in f]]},
        "seconds": round(time.time() - t0, 1),
    }
    log("\nSUMMARY")
    for k, v in summary.items():
        log("  %-34s %s" % (k, v))
    if os.environ.get("TESSEL_FAULT_REPORT"):
        with open(os.environ["TESSEL_FAULT_REPORT"], "w") as f:
            json.dump({"summary": summary, "runs": results}, f, indent=1, default=str)
    if failed:
        log("FAIL: %d run(s) failed; logs kept under %s" % (len(failed), ROOT))
        return 1
    shutil.rmtree(ROOT, ignore_errors=True)
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
