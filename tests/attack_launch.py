"""attack_test's `launch` scenario: a job started with tessel-launch the
ordinary way (no flag about security: the launcher makes this launch's
tokens, its workers find theirs in TESSEL_TOKEN_FILE), 2 Python workers
(tessel.torch, tests/attack_torch_worker.py) on its embedded registry and
2 shard servers, trained twice: once in peace, once while the attacker, a
process with none of the launch's tokens, sprays hostile frames at every
member the registry lists to anyone and tries GetFrameKey and a
checkpoint delete with no credential.

The registry's address is the one thing the test takes from the launcher's
log (an outsider on the host finds it by trying loopback ports); the admin
token it names is the operator's, used only to ask how many frames the
servers refused. Checked: the attacked launch exits 0 with both workers
done (0 killed), no shard server stopped (0 crashes: the launcher exits 1
if one does), rank 0's final parameters bitwise equal to the peaceful
run's (0 applied), and the servers counted refused frames.
"""
import os
import re
import sys
import time

from attack_lib import attack, describe, record, wait_training
from proc_util import check, log, read, spawn

# Long enough for the attack to land while the workers train: the attack
# sprays every step, so its length grows with the run's; at 500 steps of
# this model it ends about a fifth into the run on the 2-core machine.
STEPS = int(os.environ.get("TESSEL_ATTACK_LAUNCH_STEPS", "500"))
PYTHON = "/usr/bin/python3"  # the interpreter that sees torch


def launch(args, d, name):
    """Starts one launch (job `attacked`) in d/name; returns (process, run dir, out)."""
    run_dir = os.path.join(d, name)
    os.makedirs(run_dir)
    out = os.path.join(run_dir, "final.npy")
    p = spawn([args.launch, "--nproc_per_node=2", "--servers=2", "--job=attacked",
               "--run_dir=" + run_dir, "--timeout_s=240", "--",
               PYTHON, os.path.abspath(args.torch_worker), str(STEPS), out],
              os.path.join(run_dir, "launch.log"))
    return p, run_dir, out


def operator_view(p, run_dir, timeout=60):
    """(registry, admin token file) from the launcher's own log line."""
    end = time.time() + timeout
    while time.time() < end and p.poll() is None:
        m = re.search(r"tesselctl --registry=(\S+) --token_file=(\S+?)\)",
                      read(os.path.join(run_dir, "launch.log")))
        if m:
            return m.group(1), m.group(2)
        time.sleep(0.1)
    return None, None


def scenario(args, tools, d):
    log("== launch: tessel-launch's embedded cluster, 2 tessel.torch workers (%d steps)" % STEPS)
    if not check(bool(args.launch and args.torch_worker),
                 "--launch and --torch_worker given for scenario launch"):
        return
    d = os.path.join(d, "launch")
    ref_p, ref_dir, ref = launch(args, d, "reference")
    # The insider: the reference launch's worker token (a worker credential
    # of another job, on another cluster), kept while that launch runs (its
    # launcher removes its credentials when it ends).
    other = os.path.join(d, "other-launch-worker.token")
    _, ref_admin = operator_view(ref_p, ref_dir)
    if ref_admin:
        with open(os.open(other, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(read(os.path.join(os.path.dirname(ref_admin), "worker.token")))
    check(read(other).strip() != "", "kept the reference launch's worker token (another job's)")
    rc = ref_p.wait(timeout=300)
    check(rc == 0 and os.path.exists(ref), "the reference launch trained (exit %d)%s" % (
        rc, "" if rc == 0 else ": " + read(os.path.join(ref_dir, "launch.log"))[-1500:]))
    p, run_dir, got = launch(args, d, "attacked")
    reg, admin = operator_view(p, run_dir)
    answer = refused = None
    if check(reg is not None, "the launcher's log names its registry (%s)" % reg):
        info = wait_training(tools, reg, "attacked", admin, timeout=90,
                             alive=lambda: p.poll() is None)
        if check(info is not None, "the launch's workers are training"):
            answer = attack(tools, reg, "attacked", info, STEPS, insider_token=other)
            now = describe(tools, reg, "attacked", admin) or {}
            refused = now.get("refused_frames")
            check(now.get("step", {}).get("min", STEPS) < STEPS or p.poll() is None,
                  "the attack landed while the job trained (step %s of %d)"
                  % (now.get("step", {}).get("min"), STEPS))
            check((refused or 0) > 0, "the attack landed: the servers refused %s frames of "
                  "the launch's job" % refused)
    rc = p.wait(timeout=300)
    text = read(os.path.join(run_dir, "launch.log"))
    killed = int(rc != 0 or "saved" not in text)
    check(killed == 0, "0 jobs killed: the attacked launch exited 0 and rank 0 saved (exit %d)%s"
          % (rc, "" if rc == 0 else ": " + text[-1500:]))
    # The launcher (its embedded registry in it) dies of a signal itself, says
    # so when a shard server it started stops while the workers run, and
    # exits 128+N when a worker dies of signal N.
    crashed = int(rc < 0) + int("a shard server stopped while workers ran" in text) + \
        int(rc > 128)
    check(crashed == 0, "0 crashes: no shard server stopped, no worker killed by a signal")
    dropped = [r for r in range(2) if "dropping" in read(os.path.join(run_dir, "worker%d.log" % r))]
    check(dropped == [0, 1], "the attack reached the workers: ranks %s logged dropped frames"
          % dropped)
    same = os.path.exists(ref) and os.path.exists(got) and read_bytes(ref) == read_bytes(got)
    check(same, "0 applied: the attacked launch's final parameters are bitwise the reference's")
    record("launch", answer, refused, same, crashed, killed)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


if __name__ == "__main__":
    sys.exit("run through attack_test.py")
