#!/usr/bin/env python3
"""An attacker against Tessel started each of the ordinary ways.

Each way of starting Tessel trains one job (2 workers x 2 shard servers,
real processes) twice: once in peace (the reference), once while a
separate attacker process (tests/attacker.cc) sprays hostile frames at
every member it can see. Scenarios (TESSEL_ATTACK_SCENARIOS):

  tokens       tessel-registry and tessel-server started by hand with
               tokens (scripts/gen_tokens.sh), as docs/tools.md shows
  insecure     the same started --insecure: only mis-sized PARAMS, which
               the workers' bounds must refuse
  demo         tessel-demo's embedded cluster (the README's first command),
               whose credentials the launcher makes itself
  member       a cluster started by hand with tokens, attacked from inside:
               a real member of a 3-rank job (rank 2 is the attacker) sends
               frames sealed under its own keys as other ranks, replayed
               from another endpoint, and toward the other workers, and
               asks for other ranks' keys; another tenant reaches for the
               job's derived names (attack_insider.py)
  launch       tessel-launch with 2 tessel.torch workers, no flag about
               security (attack_launch.py; plain run only)
  overlay      deploy/overlays/dev's pods, one network namespace each, with
               the overlay's generated token Secrets, attacked from another
               namespace on the same bridge (attack_overlay.py;
               //tests:attack_overlay_test: root, plain run only)

What the attacker knows is what anyone may read without a credential
(attack_lib.py): the members' UCX and gRPC addresses and each job's name
and epoch (`tesselctl members -o json`, no token). It sends, for every step
of the run: forged PUSH, PULL and INIT frames to both shard servers (bare
headers and headers with a made-up tag), forged PARAMS and ERROR frames to
both workers, PARAMS whose payload is 3x or 1/3 of what their header says
(the memory-safety attack: a worker once copied the real length past its
buffer), and, over gRPC, GetFrameKey and a checkpoint delete with no
credential. Checked:

  0 applied    the attacked job ends bitwise equal to the reference (final
               parameters; the overlay: every shard's state digest)
  0 crashes    every server still alive, no worker killed by a signal
  0 killed     the job finished all its steps, every worker exited 0
  and the attack landed: the servers counted the refused frames

The suite ends with a table of these counters per scenario (frames sent,
refused, applied, crashes, jobs killed).

Under the sanitizer build (//tests:attack_test in the asan+ubsan run) the
servers and workers are AddressSanitizer builds, so an out-of-bounds write
fails the run.

Environment: TESSEL_ATTACK_STEPS (default 300; the launch scenario's:
TESSEL_ATTACK_LAUNCH_STEPS, default 500), TESSEL_ATTACK_SCENARIOS (default
tokens,insecure,member,demo,launch).

Usage: attack_test.py REGISTRY SERVER TRAIN CTL ATTACKER GEN_TOKENS RPC_PROBE DEMO
    [--launch=tessel-launch --torch_worker=attack_torch_worker.py]
    [--deploy=deploy/base/kustomization.yaml --probe=tessel-health-probe [--kubectl=kubectl]]
"""
import argparse
import base64
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attack_lib  # noqa: E402
from attack_lib import (Tools, attack, describe, record, start_cluster,  # noqa: E402
                        wait_training)
from proc_util import check, finish, log, read, spawn  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
# The sanitizer run trains fewer steps and leaves out the demo and the launch
# (TESSEL_ATTACK_STEPS, TESSEL_ATTACK_SCENARIOS: tokens,insecure,member,demo,launch;
# overlay is //tests:attack_overlay_test's).
STEPS = int(os.environ.get("TESSEL_ATTACK_STEPS", "300"))
SCENARIOS = os.environ.get("TESSEL_ATTACK_SCENARIOS",
                           "tokens,insecure,member,demo,launch").split(",")
MODEL = ["--layers=32,256,256,8", "--samples=2048", "--batch=32", "--optimizer=adam",
         "--lr=0.01", "--strategy=zero2", "--steps=%d" % STEPS, UCX]
ARGS = None  # main()'s parsed command line
TOOLS = None


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
    subprocess.run(["bash", ARGS.gen_tokens, creds], check=True, capture_output=True)
    tok = {r: os.path.join(creds, r + ".token") for r in ("admin", "worker", "server")}
    # The insider: a worker token scoped to another job, in the same table.
    tok["insider"], table = os.path.join(creds, "insider.token"), os.path.join(creds, "workers")
    insider = base64.b64encode(os.urandom(24)).decode()
    for path, text in ((tok["insider"], insider + "\n"),
                       (table, read(tok["worker"]) + insider + " other-job\n")):
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(text)
    auth = ["--admin_token_file=" + tok["admin"], "--worker_token_file=" + table]
    if insecure:
        auth, tok["server"], tok["worker"], tok["admin"] = ["--insecure"], "", "", None
        tok["insider"] = None
    reg, servers = start_cluster(ARGS, d, auth, tok["server"], UCX)

    def train(job, attacked):
        out = os.path.join(d, job + ".npy")
        procs = [spawn([ARGS.train, "--registry=" + reg, "--job=" + job, "--rank=%d" % r,
                        "--world=2", "--servers=2", "--log_every=100"] +
                       (["--token_file=" + tok["worker"]] if tok["worker"] else []) +
                       MODEL + (["--out=" + out] if r == 0 else []),
                       os.path.join(d, "%s.rank%d.log" % (job, r))) for r in range(2)]
        answer = None
        if attacked:
            info = wait_training(TOOLS, reg, job, tok["admin"])
            if check(info is not None, "%s is training" % job):
                answer = attack(TOOLS, reg, job, info, STEPS, insecure=insecure,
                                insider_token=tok["insider"])
        rcs = [p.wait(timeout=300) for p in procs]
        return out, rcs, answer

    ref, rcs, _ = train("reference", False)
    check(rcs == [0, 0], "the reference trained (exit codes %s)" % rcs)
    got, rcs, answer = train("attacked", True)
    check(rcs == [0, 0], "0 jobs killed: the attacked job's workers exited 0 (%s)" % rcs)
    crashed = sum(p.poll() is not None for p in servers) + sum(rc < 0 for rc in rcs)
    check(crashed == 0, "0 crashes: both shard servers alive, no worker killed by a signal")
    same = (os.path.exists(ref) and os.path.exists(got) and
            open(ref, "rb").read() == open(got, "rb").read())
    check(same, "0 applied: the attacked job's final parameters are bitwise the reference's")
    attack_lib.check_transport_refusals(
        "".join(read(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("attacked.") or
                f.startswith("server")), "the servers and workers")
    refused = None
    if insecure:
        logs = "".join(open(os.path.join(d, "attacked.rank%d.log" % r), errors="replace").read()
                       for r in range(2))
        check("payload is not" in logs or "dropping" in logs,
              "the attack landed: the workers dropped the mis-sized PARAMS (their logs say so)")
    else:
        info = describe(TOOLS, reg, "attacked", tok["admin"]) or {}
        refused = info.get("refused_frames")
        check(info.get("refused_frames", 0) > 0,
              "the attack landed: the servers refused %s frames of the attacked job"
              % info.get("refused_frames"))
    record("insecure" if insecure else "tokens", answer, refused, same, crashed,
           sum(rc != 0 for rc in rcs))


def demo(d):
    log("== demo: tessel-demo's embedded cluster (its own credentials)")
    out = os.path.join(d, "demo.txt")
    # The demo compares its result with one process training the same
    # batches: "max relative difference vs single process: 0" is the bitwise check.
    p = spawn([ARGS.demo, "--steps=%d" % STEPS, "--workers=2", "--servers=2"], out)
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
        return
    info = wait_training(TOOLS, reg, "demo", admin, alive=lambda: p.poll() is None)
    answer, refused = None, None
    if check(info is not None, "demo is training"):
        answer = attack(TOOLS, reg, "demo", info, STEPS)
        refused = (describe(TOOLS, reg, "demo", admin) or {}).get("refused_frames")
    rc = p.wait(timeout=300)
    text = open(out).read()
    same = "max relative difference vs single process: 0 " in text and text.strip().endswith("OK")
    check(rc == 0 and same,
          "0 applied, 0 killed: the demo ended bitwise equal to one process (exit %d)" % rc)
    record("demo", answer, refused, same, int(rc < 0), int(rc != 0))


def main():
    global ARGS, TOOLS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("registry", "server", "train", "ctl", "attacker", "gen_tokens", "rpc_probe",
                 "demo"):
        ap.add_argument(name)
    ap.add_argument("--launch", help="tessel-launch (scenario launch)")
    ap.add_argument("--torch_worker", help="attack_torch_worker.py (scenario launch)")
    ap.add_argument("--deploy", help="deploy/base/kustomization.yaml (scenario overlay)")
    ap.add_argument("--probe", help="tessel-health-probe (scenario overlay)")
    ap.add_argument("--kubectl", default="kubectl", help="scenario overlay")
    ARGS = ap.parse_args()
    TOOLS = Tools(ARGS.ctl, ARGS.attacker, ARGS.rpc_probe)
    log("scenarios: %s, %d steps" % (",".join(SCENARIOS), STEPS))
    d = tempfile.mkdtemp(prefix="attack-", dir=os.environ.get("TEST_TMPDIR"))
    try:
        for name in SCENARIOS:
            t0 = time.time()
            if name in ("tokens", "insecure"):
                standalone(d, insecure=name == "insecure")
            elif name == "member":
                import attack_insider
                attack_insider.scenario(ARGS, TOOLS, d, MODEL, ARGS.gen_tokens)
            elif name == "demo":
                demo(d)
            elif name == "launch":
                import attack_launch
                attack_launch.scenario(ARGS, TOOLS, d)
            elif name == "overlay":
                import attack_overlay
                attack_overlay.scenario(ARGS, TOOLS, d)
            else:
                check(False, "unknown scenario %r (tokens, insecure, member, demo, launch, "
                      "overlay)" % name)
            log("   (%s: %.1f s)" % (name, time.time() - t0))
        attack_lib.print_table()
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
