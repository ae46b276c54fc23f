"""attack_test's `overlay` scenario (//tests:attack_overlay_test): the dev
overlay's pods as //tests:manifests_test runs them (tests/pod_cluster.py:
each pod a local process in its own network namespace on one bridge, with
exactly the rendered command line, config and the token Secrets generated
by deploy/overlays/dev/make-credentials.sh), run twice: once in peace, once
while the attacker, a process in another network namespace on the same
bridge with none of the tokens, sprays hostile frames over UCX tcp at every
member the registry lists to anyone and tries GetFrameKey and a checkpoint
delete with no credential.

Checked: every worker of the Indexed Job exits 0 (0 killed), the registry
and both shard servers are still running when it is done (0 crashes),
every shard's state digest (parameters, optimizer state, step:
`tesselctl shards`, asked with the generated admin token from the node)
equals the peaceful run's (0 applied), and the servers counted refused
frames. The manifests' own checks (rendering, schemas, flags, probes) are
//tests:manifests_test's.
"""
import json
import os
import shutil
import subprocess
import time

import yaml

import manifest_checks
import netns
import proc_util
from attack_lib import attack, ctl, describe, record, wait_training
from manifest_checks import IMAGE_BIN, Binaries, Overlay, port_of
from pod_cluster import Cluster
from proc_util import check, log

READY_TIMEOUT_S = 90
JOB_TIMEOUT_S = 300
ROLES = ("admin", "worker", "server")


class InNamespace:
    """Runs the attacker's commands in `host`'s network namespace, with no
    credential in their environment (attack_lib.Local's interface)."""

    def __init__(self, host):
        self.host = host
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TESSEL_TOKEN", "TESSEL_TOKEN_FILE", "TESSEL_CONFIG")}

    def run(self, argv, timeout):
        return self.host.run(argv, timeout=timeout, env=self.env)

    def start(self, argv):
        return self.host.popen(argv, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)


def dev_overlay(args, d):
    """A copy of deploy/ with the dev overlay's generated tokens (its
    make-credentials.sh, as deploy/README.md says), the overlay rendered;
    returns (Overlay, {role: token file})."""
    deploy = os.path.join(d, "deploy")
    # Bazel's runfiles are symlinks, which kustomize's load restrictions refuse.
    shutil.copytree(os.path.dirname(os.path.dirname(os.path.abspath(args.deploy))), deploy,
                    symlinks=False)
    dev = os.path.join(deploy, "overlays", "dev")
    shutil.rmtree(os.path.join(dev, "credentials"), ignore_errors=True)
    r = subprocess.run(["bash", os.path.join(dev, "make-credentials.sh")], capture_output=True,
                       text=True, timeout=60)
    tokens = {role: os.path.join(dev, "credentials", "%s-token" % role) for role in ROLES}
    if not check(r.returncode == 0 and all(os.path.isfile(f) for f in tokens.values()),
                 "overlays/dev/make-credentials.sh made the tokens (%s)" % r.stderr.strip()):
        return None, tokens
    r = subprocess.run([args.kubectl, "kustomize", dev], capture_output=True, text=True,
                       timeout=120)
    if not check(r.returncode == 0, "kubectl kustomize overlays/dev renders%s" %
                 ("" if r.returncode == 0 else ": " + r.stderr.strip())):
        return None, tokens
    return Overlay("dev", [o for o in yaml.safe_load_all(r.stdout) if o]), tokens


def run_once(ov, bins, args, tools, tokens, d, attacked):
    """The overlay's pods until the Job is done; returns a dict of what was seen."""
    name = "attacked" if attacked else "reference"
    cl = Cluster(ov, bins, args.probe, os.path.join(d, name))
    seen = {"attack": None, "refused": None, "digests": None, "rcs": [], "crashed": 0, "dropped": 0}
    with netns.Bridge("attack-" + name) as bridge:
        cl.start(bridge)
        ready = cl.wait_ready(READY_TIMEOUT_S)
        cfg = cl.config()
        job, steps = cfg["worker"]["job"], cfg["worker"]["steps"]
        reg = "%s:%d" % (cl.of("Deployment")[0]["ip"], port_of(cfg["registry"]["listen"]))
        workers = cl.of("Job")
        if attacked and ready:
            where = InNamespace(bridge.add_host("attacker"))
            log("      the attacker: %s, no token" % where.host.ip)
            info = wait_training(tools, reg, job, tokens["admin"], timeout=60,
                                 alive=lambda: all(cl.rc(p) is None for p in workers))
            if check(info is not None, "job %s of the overlay is training" % job):
                seen["attack"] = attack(tools, reg, job, info, steps, ucx="--ucx_tls=tcp",
                                      where=where)
                now = describe(tools, reg, job, tokens["admin"]) or {}
                check(now.get("step", {}).get("min", steps) < steps,
                      "the attack landed while the job trained (step %s of %d)"
                      % (now.get("step", {}).get("min"), steps))
        end = cl.t0 + JOB_TIMEOUT_S
        for p in workers:
            try:
                cl.procs[p["name"]].wait(timeout=max(1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        seen["rcs"] = [cl.rc(p) for p in workers]
        seen["dropped"] = sum("dropping" in proc_util.read(p["log"]) for p in workers)
        log("      %s: job done %.1f s after the pods started (exit codes %s)"
            % (name, time.time() - cl.t0, seen["rcs"]))
        # The operator's view, from the node with the generated admin token.
        r = ctl(tools, reg, "shards", "--job", job, "-o", "json", token=tokens["admin"])
        try:
            seen["digests"] = [s["stats"]["state_digest"] for s in json.loads(r.stdout)]
        except (TypeError, ValueError, KeyError):
            log("      tesselctl shards: %s" % (r.stdout + r.stderr).strip()[-300:])
        seen["refused"] = (describe(tools, reg, job, tokens["admin"]) or {}).get("refused_frames")
        long_lived = cl.of("StatefulSet") + cl.of("Deployment")
        seen["crashed"] = sum(cl.rc(p) is not None for p in long_lived) + \
            sum(rc is not None and rc < 0 for rc in seen["rcs"])
        for p in long_lived:
            if cl.rc(p) is not None:
                log(cl.dump(p))
        cl.stop(long_lived)
    check(not bridge.leftovers(), "overlay %s: no namespace, veth or bridge left (%s)"
          % (name, bridge.leftovers() or "none"))
    return seen


def scenario(args, tools, d):
    log("== overlay: deploy/overlays/dev's pods, one network namespace each, attacked from "
        "another on the same bridge")
    if not check(bool(args.deploy and args.probe),
                 "--deploy and --probe given for scenario overlay"):
        return
    d = os.path.join(d, "overlay")
    os.makedirs(d)
    try:
        ov, tokens = dev_overlay(args, d)
        if ov is None:
            return
        bins = Binaries({IMAGE_BIN + "tessel-registry": args.registry,
                         IMAGE_BIN + "tessel-server": args.server,
                         IMAGE_BIN + "tessel-train": args.train})
        ref = run_once(ov, bins, args, tools, tokens, d, attacked=False)
        check(ref["rcs"] and all(rc == 0 for rc in ref["rcs"]) and ref["digests"],
              "the reference run trained (exit codes %s, %d shard digests)"
              % (ref["rcs"], len(ref["digests"] or [])))
        got = run_once(ov, bins, args, tools, tokens, d, attacked=True)
        killed = int(not got["rcs"] or any(rc != 0 for rc in got["rcs"]))
        check(killed == 0, "0 jobs killed: every worker of the attacked run exited 0 (%s)"
              % got["rcs"])
        check(got["crashed"] == 0, "0 crashes: the registry and both shard servers ran to the "
              "end, no worker killed by a signal")
        same = bool(ref["digests"]) and got["digests"] == ref["digests"]
        check(same, "0 applied: every shard's state digest is the reference's (%s, %s)"
              % (got["digests"], ref["digests"]))
        check((got["refused"] or 0) > 0, "the attack landed: the servers refused %s frames"
              % got["refused"])
        check(got["dropped"] == len(got["rcs"]), "the attack reached the workers: %d of %d "
              "logged dropped frames" % (got["dropped"], len(got["rcs"])))
        record("overlay", got["attack"], got["refused"], same, got["crashed"], killed)
    finally:
        # pod_cluster's checks count in manifest_checks' list.
        proc_util.failures.extend(manifest_checks.failures)
        del manifest_checks.failures[:]
