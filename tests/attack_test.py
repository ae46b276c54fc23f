#!/usr/bin/env python3
"""An attacker in no job against a Tessel cluster started the ordinary way.

Two ways of starting Tessel, each with a job trained twice (2 workers x 2
shard servers, real processes on loopback): once in peace (the reference),
once while a separate attacker process (tests/attacker.cc) sprays hostile
frames at every member it can see:

  standalone   tessel-registry and tessel-server started by hand with
               tokens (scripts/gen_tokens.sh), as docs/tools.md shows
  demo         tessel-demo's embedded cluster (the README's first command),
               whose credentials the launcher makes itself

What the attacker knows is what anyone may read without a credential: the
members' UCX addresses (`tesselctl members -o json`), the job's name, epoch
and step (`tesselctl describe job -o json`). It sends, for the steps just
ahead of the job: forged PUSH, PULL and INIT frames to both shard servers
(bare headers and headers with a made-up tag), forged PARAMS and ERROR
frames to both workers, PARAMS whose payload is 3x or 1/3 of what their
header says (the memory-safety attack: a worker once copied the real
length past its buffer), and, over gRPC, GetFrameKey and a checkpoint
delete with no credential. Checked:

  0 applied    the attacked job ends bitwise equal to the reference
  0 crashes    every server still alive, every worker exited 0
  0 killed     the job finished all its steps
  and the attack landed: the servers counted the refused frames

Under the sanitizer build (//tests:attack_test in the asan+ubsan run) the
servers and workers are AddressSanitizer builds, so an out-of-bounds write
fails the run.

Environment: TESSEL_ATTACK_STEPS (default 300), TESSEL_ATTACK_SCENARIOS
(default tokens,insecure,demo).

Usage: attack_test.py REGISTRY SERVER TRAIN CTL ATTACKER GEN_TOKENS RPC_PROBE DEMO
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, spawn  # noqa: E402

REGISTRY, SERVER, TRAIN, CTL, ATTACKER, GEN_TOKENS, PROBE, DEMO = sys.argv[1:9]
UCX = "--ucx_tls=posix,sysv,self"
# The sanitizer run trains fewer steps and leaves out the demo
# (TESSEL_ATTACK_STEPS, TESSEL_ATTACK_SCENARIOS: tokens,insecure,demo).
STEPS = int(os.environ.get("TESSEL_ATTACK_STEPS", "300"))
SCENARIOS = os.environ.get("TESSEL_ATTACK_SCENARIOS", "tokens,insecure,demo").split(",")
MODEL = ["--layers=32,256,256,8", "--samples=2048", "--batch=32", "--optimizer=adam",
         "--lr=0.01", "--strategy=zero2", "--steps=%d" % STEPS, UCX]


def ctl(reg, *args, token=None):
    cmd = [CTL, "--registry", reg] + (["--token_file", token] if token else []) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def members(reg):
    r = ctl(reg, "members", "-o", "json")
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []


def ucx_of(view_list, group, role):
    return [(int(m.get("rank", 0)), base64.b64decode(m["ucx_address"]).hex(), m.get("grpc_address"))
            for v in view_list if v.get("group") == group
            for m in v.get("members", []) if m.get("role") == role and m.get("ucx_address")]


def describe(reg, job, admin):
    """The job as an operator sees it (the test's view, not the attacker's)."""
    r = ctl(reg, "describe", "job", job, "-o", "json", token=admin)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def attack(reg, job, admin, insecure=False):
    """Waits until `job` trains, then attacks every member; returns a summary."""
    info = None
    for _ in range(300):
        info = describe(reg, job, admin)
        if info and info["step"]["min"] >= 5:
            break
        time.sleep(0.1)
    if not check(info is not None and info["step"]["min"] >= 5, "%s is training" % job):
        return None
    view = members(reg)
    servers = ucx_of(view, "default", "ROLE_SERVER") or ucx_of(view, "default", "server")
    workers = ucx_of(view, job, "ROLE_WORKER") or ucx_of(view, job, "worker")
    check(len(servers) == 2 and len(workers) == 2,
          "the attacker sees 2 servers and 2 workers from the registry (%d, %d)"
          % (len(servers), len(workers)))
    # What the attacker knows: the group's epoch from the listing anyone may
    # read; the step it does not know, so it sprays every step of the run.
    epochs = [v.get("epoch") for v in view if v.get("group") == job]
    epoch = int(epochs[0]) if epochs else 0
    check(epoch == info["epoch"], "the listing gives the attacker the job's epoch (%s, %s)"
          % (epoch, info["epoch"]))
    common = ["--job=" + job, "--epoch=%d" % epoch, "--steps=0:%d" % STEPS,
              "--ranks=0,1", "--shards=0,1", "--buckets=2", "--bytes=4096", UCX]
    sent = 0
    for _, address, _ in ([] if insecure else servers):
        r = subprocess.run([ATTACKER, "--to=" + address, "--kinds=push,pull,init"] + common,
                           capture_output=True, text=True, timeout=60)
        log("  attacker -> server: %s%s" % (r.stdout.strip(), r.stderr.strip()[-200:]))
        sent += int(r.stdout.split()[1]) if r.stdout.startswith("sent") else 0
    for _, address, _ in workers:
        kinds = "oversized,undersized" if insecure else "params,error,oversized,undersized"
        r = subprocess.run([ATTACKER, "--to=" + address, "--kinds=" + kinds] + common,
                           capture_output=True, text=True, timeout=60)
        log("  attacker -> worker: %s%s" % (r.stdout.strip(), r.stderr.strip()[-200:]))
        sent += int(r.stdout.split()[1]) if r.stdout.startswith("sent") else 0
    check(sent > 0, "the attacker sent %d frames" % sent)
    if insecure:
        return {"sent": sent}
    # The control plane, with no credential.
    grpc0 = next((g for _, _, g in servers if g), None)
    if grpc0:
        r = subprocess.run([PROBE, "--address=" + grpc0, "--rpc=GetFrameKey", "--job=" + job],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 5, "GetFrameKey without a credential refused (exit %d: %s)"
              % (r.returncode, r.stdout.strip()[:120]))
    r = ctl(reg, "checkpoint", "delete", "--job", job, "--step", "1")
    check(r.returncode == 5, "a checkpoint delete without a credential refused (exit %d)"
          % r.returncode)
    return {"sent": sent}


def standalone(d, insecure=False):
    """insecure: the cluster runs open (--insecure), so any frame of the right
    size would be taken; the attacker sends only PARAMS whose payload is not
    what their header says, which the workers' bounds must refuse (the
    memory-safety attack, under AddressSanitizer in the sanitizer run)."""
    log("== standalone%s: tessel-registry and tessel-server by hand, %s"
        % (" --insecure" if insecure else "", "open" if insecure else "with tokens"))
    d = os.path.join(d, "insecure" if insecure else "tokens")
    os.makedirs(d)
    creds = os.path.join(d, "creds")
    subprocess.run(["bash", GEN_TOKENS, creds], check=True, capture_output=True)
    tok = {r: os.path.join(creds, r + ".token") for r in ("admin", "worker", "server")}
    auth = ["--admin_token_file=" + tok["admin"], "--worker_token_file=" + tok["worker"]]
    if insecure:
        auth, tok["server"], tok["worker"], tok["admin"] = ["--insecure"], "", "", None
    port = os.path.join(d, "registry.port")
    spawn([REGISTRY, "--listen=127.0.0.1:0", "--port_file=" + port, "--lease_ttl_ms=3000"] +
          (["--server_token_file=" + tok["server"]] if tok["server"] else []) + auth,
          os.path.join(d, "registry.log"))
    for _ in range(200):
        if os.path.exists(port) and open(port).read().strip():
            break
        time.sleep(0.05)
    reg = open(port).read().strip()
    servers = [spawn([SERVER, "--registry=" + reg, "--shard=%d" % s, UCX, "--lease_ttl_ms=3000"] +
                     (["--token_file=" + tok["server"]] if tok["server"] else []) + auth,
                     os.path.join(d, "server%d.log" % s)) for s in range(2)]

    def train(job, attacked):
        out = os.path.join(d, job + ".npy")
        procs = [spawn([TRAIN, "--registry=" + reg, "--job=" + job, "--rank=%d" % r, "--world=2",
                        "--servers=2", "--log_every=100"] +
                       (["--token_file=" + tok["worker"]] if tok["worker"] else []) +
                       MODEL + (["--out=" + out] if r == 0 else []),
                       os.path.join(d, "%s.rank%d.log" % (job, r))) for r in range(2)]
        summary = attack(reg, job, tok["admin"], insecure) if attacked else None
        rcs = [p.wait(timeout=300) for p in procs]
        return out, rcs, summary

    ref, rcs, _ = train("reference", False)
    check(rcs == [0, 0], "the reference trained (exit codes %s)" % rcs)
    got, rcs, summary = train("attacked", True)
    check(rcs == [0, 0], "0 jobs killed: the attacked job's workers exited 0 (%s)" % rcs)
    check(all(p.poll() is None for p in servers), "0 crashes: both shard servers alive")
    same = (os.path.exists(ref) and os.path.exists(got) and
            open(ref, "rb").read() == open(got, "rb").read())
    check(same, "0 applied: the attacked job's final parameters are bitwise the reference's")
    if insecure:
        logs = "".join(open(os.path.join(d, "attacked.rank%d.log" % r), errors="replace").read()
                       for r in range(2))
        check("payload is not" in logs or "dropping" in logs,
              "the attack landed: the workers dropped the mis-sized PARAMS (their logs say so)")
    else:
        info = describe(reg, "attacked", tok["admin"]) or {}
        check(info.get("refused_frames", 0) > 0,
              "the attack landed: the servers refused %s frames of the attacked job"
              % info.get("refused_frames"))
    return summary


def demo(d):
    log("== demo: tessel-demo's embedded cluster (its own credentials)")
    out = os.path.join(d, "demo.txt")
    # The demo compares its result with one process training the same
    # batches: "max relative difference vs single process: 0" is the bitwise check.
    p = spawn([DEMO, "--steps=%d" % STEPS, "--workers=2", "--servers=2"], out)
    reg = admin = None
    for _ in range(600):
        # The demo's registry and admin token file (the operator's view): its
        # servers' command lines name them.
        ps = subprocess.run(["pgrep", "-a", "-P", str(p.pid)], capture_output=True, text=True)
        for line in ps.stdout.splitlines():
            for arg in line.split():
                if arg.startswith("--registry="):
                    reg = arg.split("=", 1)[1]
                if arg.startswith("--admin_token_file="):
                    admin = arg.split("=", 1)[1]
        if (reg and admin) or p.poll() is not None:
            break
        time.sleep(0.1)
    if not check(reg is not None and admin is not None,
                 "found the demo's registry (%s) and its admin token file" % reg):
        return None
    summary = attack(reg, "demo", admin)
    rc = p.wait(timeout=300)
    text = open(out).read()
    check(rc == 0 and "max relative difference vs single process: 0 " in text and
          text.strip().endswith("OK"),
          "0 applied, 0 killed: the demo ended bitwise equal to one process (exit %d)" % rc)
    return summary


def main():
    d = tempfile.mkdtemp(prefix="attack-", dir=os.environ.get("TEST_TMPDIR"))
    try:
        if "tokens" in SCENARIOS:
            standalone(d)
        if "insecure" in SCENARIOS:
            standalone(d, insecure=True)
        if "demo" in SCENARIOS:
            demo(d)
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
