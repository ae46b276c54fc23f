#!/usr/bin/env python3
"""tessel-launch on real processes:

  train        2 workers of tessel-train (started through `sh -c 'exec ...'`
               with values from the environment) on an embedded registry and
               2 shard servers: exit 0, rank 0's progress on the launcher's
               stdout, the other rank's output in its log only.
  config       --config supplies the launch flags ("launch" section), the
               command line wins over it, the shard servers read the same
               file (its fixed listen ports ignored), --checkpoint_dir
               reaches them and a checkpoint is written.
  env          what each rank sees: TESSEL_* and torchrun's names,
               TESSEL_CONFIG, PYTHONPATH (the tessel package first, the
               inherited value kept).
  registry     --registry: no registry or servers started, the workers train
               on the servers registered there (TESSEL_NUM_SERVERS=0).
  nodes        two launchers as two hosts (--nnodes=2, --node_rank=0 and 1, one
               worker each) on that registry: one job of world 2, RANK 0 and
               1, LOCAL_RANK 0 on both, GROUP_RANK the node's; both exit 0.
  restarts     a worker found on PATH that exits 3 in its first attempt:
               with --max_restarts=1 the job succeeds and the restart is
               reported; with --max_restarts=0 the launcher exits 3 with the
               tail of that worker's log.
  signals      SIGINT and SIGTERM to the launcher stop every worker and
               server it started; exit 130 and 143.
  bad input    clear errors, nothing started.

Usage: launch_test.py LAUNCH TRAIN REGISTRY SERVER
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from proc_util import check, cleanup, failures, log, spawn, start_registry

LAUNCH, TRAIN, REGISTRY, SERVER = [os.path.abspath(p) for p in sys.argv[1:5]]
ROOT = tempfile.mkdtemp(prefix="launch-", dir=os.environ.get("TEST_TMPDIR"))
BIN = os.path.join(ROOT, "bin")
os.makedirs(BIN)
ENV = dict(os.environ, TMPDIR=ROOT, PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
ENV.pop("PYTHONPATH", None)
TRAIN_ARGS = ("--steps=40 --log_every=10 --layers=16,32,4 --samples=512 --batch=8 "
              "--ucx_tls=posix,sysv,self")
# tessel-train with everything from tessel-launch's environment.
TRAIN_CMD = ('exec "%s" --registry="$TESSEL_REGISTRY" --rank="$TESSEL_RANK" '
             '--world="$TESSEL_WORLD_SIZE" --servers="$TESSEL_NUM_SERVERS" --job="$TESSEL_JOB" '
             '%s' % (TRAIN, TRAIN_ARGS))


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def run_dir(name):
    d = os.path.join(ROOT, name)
    assert not os.path.exists(d)
    return d


def launch(args, timeout=120, env=None):
    """Runs tessel-launch to its end; returns the CompletedProcess (stdout and
    stderr as text). The launcher's own --timeout_s is below `timeout`."""
    start = time.time()
    p = subprocess.run([LAUNCH] + args, capture_output=True, text=True, timeout=timeout,
                       env=env or ENV)
    log("  tessel-launch %s -> %d in %.1f s" % (" ".join(args)[:100], p.returncode,
                                                 time.time() - start))
    return p


def show(p):
    log("--- stdout:\n" + p.stdout[-3000:] + "--- stderr:\n" + p.stderr[-3000:])


def env_file(path):
    env = {}
    for line in read(path).splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    return env


def test_train():
    log("== train: 2 workers of tessel-train on 2 embedded shard servers")
    d = run_dir("train")
    p = launch(["--nproc_per_node=2", "--servers=2", "--job=train", "--run_dir=" + d,
                "--timeout_s=100", "--", "sh", "-c", TRAIN_CMD])
    ok = check(p.returncode == 0, "training exits 0")
    ok &= check("step    40/40" in p.stdout and "worker 0: test accuracy" in p.stdout,
                "rank 0's progress is on the launcher's stdout")
    ok &= check(p.stdout.count("test accuracy") == 1, "only rank 0's stdout is shown")
    ok &= check(d + "/worker<R>.log" in p.stderr, "the launcher says where the worker logs are")
    ok &= check(os.path.exists(d + "/worker1.log"), "rank 1 logs to worker1.log")
    ok &= check(os.path.exists(d + "/server0.log") and os.path.exists(d + "/server1.log"),
                "2 shard server logs")
    if not ok:
        show(p)


def test_config():
    log("== config: launch flags from --config, the command line wins, servers read it")
    d = run_dir("config")
    config = os.path.join(ROOT, "tessel.json")
    with open(config, "w") as f:
        json.dump({
            "common": {"registry": "", "pool": "default"},
            "launch": {"nproc_per_node": 2, "servers": 1, "job": "from-config",
                       "max_restarts": 2, "timeout_s": 100},
            # A deployment's fixed ports: the local servers must not use them.
            "server": {"listen": "0.0.0.0:7100", "health_listen": "0.0.0.0:7101",
                       "checkpoint_max_queued": 4},
        }, f)
    ckpt = os.path.join(ROOT, "checkpoints")
    # Two launchers with the same fixed-port config at once: only works if
    # the servers' listen addresses are the launcher's, not the file's.
    procs = []
    for i in range(2):
        args = ["--config=" + config, "--servers=2", "--run_dir=%s%d" % (d, i), "--", "sh", "-c",
                TRAIN_CMD + (" --checkpoint_every_steps=20" if i == 0 else "")]
        if i == 0:
            args.insert(0, "--checkpoint_dir=" + ckpt)
        procs.append(subprocess.Popen([LAUNCH] + args, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=ENV))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((p.returncode, out, err))
    for i, (rc, out, err) in enumerate(outs):
        ok = check(rc == 0, "launcher %d with the config exits 0" % i)
        ok &= check("job 'from-config': 2 worker(s)" in err, "job and world size from the config")
        ok &= check(os.path.exists("%s%d/server1.log" % (d, i)),
                    "--servers=2 on the command line wins over the config's 1")
        if not ok:
            log("--- stdout:\n" + out[-2000:] + "--- stderr:\n" + err[-3000:])
            log("--- server0.log:\n" + read("%s%d/server0.log" % (d, i))[-2000:])
    found = []
    for base, _, files in os.walk(ckpt):
        found += [os.path.join(base, f) for f in files]
    check(len(found) > 0, "--checkpoint_dir reaches the servers: %d checkpoint files" % len(found))


def test_env():
    log("== env: what each rank sees")
    d = run_dir("env")
    config = os.path.join(ROOT, "env.json")
    with open(config, "w") as f:
        json.dump({"launch": {"job": "envjob"}}, f)
    env = dict(ENV, PYTHONPATH="/inherited/path")
    p = launch(["--nproc_per_node=3", "--servers=1", "--run_dir=" + d, "--config=" + config,
                "--timeout_s=60", "--", "sh", "-c", 'env > "$TESSEL_RUN_DIR/env.$RANK"'], env=env)
    if not check(p.returncode == 0, "env run exits 0"):
        show(p)
    for rank in range(3):
        e = env_file("%s/env.%d" % (d, rank))
        registry = e.get("TESSEL_REGISTRY", "")
        want = {"TESSEL_JOB": "envjob", "TESSEL_RANK": str(rank), "TESSEL_WORLD_SIZE": "3",
                "TESSEL_NUM_SERVERS": "1", "TESSEL_RESTART_COUNT": "0", "TESSEL_RUN_DIR": d,
                "TESSEL_CONFIG": config, "RANK": str(rank), "WORLD_SIZE": "3",
                "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "3"}
        bad = {k: (e.get(k), v) for k, v in want.items() if e.get(k) != v}
        check(not bad, "rank %d's environment (wrong: %s)" % (rank, bad))
        check(registry.startswith("127.0.0.1:") and registry.split(":")[1].isdigit(),
              "rank %d: TESSEL_REGISTRY=%s" % (rank, registry))
        pythonpath = e.get("PYTHONPATH", "").split(":")
        if pythonpath[0] == "/inherited/path":
            check(len(pythonpath) == 1, "rank %d: PYTHONPATH inherited as it is (no tessel "
                                        "package in this build)" % rank)
        else:
            check(os.path.exists(os.path.join(pythonpath[0], "tessel", "__init__.py")) and
                  pythonpath[1:] == ["/inherited/path"],
                  "rank %d: PYTHONPATH=%s: the tessel package's folder, then the inherited "
                  "value" % (rank, ":".join(pythonpath)))
    log("  rank 0's PYTHONPATH: %s" % env_file(d + "/env.0").get("PYTHONPATH"))


def test_registry():
    log("== registry: --registry uses a running registry and its servers")
    d = run_dir("registry")
    os.makedirs(d)
    _, address = start_registry(REGISTRY, d, 3000)
    for s in range(2):
        spawn([SERVER, "--insecure", "--registry=" + address, "--shard=%d" % s, "--ucx_tls=posix,sysv,self"],
              os.path.join(d, "server%d.log" % s))
    time.sleep(1)
    p = launch(["--nproc_per_node=2", "--registry=" + address, "--job=external",
                "--run_dir=" + d + "/run", "--timeout_s=100", "--", "sh", "-c",
                'echo "$TESSEL_NUM_SERVERS $TESSEL_REGISTRY" > "$TESSEL_RUN_DIR/seen.$RANK"; ' +
                TRAIN_CMD])
    ok = check(p.returncode == 0 and "step    40/40" in p.stdout,
               "workers train on the registry's servers")
    ok &= check(read(d + "/run/seen.1").split() == ["0", address],
                "TESSEL_NUM_SERVERS=0 and TESSEL_REGISTRY=%s" % address)
    ok &= check(not any(f.startswith("server") for f in os.listdir(d + "/run")),
                "no servers started")
    if not ok:
        show(p)

    log("== nodes: --nnodes=2, one launcher per node rank, on the same registry")
    cmd = ('env > "$TESSEL_RUN_DIR/env.$RANK"; ' + TRAIN_CMD)
    nodes = [subprocess.Popen([LAUNCH, "--nnodes=2", "--node_rank=%d" % k, "--nproc_per_node=1",
                               "--registry=" + address, "--job=nodes",
                               "--run_dir=%s/node%d" % (d, k), "--timeout_s=100", "--", "sh",
                               "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV) for k in range(2)]
    outs = [n.communicate(timeout=120) for n in nodes]
    ok = check(all(n.returncode == 0 for n in nodes), "both nodes' launchers exit 0")
    ok &= check("step    40/40" in outs[0][0] and os.path.exists(d + "/node1/worker1.log"),
                "node 0 shows rank 0's progress; node 1 logs rank 1 to worker1.log")
    for k in range(2):
        e = env_file("%s/node%d/env.%d" % (d, k, k))
        ok &= check((e.get("RANK"), e.get("TESSEL_RANK"), e.get("LOCAL_RANK"), e.get("GROUP_RANK"),
                     e.get("WORLD_SIZE"), e.get("TESSEL_WORLD_SIZE")) ==
                    (str(k), str(k), "0", str(k), "2", "2"),
                    "node %d: RANK=%d LOCAL_RANK=0 GROUP_RANK=%d WORLD_SIZE=2" % (k, k, k))
    ok &= check("node 1 of 2: ranks 1..1 of 2" in outs[1][1], "node 1 says which ranks it runs")
    if not ok:
        for out, err in outs:
            log("--- stdout:\n" + out[-2000:] + "--- stderr:\n" + err[-2000:])
    cleanup()


def test_restarts():
    log("== restarts: a worker that fails once")
    script = os.path.join(BIN, "flaky-worker")
    with open(script, "w") as f:
        f.write('#!/bin/sh\n'
                'echo "rank $RANK attempt $TESSEL_RESTART_COUNT"\n'
                'if [ "$RANK" = 1 ] && [ "$TESSEL_RESTART_COUNT" = 0 ]; then\n'
                '  echo "rank 1 fails on purpose" >&2\n'
                '  exit 3\n'
                'fi\n'
                'sleep 0.5\n')
    os.chmod(script, 0o755)
    d = run_dir("restart1")
    p = launch(["--nproc_per_node=2", "--servers=1", "--max_restarts=1", "--run_dir=" + d,
                "--timeout_s=60", "--", "flaky-worker"])
    ok = check(p.returncode == 0, "--max_restarts=1: exits 0")
    ok &= check("rank 1 (worker1) exited with status 3; restarting it (restart 1 of 1" in p.stderr,
                "the restart is reported with rank and status")
    ok &= check("rank 1 fails on purpose" in p.stderr, "with the tail of the worker's log")
    ok &= check("rank 1 attempt 1" in read(d + "/worker1.restart1.log"),
                "the restarted worker sees TESSEL_RESTART_COUNT=1")
    if not ok:
        show(p)

    d = run_dir("restart0")
    p = launch(["--nproc_per_node=2", "--servers=1", "--max_restarts=0", "--run_dir=" + d,
                "--timeout_s=60", "--", "flaky-worker"])
    ok = check(p.returncode == 3, "--max_restarts=0: exits 3, the worker's status")
    ok &= check("rank 1 (worker1) exited with status 3" in p.stderr and
                "rank 1 fails on purpose" in p.stderr and d + "/worker1.log" in p.stderr,
                "names the failed worker with the tail of its log")
    if not ok:
        show(p)


def descendants(pid):
    """Every live process below `pid`, by /proc's parent links."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    stat = f.read()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def test_signals():
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        name = signal.Signals(sig).name
        log("== signals: %s stops every process" % name)
        d = run_dir("signal-" + name)
        p = spawn([LAUNCH, "--nproc_per_node=2", "--servers=2", "--run_dir=" + d,
                   "--timeout_s=100", "--", "sh", "-c",
                   'echo $$ > "$TESSEL_RUN_DIR/pid.$RANK.tmp"; '
                   'mv "$TESSEL_RUN_DIR/pid.$RANK.tmp" "$TESSEL_RUN_DIR/pid.$RANK"; exec sleep 300'],
                  os.path.join(ROOT, "signal-%s.out" % name), env=ENV)
        end = time.time() + 30
        while time.time() < end and not all(os.path.exists("%s/pid.%d" % (d, r))
                                             for r in range(2)):
            time.sleep(0.05)
        if not check(p.poll() is None and os.path.exists(d + "/pid.1"), "workers started"):
            log(read(os.path.join(ROOT, "signal-%s.out" % name)))
            continue
        workers = [int(read("%s/pid.%d" % (d, r))) for r in range(2)]
        started = descendants(p.pid)
        check(len(started) >= 4 and all(w in started for w in workers),
              "%d processes below the launcher (2 servers, 2 workers)" % len(started))
        os.kill(p.pid, sig)
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == code, "%s: the launcher exits %s (got %s)" % (name, code, rc))
        end = time.time() + 5
        while time.time() < end and any(alive(q) for q in started):
            time.sleep(0.05)
        left = [q for q in started if alive(q)]
        check(not left, "no process left (were %s, alive %s)" % (started, left))
        check("interrupted by signal %d" % sig in read(os.path.join(ROOT, "signal-%s.out" % name)),
              "the launcher says it was interrupted")
        for q in left:
            os.kill(q, signal.SIGKILL)


def test_bad_input():
    log("== bad input: clear errors, nothing started")
    bad_config = os.path.join(ROOT, "bad.json")
    with open(bad_config, "w") as f:
        json.dump({"launch": {"nproc_per_nod": 2}}, f)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free = str(s.getsockname()[1])  # bound, never listening: connections are refused
    cases = [
        (["--nproc_per_node=2", "sh", "-c", "true"], 2, "missing '--'"),
        (["--nproc_per_node=2", "--"], 2, "no worker command after '--'"),
        (["--nproc_per_node=0", "--", "true"], 2, "--nproc_per_node must be"),
        (["--servers=0", "--", "true"], 2, "--servers must be"),
        (["--max_restarts=-1", "--", "true"], 2, "--max_restarts must be"),
        (["--nnodes=2", "--", "true"], 2, "--nnodes > 1 needs --registry"),
        (["--nnodes=2", "--node_rank=2", "--", "true"], 2, "--node_rank must be in [0, 2)"),
        (["--bogus_flag=1", "--", "true"], 1, "Unknown command line flag 'bogus_flag'"),
        (["--nproc_per_node=two", "--", "true"], 1, "nproc_per_node"),
        (["--", "no-such-command-xyz"], 2, "command 'no-such-command-xyz' not found on PATH"),
        (["--", "./no/such/file"], 2, "no executable file"),
        (["--registry=127.0.0.1:" + free, "--", "true"], 2, "cannot reach the registry"),
        (["--config=" + bad_config, "--", "true"], 2, "launch.nproc_per_nod: not a flag"),
        (["--config=" + os.path.join(ROOT, "missing.json"), "--", "true"], 2, "cannot open"),
    ]
    for args, code, message in cases:
        d = run_dir("bad%d" % cases.index((args, code, message)))
        p = launch(["--run_dir=" + d] + args, timeout=30)
        ok = check(p.returncode == code and message in p.stderr,
                   "%s: exit %d, says %r" % (" ".join(args), code, message))
        ok &= check(not os.path.exists(d), "  nothing started (no run folder)")
        if not ok:
            show(p)
    p = launch(["--help"], timeout=30)
    out = p.stdout + p.stderr
    check(all(f in out for f in ("--nproc_per_node (worker processes", "--max_restarts (",
                                 "--nnodes (", "--node_rank (",
                                 "--servers (", "--registry (", "--config (", "--timeout_s (")),
          "--help lists tessel-launch's flags with their help")


def main():
    try:
        test_bad_input()
        test_train()
        test_env()
        test_config()
        test_registry()
        test_restarts()
        test_signals()
    finally:
        cleanup()
    if failures:
        log("\n%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))
        return 1
    log("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
