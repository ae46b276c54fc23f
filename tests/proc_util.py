"""Helpers shared by the multi-process test drivers (fault_injection.py,
elastic_test.py, hybrid_recovery_test.py, wedge_recovery_test.py): every
process they start goes through spawn(), so cleanup() can kill whatever is
left, and check() records failed checks in `failures`."""
import base64
import json
import os
import shutil
import signal
import subprocess
import time

procs = []
failures = []


def log(*a):
    print(*a, flush=True)


def spawn(args, out, env=None):
    """Starts `args` with stdout and stderr appended to the file `out`, with
    `env` (a dict) added to this process's environment."""
    p = subprocess.Popen(args, stdout=open(out, "a"), stderr=subprocess.STDOUT,
                         env=dict(os.environ, **env) if env else None)
    procs.append(p)
    return p


def cleanup():
    """Kills every process spawn() started that is still running, and reaps them."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    procs.clear()


def finish(work_dir):
    """The end of a test driver: stops what spawn() started, removes
    `work_dir` if every check passed (else says where its logs are), prints
    the failure count and returns the exit status."""
    cleanup()
    if not failures:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        log("logs kept in " + work_dir)
    log("%d failed" % len(failures))
    return 1 if failures else 0


def read(path):
    """The text of the file at `path` ("" if there is none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def check(cond, what):
    log(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


def wait_all(procs, timeout):
    """{key: exit status, or "timeout"} of the processes in the dict `procs`,
    waited for together up to `timeout` seconds."""
    end = time.time() + timeout
    rcs = {}
    for k, p in procs.items():
        try:
            rcs[k] = p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            rcs[k] = "timeout"
    return rcs


def shards_json(ctl, registry, job):
    """`tesselctl shards --job JOB -o json` parsed, or None if it failed."""
    out = subprocess.run([ctl, "--registry", registry, "shards", "--job", job, "-o", "json"],
                         capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def read_losses(d, world):
    """{(rank, step): [loss as logged, once per time the step ran]} from the
    --loss_log files d/loss.txt.rank<R> of ranks 0..world-1 (a replacement
    appends to its rank's file)."""
    losses = {}
    for r in range(world):
        for line in read(os.path.join(d, "loss.txt.rank%d" % r)).splitlines():
            if line.strip():
                k, v = line.split()[:2]
                losses.setdefault((r, int(k)), []).append(v)
    return losses


def start_registry(binary, d, lease_ms):
    """Starts tessel-registry on a free loopback port, logging to
    d/registry.log; returns (process, "host:port")."""
    port = os.path.join(d, "registry.port")
    # --insecure: the tests' registries run without credentials (roles_test.sh,
    # tls_test.sh and the launchers' generated tokens test those).
    p = spawn([binary, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port,
               "--lease_ttl_ms=%d" % lease_ms], os.path.join(d, "registry.log"))
    for _ in range(200):
        if os.path.exists(port) and open(port).read().strip():
            break
        time.sleep(0.05)
    return p, open(port).read().strip()


def crash_into(crash, ctl, registry, group, role, rank, pid=None, tls="posix,sysv,self"):
    """Runs ucx_crash_sender into the UCX receive queue of the member
    (group, role, rank[, pid]) listed by `tesselctl members`, waiting up to
    15 s for it to be listed. Returns (its hex UCX address or None, True if
    the sender died by SIGSEGV inside its send)."""
    end = time.time() + 15
    while time.time() < end:
        out = subprocess.run([ctl, "--registry", registry, "members", "--group", group, "-o",
                              "json"], capture_output=True, text=True).stdout
        for view in json.loads(out or "[]"):
            for m in view.get("members", []):
                if (m.get("role") == role and int(m.get("rank", 0)) == rank and
                        (pid is None or int(m.get("pid", 0)) == pid)):
                    address = base64.b64decode(m["ucx_address"]).hex()
                    env = dict(os.environ, UCX_HANDLE_ERRORS="none")
                    p = subprocess.run([crash, address, tls], env=env, capture_output=True,
                                       timeout=60)
                    return address, p.returncode == -signal.SIGSEGV
        time.sleep(0.05)
    return None, False
