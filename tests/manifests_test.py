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
   their callers with tokens (`callers: tokens`, every frame authenticated,
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
import base64
import collections
import glob
import json
import os
import posixpath
import random
import re
import shutil
import signal
import stat
import string
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns  # noqa: E402  (tests/netns.py, beside this file)

POD_EXEC = os.path.join(HERE, "pod_exec.py")
NAMESPACE = "default"
# Where the image (deploy/image) puts the binaries the manifests run.
IMAGE_BIN = "/usr/local/bin/"
SECTIONS = {"tessel-registry": "registry", "tessel-server": "server", "tessel-train": "worker"}
CONFIG_KEYS = {"common", "registry", "server", "worker", "comment", "launch"}
COMPONENT_OF = {"tessel-registry": "registry", "tessel-server": "server",
                "tessel-train": "worker"}
TESSEL_LABEL = ("app.kubernetes.io/part-of", "tessel")
APP_LABELS = ["app.kubernetes.io/name", "app.kubernetes.io/component",
              "app.kubernetes.io/part-of", "app.kubernetes.io/instance"]
UID = 65532
READY_TIMEOUT_S = 90
JOB_TIMEOUT_S = 300
PROD_READY_TIMEOUT_S = 120
PROD_CHECKPOINT_TIMEOUT_S = 180
# The dev overlay's generated tokens (deploy/overlays/dev/credentials/ROLE-token).
DEV_ROLES = ("admin", "worker", "server")

failures = []


def log(*a):
    print(*a, flush=True)


def check(cond, what):
    log(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)\n"


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def port_range(text):
    lo, hi = text.split("-")
    return int(lo), int(hi)


# ---------------------------------------------------------------- rendering

class Overlay:
    """One rendered overlay: its objects, and helpers to find things in them."""

    def __init__(self, name, objects):
        self.name = name
        self.objects = objects

    def of_kind(self, *kinds):
        return [o for o in self.objects if o["kind"] in kinds]

    def get(self, kind, name):
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        return None

    def workloads(self):
        return self.of_kind("Deployment", "StatefulSet", "Job")


def render_all(kubectl, deploy):
    """Renders every overlay; returns [Overlay]."""
    out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True,
                         text=True)
    kv = json.loads(out.stdout or "{}").get("kustomizeVersion", "") if out.returncode == 0 else ""
    if not check(re.match(r"^v([5-9]|\d\d)\.", kv) is not None,
                 "kubectl with kustomize v5 or later (%s: %s)" %
                 (kubectl, kv or out.stderr.strip() or "not found")):
        return []
    overlays = []
    root = os.path.join(deploy, "overlays")
    for name in sorted(os.listdir(root)):
        p = subprocess.run([kubectl, "kustomize", os.path.join(root, name)], capture_output=True,
                           text=True, timeout=120)
        if not check(p.returncode == 0, "kubectl kustomize overlays/%s renders%s" %
                     (name, "" if p.returncode == 0 else ": " + p.stderr.strip())):
            continue
        objects = [o for o in yaml.safe_load_all(p.stdout) if o]
        overlays.append(Overlay(name, objects))
        counts = collections.Counter(o["kind"] for o in objects)
        log("      overlays/%s: %d objects: %s" % (name, len(objects), ", ".join(
            "%s %d" % (k, counts[k]) for k in sorted(counts))))
    check(any(o.name == "dev" for o in overlays) and any(o.name == "prod" for o in overlays),
          "overlays dev and prod both render")
    return overlays


def validate_all(overlays, validator, npm_dir, tmp):
    for ov in overlays:
        path = os.path.join(tmp, "rendered-%s.json" % ov.name)
        with open(path, "w") as f:
            json.dump(ov.objects, f)
        p = subprocess.run(["node", validator, "--models", npm_dir, path], capture_output=True,
                           text=True, timeout=120)
        bad = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
        summary = (p.stdout.strip().splitlines() or [p.stderr.strip()])[-1]
        check(p.returncode == 0 and not bad,
              "overlays/%s: every object valid against the OpenAPI schemas (%s)%s" %
              (ov.name, summary, "".join("\n        " + l for l in bad) +
               ("\n        " + p.stderr.strip() if p.returncode and p.stderr.strip() else "")))


# ------------------------------------------------------------------- flags

class Binaries:
    """The flags of each binary an image path names, from its own help."""

    def __init__(self, paths):
        self.paths = paths  # image path -> local binary
        self._flags = {}

    def local(self, image_path):
        return self.paths.get(image_path)

    def flags(self, image_path):
        if image_path not in self._flags:
            binary = self.paths[image_path]
            if posixpath.basename(image_path) == "etcd":
                out = subprocess.run([binary, "--help"], capture_output=True, text=True,
                                     timeout=30)
                text = out.stdout + out.stderr
                names = set(re.findall(r"(?m)^\s+--([a-z0-9-]+)", text))
            else:
                out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True,
                                     timeout=30)
                names = set(re.findall(r"(?m)^    --([A-Za-z0-9_]+) \(", out.stdout + out.stderr))
            if not names:
                raise RuntimeError("no flags found in the help of %s" % binary)
            self._flags[image_path] = names
        return self._flags[image_path]


def flag_name(arg):
    return arg[2:].split("=", 1)[0]


def known_flag(name, flags):
    return name in flags or (name.startswith("no") and name[2:] in flags)


def containers_of(obj):
    return obj["spec"]["template"]["spec"]["containers"]


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def argv_of(c):
    return list(c.get("command", [])) + list(c.get("args", []))


def config_of(ov, workload, c):
    """(path in the container, parsed config, ConfigMap name) of --config."""
    for a in argv_of(c):
        if a.startswith("--config="):
            path = a.split("=", 1)[1]
            for m in c.get("volumeMounts", []):
                if posixpath.dirname(path) != m["mountPath"].rstrip("/"):
                    continue
                vol = [v for v in pod_spec(workload).get("volumes", []) if v["name"] == m["name"]]
                if vol and "configMap" in vol[0]:
                    cm = ov.get("ConfigMap", vol[0]["configMap"]["name"])
                    key = posixpath.basename(path)
                    items = vol[0]["configMap"].get("items")
                    if items:
                        key = next((i["key"] for i in items if i["path"] == key), None)
                    if cm and key in cm.get("data", {}):
                        return path, json.loads(cm["data"][key]), cm["metadata"]["name"]
            return path, None, None
    return None, None, None


def check_flags(ov, bins, tmp):
    """Step 3 for one overlay: flags and config keys against the binaries."""
    seen_configs = {}
    for w in ov.workloads():
        for c in containers_of(w):
            where = "overlays/%s %s/%s %s" % (ov.name, w["kind"], w["metadata"]["name"], c["name"])
            argv = argv_of(c)
            image_path = argv[0] if argv else ""
            if not check(bins.local(image_path) is not None,
                         "%s: runs %s, a binary of the image" % (where, image_path or "nothing")):
                continue
            flags = bins.flags(image_path)
            unknown = [a for a in argv[1:] if not (a.startswith("--") and
                                                   known_flag(flag_name(a), flags))]
            check(not unknown, "%s: every flag is one of %s's own%s" %
                  (where, posixpath.basename(image_path),
                   ": no " + ", ".join(unknown) if unknown else ""))
            env_names = {e["name"] for e in c.get("env", [])}
            refs = [v for a in argv
                    for v in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a)]
            check(all(r in env_names for r in refs),
                  "%s: every $(VAR) of the command line is in its env (%s)" %
                  (where, ", ".join(refs) or "none"))
            path, cfg, cm = config_of(ov, w, c)
            binary = posixpath.basename(image_path)
            if binary in SECTIONS:
                check(cfg is not None, "%s: --config=%s is the mounted ConfigMap's file" %
                      (where, path))
                if cfg is not None:
                    seen_configs.setdefault(cm, (cfg, set()))[1].add(image_path)
    for cm, (cfg, image_paths) in sorted(seen_configs.items()):
        where = "overlays/%s ConfigMap %s" % (ov.name, cm)
        check(set(cfg) <= CONFIG_KEYS, "%s: top-level keys are %s" %
              (where, ", ".join(sorted(CONFIG_KEYS))))
        by_section = {SECTIONS[posixpath.basename(p)]: p for p in image_paths}
        every = set()
        for section, p in sorted(by_section.items()):
            flags = bins.flags(p)
            every |= flags
            missing = sorted(k for k in cfg.get(section, {}) if k not in flags)
            check(not missing, "%s: every key of \"%s\" is a flag of %s%s" %
                  (where, section, posixpath.basename(p),
                   ": no --" + ", --".join(missing) if missing else ""))
        missing = sorted(k for k in cfg.get("common", {}) if k not in every)
        check(not missing, "%s: every key of \"common\" is a flag of one of its binaries%s" %
              (where, ": no --" + ", --".join(missing) if missing else ""))
        # The binaries' own reading of the file (a misspelt key is an error).
        path = os.path.join(tmp, "%s-%s.json" % (ov.name, cm))
        with open(path, "w") as f:
            json.dump(cfg, f)
        for section, p in sorted(by_section.items()):
            name = posixpath.basename(p)
            if "config" not in bins.flags(p):
                check(False, "%s: %s reads it (it has no --config flag)" % (where, name))
                continue
            r = subprocess.run([bins.local(p), "--config=" + path, "--helpfull"],
                               capture_output=True, text=True, timeout=30)
            err = [l for l in r.stderr.splitlines() if "config" in l.lower() or
                   "ERROR" in l][:3]
            check(r.returncode != 2 and not err, "%s: %s --config reads it%s" %
                  (where, name, ": " + " | ".join(err) if err or r.returncode == 2 else ""))


# ------------------------------------------------------------- consistency

def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def tessel_containers(ov):
    """[(workload, container, binary name)] of the Tessel binaries."""
    out = []
    for w in ov.workloads():
        for c in containers_of(w):
            argv = argv_of(c)
            if argv and argv[0].startswith(IMAGE_BIN):
                name = posixpath.basename(argv[0])
                if name in SECTIONS:
                    out.append((w, c, name))
    return out


def resolve_target(port, pod_workload):
    """A Service targetPort (number or name) as a number, via containerPorts."""
    if isinstance(port, int):
        return port
    for c in containers_of(pod_workload):
        for p in c.get("ports", []):
            if p.get("name") == port:
                return p["containerPort"]
    return None


# Config keys whose values are files or directories the binary opens.
PATH_KEY = re.compile(r"(_file|_dir|^(etcd_)?tls_(ca|cert|key))$")


def config_paths(cfg, section, flags):
    """{key: path} of the files and directories in the config this binary reads."""
    out = {}
    for sec in ("common", section):
        for k, v in cfg.get(sec, {}).items():
            if PATH_KEY.search(k) and v and (sec == section or k in flags):
                out[k] = v
    return out


def mount_for(w, c, path):
    """(volumeMount, volume) that holds `path` in container c, or (None, None)."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    if best is None:
        return None, None
    vol = next((v for v in pod_spec(w).get("volumes", []) if v["name"] == best["name"]), None)
    if vol is None and w["kind"] == "StatefulSet":
        for t in w["spec"].get("volumeClaimTemplates", []):
            if t["metadata"]["name"] == best["name"]:
                vol = {"name": best["name"], "claimTemplate": t}
    return best, vol


def check_consistency(ov, bins):
    tc = tessel_containers(ov)
    by_name = {name: (w, c) for w, c, name in tc}
    cfg = None
    for w, c, name in tc:
        _, cfg_c, _ = config_of(ov, w, c)
        cfg = cfg or cfg_c
    if not check(cfg is not None and set(by_name) == set(SECTIONS),
                 "overlays/%s: registry, server and worker all run from one config" % ov.name):
        return
    P = "overlays/%s: " % ov.name
    ports = {}
    for name, section in SECTIONS.items():
        sec = cfg.get(section, {})
        if "listen" in sec:
            ports[name] = (port_of(sec["listen"]), port_of(sec["health_listen"]))
    # Probes and containerPorts: the listen and health ports of the config.
    for name in ("tessel-registry", "tessel-server"):
        w, c = by_name[name]
        if not check(name in ports and "health_listen" in cfg[SECTIONS[name]],
                     P + "%s: config has listen and health_listen" % name):
            continue
        listen, health = ports[name]
        cports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        want_ports = {"grpc": listen, "health": health}
        metrics = cfg[SECTIONS[name]].get("metrics_address")
        if metrics:
            want_ports["metrics"] = port_of(metrics)
        check(cports == want_ports,
              P + "%s: containerPorts %s as in the config (%s)" % (name, want_ports, cports))
        rp, lp, sp = (c.get(k, {}) for k in ("readinessProbe", "livenessProbe", "startupProbe"))
        check(rp.get("grpc") == {"port": health, "service": ""},
              P + "%s: readinessProbe is gRPC on health port %d, service \"\"" % (name, health))
        check(lp.get("grpc") == {"port": health, "service": "liveness"},
              P + "%s: livenessProbe is gRPC on health port %d, service liveness" %
              (name, health))
        check(not sp or sp.get("grpc", {}).get("port") == health,
              P + "%s: startupProbe (if any) on the health port" % name)
    # Workers: a containerPort "metrics" when they serve metrics.
    _, wc0 = by_name["tessel-train"]
    wmetrics = cfg.get("worker", {}).get("metrics_address")
    wports = {p.get("name"): p["containerPort"] for p in wc0.get("ports", [])}
    check(wports == ({"metrics": port_of(wmetrics)} if wmetrics else {}),
          P + "tessel-train: containerPorts %s as in the config" % wports)
    # Prometheus Operator monitors, if any: each endpoint's port is a named
    # port of what it selects (Services' ports, workers' containerPorts).
    for sm in ov.of_kind("ServiceMonitor"):
        sel = sm["spec"]["selector"].get("matchLabels", {})
        svcs = [s for s in ov.of_kind("Service") if selects(sel, s["metadata"].get("labels", {}))]
        for e in sm["spec"]["endpoints"]:
            check(svcs and all(e["port"] in {p.get("name") for p in s["spec"]["ports"]}
                               for s in svcs),
                  P + "ServiceMonitor %s: port %s is a port of every Service it selects (%s)" %
                  (sm["metadata"]["name"], e["port"],
                   ", ".join(s["metadata"]["name"] for s in svcs)))
    for pm in ov.of_kind("PodMonitor"):
        sel = pm["spec"]["selector"].get("matchLabels", {})
        pods = [w for w in ov.workloads()
                if selects(sel, w["spec"]["template"]["metadata"].get("labels", {}))]
        for e in pm["spec"]["podMetricsEndpoints"]:
            check(pods and all(e["port"] in {p.get("name") for c in containers_of(w)
                                             for p in c.get("ports", [])} for w in pods),
                  P + "PodMonitor %s: port %s is a containerPort of the pods it selects" %
                  (pm["metadata"]["name"], e["port"]))
    # The registry address every binary is given: a Service of the registry.
    host, rport = cfg["common"]["registry"].rsplit(":", 1)
    svc = ov.get("Service", host.split(".")[0])
    reg_w, _ = by_name["tessel-registry"]
    reg_labels = reg_w["spec"]["template"]["metadata"]["labels"]
    if check(svc is not None and selects(svc["spec"].get("selector"), reg_labels),
             P + "common.registry %s names a Service of the registry pods" % host):
        sp = {p["port"]: resolve_target(p.get("targetPort", p["port"]), reg_w)
              for p in svc["spec"]["ports"]}
        check(sp.get(int(rport)) == ports["tessel-registry"][0],
              P + "Service %s port %s reaches the registry's listen port" % (host, rport))
    # Every Service port reaches a port its pods listen on, and (for the
    # emulation in step 4) port == targetPort.
    for s in ov.of_kind("Service"):
        backends = [w for w in ov.workloads()
                    if selects(s["spec"].get("selector"), w["spec"]["template"]["metadata"]
                               .get("labels", {}))]
        if not check(len(backends) == 1, P + "Service %s selects the pods of one workload" %
                     s["metadata"]["name"]):
            continue
        listening = {p["containerPort"] for c in containers_of(backends[0])
                     for p in c.get("ports", [])}
        for p in s["spec"]["ports"]:
            t = resolve_target(p.get("targetPort", p["port"]), backends[0])
            check(t == p["port"] and t in listening,
                  P + "Service %s port %s: targetPort %s is a containerPort" %
                  (s["metadata"]["name"], p["port"], t))
    # Servers: StatefulSet, shard from the pod name, advertise the pod IP.
    sw, sc = by_name["tessel-server"]
    argv = argv_of(sc)
    env = {e["name"]: e for e in sc.get("env", [])}
    check(sw["kind"] == "StatefulSet" and "--shard_from_hostname" in argv and
          not any(flag_name(a) == "shard" for a in argv if a.startswith("--")),
          P + "servers: a StatefulSet, shard from the pod ordinal (--shard_from_hostname, no "
          "--shard)")
    check("--advertise_address=$(POD_IP)" in argv and
          env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") ==
          "status.podIP", P + "servers: --advertise_address=$(POD_IP), POD_IP from status.podIP")
    hs = ov.get("Service", sw["spec"].get("serviceName", ""))
    check(hs is not None and hs["spec"].get("clusterIP") == "None",
          P + "servers: serviceName %s is a headless Service" % sw["spec"].get("serviceName"))
    replicas = sw["spec"].get("replicas", 1)
    # Workers: an Indexed Job of world pods on as many servers as there are.
    ww, wc = by_name["tessel-train"]
    wcfg = cfg.get("worker", {})
    spec = ww["spec"]
    check(ww["kind"] == "Job" and spec.get("completionMode") == "Indexed" and
          spec.get("parallelism") == spec.get("completions") == wcfg.get("world"),
          P + "workers: an Indexed Job, parallelism = completions = worker.world = %s" %
          wcfg.get("world"))
    check(not any(flag_name(a) == "rank" for a in argv_of(wc) if a.startswith("--")),
          P + "workers: no --rank (the completion index is the rank)")
    check(wcfg.get("servers") == replicas,
          P + "worker.servers = %s = the server StatefulSet's replicas %d" %
          (wcfg.get("servers"), replicas))
    # File paths of the config: in a volume of the container that reads them.
    pvcs = {o["metadata"]["name"]: o for o in ov.of_kind("PersistentVolumeClaim")}
    for w, c, name in tc:
        section = SECTIONS[name]
        for key, path in sorted(config_paths(cfg, section, bins.flags(IMAGE_BIN + name)).items()):
            m, vol = mount_for(w, c, path)
            ok = m is not None and vol is not None
            sub = posixpath.relpath(path, m["mountPath"]) if ok else ""
            for kind in ("secret", "configMap"):
                if ok and kind in vol and vol[kind].get("items"):
                    ok = sub in {i["path"] for i in vol[kind]["items"]}
            check(ok, P + "%s: %s=%s lies in a mounted volume%s" %
                  (name, key, path, " (%s)" % m["name"] if m else ""))
            if key == "checkpoint_dir" and ok:
                shared = "persistentVolumeClaim" in vol and "ReadWriteMany" in pvcs.get(
                    vol["persistentVolumeClaim"]["claimName"], {}).get("spec", {}).get(
                        "accessModes", [])
                check(not m.get("readOnly") and (replicas == 1 or shared),
                      P + "%s: checkpoint_dir is writable%s" %
                      (name, " and on a ReadWriteMany claim every server shares"
                       if replicas > 1 else ""))
    # Least privilege: a worker holds the worker token the servers accept,
    # and no Secret holding the admin or server tokens.
    def secret_of(w, c, path):
        m, vol = mount_for(w, c, path)
        return (vol or {}).get("secret", {}).get("secretName")

    control, accepted = set(), set()
    for w, c, name in tc:
        sec = cfg.get(SECTIONS[name], {})
        if name == "tessel-train":
            continue
        for key in ("admin_token_file", "server_token_file", "token_file"):
            if sec.get(key):
                control.add(secret_of(w, c, sec[key]))
        if sec.get("worker_token_file"):
            accepted.add(secret_of(w, c, sec["worker_token_file"]))
    control.discard(None)
    held = {v["secret"]["secretName"] for v in pod_spec(ww).get("volumes", []) if "secret" in v}
    check(not held & control, P + "workers mount no Secret of the admin or server tokens (%s)" %
          (sorted(held & control) or "none"))
    if accepted or wcfg.get("token_file"):
        mine = secret_of(ww, wc, wcfg.get("token_file", ""))
        check(mine is not None and accepted == {mine},
              P + "workers present the worker token the registry and servers accept (%s)" %
              mine)
    # NetworkPolicies, if any: Tessel pods reach the gRPC and UCX ports, anyone
    # the health ports, and nothing else is opened.
    nps = ov.of_kind("NetworkPolicy")
    if nps:
        want = {
            "tessel-registry": {(ports["tessel-registry"][0],) * 2 + ("tessel",),
                                (ports["tessel-registry"][1],) * 2 + ("any",)},
            "tessel-server": {(ports["tessel-server"][0],) * 2 + ("tessel",),
                              port_range(cfg["server"]["ucx_port_range"]) + ("tessel",),
                              (ports["tessel-server"][1],) * 2 + ("any",)},
            "tessel-train": {port_range(wcfg["ucx_port_range"]) + ("tessel",)}
            if "ucx_port_range" in wcfg else set(),
        }
        # /metrics: from Prometheus pods only.
        for name in want:
            m = cfg.get(SECTIONS[name], {}).get("metrics_address")
            if m:
                want[name].add((port_of(m), port_of(m), "prometheus"))
        for name, (w, c) in sorted(by_name.items()):
            labels = w["spec"]["template"]["metadata"]["labels"]
            got = set()
            for np in nps:
                if not selects(np["spec"]["podSelector"].get("matchLabels"), labels):
                    continue
                for rule in np["spec"].get("ingress", []):
                    froms = rule.get("from")
                    if froms is None:
                        who = "any"
                    elif all(f.get("podSelector", {}).get("matchLabels", {}).get(TESSEL_LABEL[0])
                             == TESSEL_LABEL[1] and len(f) == 1 for f in froms):
                        who = "tessel"
                    elif all(f.get("namespaceSelector") == {} and
                             f.get("podSelector") == {"matchExpressions": [
                                 {"key": "app.kubernetes.io/name", "operator": "In",
                                  "values": ["prometheus"]}]} and len(f) == 2
                             for f in froms):
                        who = "prometheus"
                    else:
                        who = "other"
                    for p in rule.get("ports", []):
                        got.add((p["port"], p.get("endPort", p["port"]), who))
            check(got == want[name], P + "%s: NetworkPolicies admit exactly %s (got %s)" %
                  (name, sorted(want[name]), sorted(got)))


def check_pods(ov):
    """Security contexts, resources, labels and GPU placement of every pod."""
    P = "overlays/%s: " % ov.name
    for w in ov.workloads():
        ps = pod_spec(w)
        where = P + "%s/%s" % (w["kind"], w["metadata"]["name"])
        sc = ps.get("securityContext", {})
        check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == UID and
              sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
              where + ": pod runs as non-root uid %d with seccomp RuntimeDefault" % UID)
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        check(all(labels.get(k) for k in APP_LABELS) and
              all(w["metadata"].get("labels", {}).get(k) for k in APP_LABELS),
              where + ": object and pods carry %s" % ", ".join(APP_LABELS))
        for c in ps["containers"]:
            csc = c.get("securityContext", {})
            check(csc.get("allowPrivilegeEscalation") is False and
                  csc.get("readOnlyRootFilesystem") is True and
                  "ALL" in csc.get("capabilities", {}).get("drop", []),
                  where + " %s: no privilege escalation, read-only root, all capabilities "
                  "dropped" % c["name"])
            res = c.get("resources", {})
            check(all(r in res.get(k, {}) for k in ("requests", "limits")
                      for r in ("cpu", "memory")),
                  where + " %s: cpu and memory requests and limits" % c["name"])
            if "nvidia.com/gpu" in res.get("limits", {}):
                check(c["image"].endswith("-gpu") and any(
                    t.get("key") == "nvidia.com/gpu" for t in ps.get("tolerations", [])),
                      where + " %s: a GPU container: the -gpu image, tolerates nvidia.com/gpu" %
                      c["name"])
    for o in ov.objects:
        check(all(o["metadata"].get("labels", {}).get(k) for k in APP_LABELS if k !=
                  "app.kubernetes.io/component") or o["kind"] == "ConfigMap" and all(
                      o["metadata"].get("labels", {}).get(k) for k in (
                          "app.kubernetes.io/name", "app.kubernetes.io/part-of",
                          "app.kubernetes.io/instance")),
              P + "%s/%s: labels name, part-of, instance" % (o["kind"], o["metadata"]["name"]))


# ------------------------------------------------------------- the cluster

def expand(text, env):
    """The kubelet's $(VAR) expansion: defined names are replaced, $$ is a
    literal $, anything else stays as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            j = text.find(")", i)
            name = text[i + 2:j] if j > 0 else None
            if name is not None and name in env:
                out.append(env[name])
                i = j + 1
            else:
                out.append(text[i])
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def field_ref(path, pod):
    """The downward API's fieldRef values for an emulated pod."""
    m = re.match(r"^metadata\.(annotations|labels)\['(.+)'\]$", path)
    if m:
        return pod[m.group(1)].get(m.group(2), "")
    values = {"metadata.name": pod["name"], "metadata.namespace": NAMESPACE,
              "status.podIP": pod["ip"], "status.hostIP": pod["host_ip"],
              "spec.nodeName": "node", "spec.serviceAccountName": "default"}
    if path not in values:
        raise RuntimeError("pod %s: fieldRef %s is not emulated" % (pod["name"], path))
    return values[path]


def rand5():
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))


def plan_pods(ov):
    """The pods the overlay's workloads would create, named as their
    controllers name them, with their labels and annotations."""
    pods = []
    for w in ov.workloads():
        kind, name = w["kind"], w["metadata"]["name"]
        tmpl = w["spec"]["template"]
        labels = dict(tmpl["metadata"].get("labels", {}))
        annotations = dict(tmpl["metadata"].get("annotations", {}))
        if kind == "Deployment":
            rs = "%x" % random.getrandbits(36)
            for i in range(w["spec"].get("replicas", 1)):
                pods.append(dict(workload=w, name="%s-%s-%s" % (name, rs, rand5()),
                                 labels=labels, annotations=annotations, index=i))
        elif kind == "StatefulSet":
            for i in range(w["spec"].get("replicas", 1)):
                pn = "%s-%d" % (name, i)
                pods.append(dict(workload=w, name=pn, index=i, annotations=annotations,
                                 labels=dict(labels, **{
                                     "statefulset.kubernetes.io/pod-name": pn,
                                     "apps.kubernetes.io/pod-index": str(i)})))
        elif kind == "Job":
            if w["spec"].get("completionMode") != "Indexed":
                raise RuntimeError("Job %s: only Indexed Jobs are emulated" % name)
            for i in range(w["spec"].get("parallelism", 1)):
                idx = {"batch.kubernetes.io/job-completion-index": str(i)}
                pods.append(dict(workload=w, name="%s-%d-%s" % (name, i, rand5()), index=i,
                                 labels=dict(labels, **idx),
                                 annotations=dict(annotations, **idx)))
    return pods


def hosts_for(ov, pods):
    """{name: ip} the cluster's DNS would answer for its Services, and the
    Services with several backends: /etc/hosts cannot balance, so a ClusterIP
    name points at its first backend (port == targetPort is checked in step
    3); a headless Service also names each of its StatefulSet's pods."""
    names, several = {}, []
    for s in ov.of_kind("Service"):
        sname = s["metadata"]["name"]
        backends = [p for p in pods if selects(s["spec"].get("selector"), p["labels"])]
        if not backends:
            continue
        if s["spec"].get("clusterIP") != "None" and len(backends) > 1:
            several.append(sname)
        for suffix in ("", "." + NAMESPACE, "." + NAMESPACE + ".svc",
                       "." + NAMESPACE + ".svc.cluster.local"):
            names[sname + suffix] = backends[0]["ip"]
            for p in backends:
                if p["workload"]["kind"] == "StatefulSet" and \
                        p["workload"]["spec"].get("serviceName") == sname:
                    names[p["name"] + "." + sname + suffix] = p["ip"]
    return names, several


def rendered_secrets(ov):
    """{name: {key: bytes}} of the Secrets the overlay renders."""
    out = {}
    for o in ov.of_kind("Secret"):
        data = {k: base64.b64decode(v) for k, v in o.get("data", {}).items()}
        data.update({k: v.encode() for k, v in o.get("stringData", {}).items()})
        out[o["metadata"]["name"]] = data
    return out


class Cluster:
    """An overlay's pods as processes: one network namespace per pod on a
    bridge (the root namespace is the node), one mount namespace per
    container (tests/pod_exec.py). The cluster holds the overlay's own
    Secrets (its secretGenerator's) and `secrets` {name: {key: bytes}}, the
    ones created beforehand."""

    def __init__(self, ov, bins, probe_bin, tmp, secrets=None):
        self.ov, self.bins, self.probe_bin = ov, bins, probe_bin
        self.tmp = os.path.join(tmp, "run-" + ov.name)
        self.secrets = dict(rendered_secrets(ov), **(secrets or {}))
        self.claims = {}
        self.procs = {}
        self.pods = plan_pods(ov)
        self.P = "overlays/%s run: " % ov.name

    def start(self, bridge):
        for p in self.pods:
            p["host"] = bridge.add_host(p["name"])
            p["ip"], p["host_ip"] = p["host"].ip, bridge.ip
        names, several = hosts_for(self.ov, self.pods)
        log("      pods: " + ", ".join("%s %s" % (p["name"], p["ip"]) for p in self.pods))
        log("      /etc/hosts of every pod: " + ", ".join(
            "%s %s" % (n, ip) for n, ip in sorted(names.items()) if "." not in n) +
            ("; first backend only: %s" % ", ".join(several) if several else ""))
        for p in self.pods:
            p["host"].hosts_file(names)
            spec = self.spec(p)
            with open(spec) as f:
                log("      %s: %s" % (p["name"], " ".join(json.load(f)["argv"])))
        self.t0 = time.time()
        for p in self.pods:
            with open(p["log"], "w") as out:
                self.procs[p["name"]] = p["host"].popen(
                    [sys.executable, POD_EXEC, os.path.join(p["dir"], "spec.json")],
                    stdout=out, stderr=subprocess.STDOUT)

    def spec(self, pod):
        """Writes the pod_exec.py spec of the pod's one container."""
        w = pod["workload"]
        ps = pod_spec(w)
        if len(ps["containers"]) != 1 or ps.get("initContainers"):
            raise RuntimeError("pod %s: one container and no init containers are emulated" %
                               pod["name"])
        c = ps["containers"][0]
        d = pod["dir"] = os.path.join(self.tmp, "pods", pod["name"])
        pod["log"], pod["container"] = os.path.join(d, "log"), c
        os.makedirs(os.path.join(d, "scratch"))
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": pod["name"]}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif "fieldRef" in e.get("valueFrom", {}):
                env[e["name"]] = field_ref(e["valueFrom"]["fieldRef"]["fieldPath"], pod)
            else:
                raise RuntimeError("pod %s: env %s: only value and fieldRef are emulated" %
                                   (pod["name"], e["name"]))
        argv = [expand(a, env) for a in argv_of(c)]
        psc, csc = ps.get("securityContext", {}), c.get("securityContext", {})
        fs_group = psc.get("fsGroup")
        volumes = {}
        for v in ps.get("volumes", []):
            vd = os.path.join(d, "volumes", v["name"])
            if "configMap" in v or "secret" in v:
                kind = "configMap" if "configMap" in v else "secret"
                ref = v[kind].get("name") or v[kind].get("secretName")
                data = (self.ov.get("ConfigMap", ref) or {}).get("data") if kind == "configMap" \
                    else self.secrets.get(ref)
                if data is None:
                    raise RuntimeError("pod %s: volume %s: no %s %s" %
                                       (pod["name"], v["name"], kind, ref))
                os.makedirs(vd)
                items = v[kind].get("items") or [{"key": k, "path": k} for k in sorted(data)]
                for it in items:
                    f = os.path.join(vd, it["path"])
                    content = data[it["key"]]
                    with open(f, "wb") as out:
                        out.write(content.encode() if isinstance(content, str) else content)
                    os.chmod(f, it.get("mode", v[kind].get("defaultMode", 0o644)))
                    if fs_group is not None:
                        os.chown(f, 0, fs_group)
            elif "emptyDir" in v:
                os.makedirs(vd)
                os.chmod(vd, 0o777)
            elif "persistentVolumeClaim" in v:
                vd = self.claim(v["persistentVolumeClaim"]["claimName"])
            else:
                raise RuntimeError("pod %s: volume %s: only configMap, secret, emptyDir and "
                                   "persistentVolumeClaim are emulated" % (pod["name"],
                                                                            v["name"]))
            volumes[v["name"]] = vd
        for t in w["spec"].get("volumeClaimTemplates", []):
            volumes[t["metadata"]["name"]] = self.claim(
                "%s-%s" % (t["metadata"]["name"], pod["name"]))
        mounts = [{"src": volumes[m["name"]], "dst": m["mountPath"],
                   "ro": bool(m.get("readOnly"))} for m in c.get("volumeMounts", [])]
        local = self.bins.local(argv[0])
        if local is None:
            raise RuntimeError("pod %s: %s is not a binary of the image" % (pod["name"],
                                                                             argv[0]))
        mounts.append({"src": os.path.realpath(local), "dst": argv[0], "ro": True})
        uid = csc.get("runAsUser", psc.get("runAsUser", 0))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", 0))
        groups = sorted({gid} | ({fs_group} if fs_group is not None else set()) |
                        set(psc.get("supplementalGroups", [])))
        spec = {"argv": argv, "env": env, "hostname": pod["name"], "mounts": mounts,
                "scratch": os.path.join(d, "scratch"), "uid": uid, "gid": gid,
                "groups": groups, "read_only_root": bool(csc.get("readOnlyRootFilesystem")),
                "no_new_privs": csc.get("allowPrivilegeEscalation") is False,
                "working_dir": c.get("workingDir")}
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f, indent=1)
        return path

    def claim(self, name):
        """A claim's volume: one directory, shared by every pod that mounts it."""
        if name not in self.claims:
            self.claims[name] = os.path.join(self.tmp, "claims", name)
            os.makedirs(self.claims[name])
            os.chmod(self.claims[name], 0o777)
        return self.claims[name]

    def of(self, kind, name=None):
        return [p for p in self.pods if p["workload"]["kind"] == kind and
                (name is None or p["workload"]["metadata"]["name"] == name)]

    def rc(self, p):
        return self.procs[p["name"]].poll()

    def dump(self, p):
        return "\n      --- %s (%s):\n%s" % (p["name"], p["log"], tail(p["log"]))

    def probe(self, p, pr):
        """One probe as the kubelet makes it, from the node: (ok, answer)."""
        timeout = pr.get("timeoutSeconds", 1)
        if "grpc" in pr:
            g = pr["grpc"]
            r = subprocess.run([self.probe_bin, "--address=%s:%d" % (p["ip"], g["port"]),
                                "--service=" + g.get("service", ""),
                                "--timeout_ms=%d" % (1000 * timeout)],
                               capture_output=True, text=True, timeout=30)
            return r.returncode == 0, (r.stdout.strip() or r.stderr.strip())
        if "httpGet" in pr:
            h = pr["httpGet"]
            url = "http://%s:%d%s" % (p["ip"], h["port"], h.get("path", "/"))
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    return 200 <= r.status < 400, "HTTP %d %s" % (r.status, r.read(200))
            except (OSError, ValueError) as e:
                return False, "%s: %s" % (url, e)
        raise RuntimeError("pod %s: only grpc and httpGet probes are emulated" % p["name"])

    def wait_ready(self, timeout):
        """Waits for every pod with a readinessProbe; checks each is ready,
        alive (livenessProbe) and still running."""
        probed = [p for p in self.pods if "readinessProbe" in p["container"]]
        ready = {}
        while len(ready) < len(probed) and time.time() - self.t0 < timeout:
            for p in probed:
                if p["name"] not in ready and self.rc(p) is None and \
                        self.probe(p, p["container"]["readinessProbe"])[0]:
                    ready[p["name"]] = time.time() - self.t0
            if any(self.rc(p) is not None for p in probed):
                break
            time.sleep(0.5)
        for p in probed:
            pr = p["container"]["readinessProbe"]
            kind = "grpc" if "grpc" in pr else "httpGet"
            ok = p["name"] in ready
            check(ok, self.P + "%s ready (readinessProbe %s %s) %s" % (
                p["name"], kind, pr[kind], "after %.1f s" % ready[p["name"]] if ok else
                "never: %s%s" % (self.probe(p, pr)[1], self.dump(p))))
            if ok and "livenessProbe" in p["container"]:
                alive, answer = self.probe(p, p["container"]["livenessProbe"])
                check(alive, self.P + "%s alive (livenessProbe): %s" % (p["name"], answer))
            rc = self.rc(p)
            check(rc is None, self.P + "%s still running%s" %
                  (p["name"], " (exited with rc %s)%s" % (rc, self.dump(p))
                   if rc is not None else ""))
        return len(ready) == len(probed)

    def check_shards(self, ctl, registry, extra=()):
        """The registry lists server N at pod tessel-server-N's IP."""
        cfg = self.config()
        want = {(p["index"], "%s:%d" % (p["ip"], port_of(cfg["server"]["listen"])))
                for p in self.of("StatefulSet", "tessel-server")}
        got = set()
        r = subprocess.run([ctl, "--registry", registry] + list(extra) +
                           ["members", "-o", "json"], capture_output=True, text=True, timeout=30)
        try:
            views = json.loads(r.stdout or "[]")
        except ValueError:
            views = []
        for v in views:
            for m in v.get("members", []):
                if m.get("role") == "server":
                    got.add((int(m.get("rank", 0)), m.get("grpc_address")))
        check(got == want, self.P + "the registry lists shard N at tessel-server-N's pod IP: "
              "%s%s" % (sorted(want), "" if got == want else " (got %s; %s)" %
                        (sorted(got), r.stderr.strip())))

    def config(self):
        for w, c, name in tessel_containers(self.ov):
            cfg = config_of(self.ov, w, c)[1]
            if cfg:
                return cfg
        return {}

    def stop(self, pods):
        """Deletion: SIGTERM, then each pod's grace period."""
        for p in pods:
            if self.rc(p) is None:
                self.procs[p["name"]].send_signal(signal.SIGTERM)
        for p in pods:
            grace = pod_spec(p["workload"]).get("terminationGracePeriodSeconds", 30)
            t0 = time.time()
            try:
                rc = self.procs[p["name"]].wait(timeout=grace)
            except subprocess.TimeoutExpired:
                rc = None
            check(rc is not None, self.P + "%s stops on SIGTERM within its %d s grace period "
                  "(%s)" % (p["name"], grace, "rc %s after %.1f s" % (rc, time.time() - t0)
                            if rc is not None else "still running" + self.dump(p)))


def losses(text):
    """(step, of, loss) of rank 0's progress lines."""
    return [(int(a), int(b), float(l)) for a, b, l in
            re.findall(r"(?m)^step\s+(\d+)/(\d+)\s+loss\s+([0-9.eE+-]+)", text)]


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
            ok = ok and "(every frame authenticated)" in line[0]
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
    # every frame authenticated shows that their token gets it.)
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
