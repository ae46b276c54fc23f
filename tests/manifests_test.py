#!/usr/bin/env python3
"""The manifests are the cluster: deploy/ rendered, validated and run.

0. Makes the dev overlay's tokens as deploy/README.md says
   (deploy/overlays/dev/make-credentials.sh, in a copy of deploy/, never in
   the source tree): three 0600 files of different tokens in a 0700 folder,
   kept as they are when it runs again.
1. Renders every overlay of deploy/ with `kubectl kustomize` (kustomize v5)
   and prints the number of objects of each kind in each.
2. Validates every rendered object against Kubernetes' OpenAPI schemas,
   offline and strictly (deploy/validate/k8s_validate.js: kubernetes-models,
   installed by scripts/install_deps.sh; unknown fields are errors).
3. Checks every container's flags against its binary's own
   (`BINARY --helpfull`; etcd's against Debian's etcd), every key of the job
   config (the ConfigMap's tessel.json) against the binary of its section,
   the binaries' own reading of it (`BINARY --config=FILE --helpfull`), and
   that the manifests agree with the config: Service ports, containerPorts,
   probes and NetworkPolicy ports with its ports, the Indexed Job with
   worker.world, the StatefulSet with worker.servers, every file path in it
   with a mounted volume (checkpoints on a shared ReadWriteMany claim when
   several servers write them), per-pod flags only (--shard_from_hostname,
   --advertise_address=$(POD_IP), no --shard, no --rank), restricted
   security contexts, resources, labels, GPU workers on the GPU image.
4. Runs the dev overlay as it is: each pod of its Deployment, StatefulSet and
   Indexed Job is a local process in its own network namespace
   (tests/netns.py: its own IP on a bridge) and mount namespace
   (tests/pod_exec.py), started with exactly the rendered command line, the
   $(VAR)s expanded by the kubelet's rules from the env the manifests give
   (downward API: status.podIP = the namespace's IP, metadata.name, the
   completion index annotation), HOSTNAME and the host name = the pod's
   name, the pod's volumes bound at their mount paths (the rendered
   ConfigMap's tessel.json at /etc/tessel/tessel.json), the image's binaries
   (Bazel's) bound at /usr/local/bin, as uid 65532 on a read-only root, and
   the Services' names in the pod's /etc/hosts, its Secret volumes from the
   Secrets the overlay generated (root-owned, group fsGroup, defaultMode).
   Nothing is rewritten. Readiness and liveness are asked as the kubelet asks
   (tessel-health-probe from the root namespace, the node, to the pod IP and
   probe port); the registry and the servers must say they authenticate
   their callers with tokens (`callers: tokens`, every frame's header authenticated,
   never INSECURE); the registry must list every server at its pod IP with
   its pod ordinal as shard (asked with the generated admin token); an
   anonymous `tesselctl checkpoint delete` and the worker token's are
   refused (exit 5) while the admin token is let through, and each server
   refuses an anonymous GetFrameKey (tests/rpc_probe); every worker must
   exit 0, and the one of completion index 0 must
   be rank 0, print the last step and a falling loss; then the servers and
   the registry must stop on SIGTERM within terminationGracePeriodSeconds.
5. Runs the prod overlay the same way with the Secrets deploy/README.md
   tells an operator to create, made as it says (scripts/gen_certs.sh with
   its subjectAltNames, random tokens): 3 etcd members (Debian's etcd bound
   at the image path) forming a cluster over peer TLS, 2 registries on it
   over client TLS, 4 servers and 4 workers over mutual TLS with the admin,
   server and worker tokens, checkpoints on one shared claim. Checks that
   every pod gets ready, the shard map, that a checkpoint completes on the
   shared claim, that the worker token may not delete it while the admin
   token lists it; then deletes the Job (SIGTERM: every worker asks for a
   checkpoint at the next step, runs it and exits 143 within its grace
   period, and that checkpoint completes) and the rest.

Steps 1-3 live in tests/manifest_checks.py, step 4's pod emulation in
tests/pod_cluster.py.

Every process, namespace, veth, bridge and temporary directory is removed at
the end, also on failure (netns.Bridge.close runs at exit and on SIGTERM).
Not emulated: scheduling, resource limits, seccomp, NetworkPolicies, load
balancing (a ClusterIP name is its first backend), restarts. Needs root,
kubectl (kustomize v5), node with kubernetes-models, iproute2, python3-yaml,
etcd (Debian's etcd-server).

Usage: manifests_test.py --deploy=deploy/base/kustomization.yaml
    --validator=deploy/validate/k8s_validate.js --registry=BIN --server=BIN
    --train=BIN --probe=BIN --ctl=BIN --gen_certs=scripts/gen_certs.sh
    --rpc_probe=tests/rpc_probe
    [--kubectl=kubectl] [--etcd=/usr/bin/etcd] [--npm_dir=DIR]
    [--steps=render,validate,flags,run,prod]
"""
import argparse
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns  # noqa: E402  (tests/netns.py, beside this file)
from manifest_checks import (IMAGE_BIN, Binaries, check, check_consistency,  # noqa: E402
                             check_flags, check_pods, failures, log, port_of, render_all,
                             validate_all)
from pod_cluster import NAMESPACE, Cluster, losses  # noqa: E402

READY_TIMEOUT_S = 90
JOB_TIMEOUT_S = 300
PROD_READY_TIMEOUT_S = 120
PROD_CHECKPOINT_TIMEOUT_S = 180
# The dev overlay's generated tokens (deploy/overlays/dev/credentials/ROLE-token).
DEV_ROLES = ("admin", "worker", "server")



def dev_credentials(deploy):
    """Step 0: deploy/overlays/dev/make-credentials.sh, run as deploy/README.md
    says but in the copy `deploy`, twice; returns {role: token file}."""
    dev = os.path.join(deploy, "overlays", "dev")
    d = os.path.join(dev, "credentials")
    # deploy/BUILD leaves a developer's own tokens out of the runfiles; the
    # test makes fresh ones whatever the copy holds.
    shutil.rmtree(d, ignore_errors=True)
    files = {r: os.path.join(d, "%s-token" % r) for r in DEV_ROLES}
    W = "overlays/dev/make-credentials.sh: "

    def run():
        # From another directory, with a permissive umask: the script sets its own.
        return subprocess.run(["bash", os.path.join(dev, "make-credentials.sh")], cwd="/",
                              capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: os.umask(0o022))

    def state():
        out = {}
        for role, f in files.items():
            with open(f) as fh:
                out[role] = (fh.read(), stat.S_IMODE(os.stat(f).st_mode))
        return out

    r = run()
    if not check(r.returncode == 0 and all(os.path.isfile(f) for f in files.values()),
                 W + "writes %s (%s)" % (", ".join(sorted(os.path.basename(f)
                                                          for f in files.values())),
                                         (r.stdout + r.stderr).strip().replace("\n", "; "))):
        return files
    first = state()
    tokens = {t.strip() for t, _ in first.values()}
    check(stat.S_IMODE(os.stat(d).st_mode) == 0o700 and
          all(m == 0o600 for _, m in first.values()),
          W + "the folder 0700, every token file 0600 (%s)" %
          ", ".join("%s %o" % (k, m) for k, (_, m) in sorted(first.items())))
    check(len(tokens) == len(DEV_ROLES) and
          all(re.fullmatch(r"[A-Za-z0-9+/]{43}=", t) for t in tokens),
          W + "%d different tokens, each 32 random bytes in base64" % len(DEV_ROLES))
    r = run()
    check(r.returncode == 0 and state() == first,
          W + "run again, it keeps every token as it was (rc %d: %s)" %
          (r.returncode, (r.stdout + r.stderr).strip().replace("\n", "; ")))
    return files


def anonymous_env(tmp):
    """The environment of a tesselctl with no credential at all: no token
    variables, no CLI config file."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TESSEL_TOKEN", "TESSEL_TOKEN_FILE", "TESSEL_CONFIG")}
    env["HOME"] = env["XDG_CONFIG_HOME"] = tmp
    return env


def check_authenticated(cl, ctl, rpc_probe, registry, tokens, tmp):
    """The dev overlay's registry and servers say they authenticate their
    callers with tokens (never INSECURE); an anonymous checkpoint delete and
    the worker token's are refused, the admin token's is let through; each
    server refuses an anonymous GetFrameKey."""
    P = cl.P
    for p in cl.of("Deployment") + cl.of("StatefulSet", "tessel-server"):
        with open(p["log"], errors="replace") as f:
            text = f.read()
        line = [l for l in text.splitlines() if "callers: " in l][:1]
        ok = bool(line) and re.search(r"callers: tokens\b", line[0]) is not None and \
            "INSECURE" not in text and "callers: insecure" not in text
        if p["workload"]["kind"] == "StatefulSet":
            ok = ok and ("(every frame's header authenticated)" in line[0] or
                         "(every frame authenticated, payloads included)" in line[0])
        check(ok, P + "%s authenticates its callers with the generated tokens: %s%s" %
              (p["name"], line or "no start-up line", "" if ok else cl.dump(p)))
    cfg = cl.config()
    job = cfg["worker"]["job"]
    delete = ["checkpoint", "delete", "--job", job, "--step", "1"]
    for who, extra, says in (("an anonymous caller", [], "requires an admin"),
                             ("the worker token", ["--token_file", tokens["worker"]],
                              "may not delete checkpoints")):
        r = subprocess.run([ctl, "--registry", registry] + extra + delete, capture_output=True,
                           text=True, timeout=60, env=anonymous_env(tmp))
        out = (r.stderr or r.stdout).strip()
        check(r.returncode == 5 and says in out,
              P + "%s may not delete a checkpoint (exit %d: %s)" %
              (who, r.returncode, out.splitlines()[-1:]))
    # Each server straight, not through the registry: the data path's frame
    # key never goes to an anonymous caller. (The workers' training with
    # every frame's header authenticated shows that their token gets it.)
    for p in cl.of("StatefulSet", "tessel-server"):
        address = "%s:%d" % (p["ip"], port_of(cfg["server"]["listen"]))
        r = subprocess.run([rpc_probe, "--address=" + address, "--rpc=GetFrameKey",
                            "--job=" + job], capture_output=True, text=True, timeout=60,
                           env=anonymous_env(tmp))
        check(r.returncode == 5, P + "%s refuses an anonymous GetFrameKey of job %s (exit %d: %s)"
              % (p["name"], job, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:]))
    r = subprocess.run([ctl, "--registry", registry, "--token_file", tokens["admin"]] + delete,
                       capture_output=True, text=True, timeout=60, env=anonymous_env(tmp))
    out = (r.stderr or r.stdout).strip()
    check(r.returncode != 5 and "credential" not in out,
          P + "the admin token's checkpoint delete passes the credential check (exit %d: %s)" %
          (r.returncode, out.splitlines()[-1:]))


def run_dev(ov, bins, probe_bin, ctl, rpc_probe, tokens, tmp):
    """Step 4: the dev overlay's pods, until the Indexed Job completes.
    `tokens` {role: file}: the generated tokens the overlay's Secrets hold."""
    cl = Cluster(ov, bins, probe_bin, tmp)
    P = cl.P
    with netns.Bridge("manifests-dev") as bridge:
        cl.start(bridge)
        cl.wait_ready(READY_TIMEOUT_S)
        cfg = cl.config()
        reg = cl.of("Deployment")[0]
        registry = "%s:%d" % (reg["ip"], port_of(cfg["registry"]["listen"]))
        cl.check_shards(ctl, registry, ["--token_file", tokens["admin"]])
        check_authenticated(cl, ctl, rpc_probe, registry, tokens, tmp)
        # The Job: every worker exits 0; index 0 is rank 0 and reports.
        workers = cl.of("Job")
        end = cl.t0 + JOB_TIMEOUT_S
        for p in workers:
            try:
                cl.procs[p["name"]].wait(timeout=max(1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        took = time.time() - cl.t0
        for p in workers:
            rc = cl.rc(p)
            check(rc == 0, P + "worker %s (completion index %d) exits 0 (%s)%s" %
                  (p["name"], p["index"], "rc %s" % rc if rc is not None else
                   "still running after %d s" % JOB_TIMEOUT_S, "" if rc == 0 else cl.dump(p)))
        w0 = [p for p in workers if p["index"] == 0][0]
        with open(w0["log"], errors="replace") as f:
            text = f.read()
        steps = losses(text)
        total = cfg["worker"]["steps"]
        check(bool(steps) and steps[-1][0] == steps[-1][1] == total,
              P + "index 0 is rank 0 and trains to the last step: %s" %
              ([l for l in text.splitlines() if l.startswith("step")][-1:] or "no step line"))
        check(len(steps) >= 2 and steps[-1][2] < steps[0][2],
              P + "the loss falls: %s" % " -> ".join("%.4f" % s[2] for s in steps))
        check("worker 0: test accuracy" in text, P + "rank 0 reports: %s" % (
            [l for l in text.splitlines() if "accuracy" in l][-1:] or "nothing"))
        log("      job done %.1f s after the pods started" % took)
        cl.stop(cl.of("StatefulSet") + cl.of("Deployment"))
    check(not bridge.leftovers(), P + "no namespace, veth or bridge left (%s)" %
          (bridge.leftovers() or "none"))


def prod_secrets(gen_certs, tmp):
    """The Secrets deploy/README.md tells an operator to create, made the
    same way (scripts/gen_certs.sh with its TESSEL_CERT_SANS, random
    tokens); returns ({name: {key: bytes}}, certificate directory)."""
    d = os.path.join(tmp, "certs")
    ns = NAMESPACE
    sans = ("DNS:tessel,DNS:tessel-etcd-client,DNS:tessel-etcd-client.{ns}.svc,"
            "DNS:*.tessel-etcd.{ns}.svc,DNS:*.tessel-etcd.{ns}.svc.cluster.local").format(ns=ns)
    subprocess.run(["bash", gen_certs, d], env=dict(os.environ, TESSEL_CERT_SANS=sans),
                   check=True, capture_output=True, timeout=120)

    def read(name):
        with open(os.path.join(d, name), "rb") as f:
            return f.read()

    secrets = {
        "tessel-tls": {"ca.crt": read("ca.crt"), "tls.crt": read("server.crt"),
                       "tls.key": read("server.key")},
        "tessel-etcd-tls": {k: read(k) for k in ("ca.crt", "server.crt", "server.key",
                                                 "client.crt", "client.key")},
    }
    for t in ("admin", "worker", "server", "metrics"):
        secrets["tessel-%s-token" % t] = {
            "token": ("%s-%s\n" % (t, os.urandom(18).hex())).encode()}
    return secrets, d


def run_prod(ov, bins, probe_bin, ctl, gen_certs, tmp):
    """Step 5: the prod overlay's pods (3 etcd members, 2 registries over
    etcd, 4 servers, 4 GPU workers on the CPU path) with the Secrets of
    deploy/README.md, until the job's first checkpoint is complete on the
    shared claim; then the tokens' limits, and SIGTERM."""
    secrets, certs = prod_secrets(gen_certs, tmp)
    cl = Cluster(ov, bins, probe_bin, tmp, secrets)
    P = cl.P
    tokens = {}
    for t in ("admin", "worker"):
        tokens[t] = os.path.join(tmp, "%s.token" % t)
        # Owner-only: a token file others may read is refused.
        with open(os.open(tokens[t], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(secrets["tessel-%s-token" % t]["token"])
    tls = ["--tls_ca", os.path.join(certs, "ca.crt"), "--tls_cert",
           os.path.join(certs, "client.crt"), "--tls_key", os.path.join(certs, "client.key"),
           "--tls_server_name", "tessel"]
    with netns.Bridge("manifests-prod") as bridge:
        cl.start(bridge)
        cl.wait_ready(PROD_READY_TIMEOUT_S)
        cfg = cl.config()
        regs = cl.of("Deployment")
        registry = "%s:%d" % (regs[0]["ip"], port_of(cfg["registry"]["listen"]))
        cl.check_shards(ctl, registry, tls + ["--token_file", tokens["admin"]])
        # Training: the first checkpoint completes on the shared claim.
        job, every = cfg["worker"]["job"], cfg["worker"].get("checkpoint_every_steps", 0)
        workers = cl.of("Job")
        claim = [m["src"] for m in json.load(open(os.path.join(
            cl.of("StatefulSet", "tessel-server")[0]["dir"], "spec.json")))["mounts"]
                 if m["dst"] == cfg["server"]["checkpoint_dir"]]
        manifest = None
        end = time.time() + PROD_CHECKPOINT_TIMEOUT_S
        while claim and every and time.time() < end and all(cl.rc(p) is None for p in workers):
            found = sorted(glob.glob(os.path.join(claim[0], job, "step-*", "MANIFEST.json")))
            if found:
                manifest = found[0]
                break
            time.sleep(0.5)
        check(manifest is not None, P + "a checkpoint of job %s completes on the shared claim "
              "(%s)%s" % (job, os.path.relpath(manifest, claim[0]) if manifest else "none",
                          "" if manifest else "".join(cl.dump(p) for p in workers[:1] +
                                                      cl.of("StatefulSet")[:1])))
        for p in workers:
            check(cl.rc(p) is None, P + "worker %s (index %d) training%s" % (
                p["name"], p["index"], "" if cl.rc(p) is None else
                ": exited rc %s%s" % (cl.rc(p), cl.dump(p))))
        # Rank 0 prints its progress line after the step's checkpoint boundary
        # (where a job with elastic_max_workers also looks for newcomers).
        end = time.time() + 30
        while True:
            with open(cl.of("Job")[0]["log"], errors="replace") as f:
                text = f.read()
            steps = losses(text)
            if steps or time.time() > end or cl.rc(cl.of("Job")[0]) is not None:
                break
            time.sleep(0.2)
        check(bool(steps), P + "rank 0 reports progress: %s" % (
            "%d steps, loss %.4f" % (steps[-1][0], steps[-1][2]) if steps else "nothing"))
        if manifest:
            step = str(int(os.path.basename(os.path.dirname(manifest))[len("step-"):]))
            # The worker token may not delete a checkpoint; the admin token may list them.
            r = subprocess.run([ctl, "--registry", registry] + tls +
                               ["--token_file", tokens["worker"], "checkpoint", "delete",
                                "--job", job, "--step", step],
                               capture_output=True, text=True, timeout=60)
            check(r.returncode == 5 and os.path.exists(manifest),
                  P + "the worker token cannot delete checkpoint %s (exit %d: %s)" %
                  (step, r.returncode, (r.stderr or r.stdout).strip().splitlines()[-1:]))
            r = subprocess.run([ctl, "--registry", registry] + tls +
                               ["--token_file", tokens["admin"], "checkpoint", "list",
                                "--job", job], capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, P + "the admin token lists the checkpoints (exit %d%s)" %
                  (r.returncode, "" if r.returncode == 0 else ": " + r.stderr.strip()))
        # Deleting the Job: every worker gets SIGTERM, asks for a checkpoint at
        # the next step, runs it, leaves and exits 143 within its grace period;
        # that checkpoint completes (a replacement would lose nothing).
        cl.stop(workers)
        asked = []
        for p in workers:
            with open(p["log"], errors="replace") as f:
                asked += [int(n) for n in re.findall(r"asked for a checkpoint at step (\d+)",
                                                     f.read())]
            check(cl.rc(p) == 143, P + "worker %s left on SIGTERM with exit 143 (%s)" %
                  (p["name"], cl.rc(p)))
        # Each worker asks for the step after the one it finished when its
        # SIGTERM came; the first to leave ends the job at its step, so the
        # smallest step asked for is the one every worker reaches (a later
        # one cannot complete without the worker that left).
        final = os.path.join(claim[0], job, "step-%010d" % min(asked), "MANIFEST.json") \
            if asked and claim else None
        end = time.time() + 15
        while final and not os.path.exists(final) and time.time() < end:
            time.sleep(0.2)
        check(final is not None and os.path.exists(final),
              P + "the checkpoint asked for on SIGTERM completes (%s)" %
              (os.path.relpath(final, claim[0]) if final else "none asked for"))
        # Then the rest of the deployment.
        cl.stop(cl.of("StatefulSet", "tessel-server") + regs + cl.of("StatefulSet", "tessel-etcd"))
    check(not bridge.leftovers(), P + "no namespace, veth or bridge left (%s)" %
          (bridge.leftovers() or "none"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deploy", required=True, help="deploy/base/kustomization.yaml")
    ap.add_argument("--validator", required=True, help="deploy/validate/k8s_validate.js")
    ap.add_argument("--registry", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--probe", required=True, help="tessel-health-probe")
    ap.add_argument("--ctl", required=True, help="tesselctl")
    ap.add_argument("--gen_certs", required=True, help="scripts/gen_certs.sh")
    ap.add_argument("--rpc_probe", required=True, help="tests/rpc_probe (GetFrameKey)")
    ap.add_argument("--etcd", default=shutil.which("etcd") or "/usr/bin/etcd",
                    help="an etcd binary whose flags the etcd manifests' are checked against")
    ap.add_argument("--kubectl", default=shutil.which("kubectl") or "kubectl")
    ap.add_argument("--npm_dir", default=os.environ.get("TESSEL_NPM_DIR",
                                                        "/var/cache/tessel-npm"))
    ap.add_argument("--steps", default="render,validate,flags,run,prod")
    a = ap.parse_args()
    steps = set(a.steps.split(","))
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="manifests-", dir=os.environ.get("TEST_TMPDIR"))
    try:
        # A self-contained copy of deploy/ (Bazel's runfiles are symlinks,
        # which kustomize's load restrictions refuse).
        deploy = os.path.join(tmp, "deploy")
        src = os.path.dirname(os.path.dirname(os.path.abspath(a.deploy)))
        shutil.copytree(src, deploy, symlinks=False)
        bins = Binaries({IMAGE_BIN + "tessel-registry": a.registry,
                         IMAGE_BIN + "tessel-server": a.server,
                         IMAGE_BIN + "tessel-train": a.train})
        if os.path.exists(a.etcd):
            bins.paths[IMAGE_BIN + "etcd"] = a.etcd
        log("== 0. the dev overlay's tokens (overlays/dev/make-credentials.sh, in the copy)")
        dev_tokens = dev_credentials(deploy)
        log("== 1. render (%s)" % a.kubectl)
        overlays = render_all(a.kubectl, deploy)
        if "validate" in steps:
            log("== 2. validate against Kubernetes' OpenAPI schemas (kubernetes-models in %s)" %
                a.npm_dir)
            validate_all(overlays, a.validator, a.npm_dir, tmp)
        if "flags" in steps:
            log("== 3. flags and config against the binaries; manifests against the config")
            for ov in overlays:
                check_flags(ov, bins, tmp)
                check_consistency(ov, bins)
                check_pods(ov)
        if "run" in steps:
            dev = [ov for ov in overlays if ov.name == "dev"]
            log("== 4. run overlays/dev: one network namespace per pod")
            if check(bool(dev), "overlays/dev rendered"):
                run_dev(dev[0], bins, a.probe, a.ctl, a.rpc_probe, dev_tokens, tmp)
        if "prod" in steps:
            prod = [ov for ov in overlays if ov.name == "prod"]
            log("== 5. run overlays/prod with the Secrets of deploy/README.md, to its first "
                "checkpoint")
            if check(bool(prod), "overlays/prod rendered") and check(
                    IMAGE_BIN + "etcd" in bins.paths,
                    "an etcd binary to run the etcd pods (%s; Debian's etcd-server)" % a.etcd):
                run_prod(prod[0], bins, a.probe, a.ctl, a.gen_certs, tmp)
    finally:
        keep = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if failures and keep:
            for f in glob.glob(os.path.join(tmp, "run-*", "pods", "*", "*")):
                if os.path.basename(f) in ("log", "spec.json"):
                    parts = f.split(os.sep)
                    shutil.copy(f, os.path.join(keep, "%s.%s.%s" % (
                        parts[-4], parts[-2], parts[-1])))
        shutil.rmtree(tmp, ignore_errors=True)
    log("%s: %d check(s) failed in %.1f s" % ("FAIL" if failures else "PASS", len(failures),
                                             time.time() - t0))
    for f in failures:
        log("  - " + f.split("\n")[0])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
