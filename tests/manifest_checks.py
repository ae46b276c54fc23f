"""Steps 1-3 of tests/manifests_test.py: deploy/'s overlays rendered
(`kubectl kustomize`), validated against Kubernetes' OpenAPI schemas
(deploy/validate/k8s_validate.js) and checked against the binaries' own
flags and the job config (ports, sizes, paths, per-pod flags, least
privilege, NetworkPolicies, security contexts), with the helpers every step
shares: check() records failures, Overlay and the workload accessors.
"""
import collections
import json
import os
import posixpath
import re
import subprocess

import yaml

# Where the image (deploy/image) puts the binaries the manifests run.
IMAGE_BIN = "/usr/local/bin/"
SECTIONS = {"tessel-registry": "registry", "tessel-server": "server", "tessel-train": "worker"}
CONFIG_KEYS = {"common", "registry", "server", "worker", "comment", "launch"}
TESSEL_LABEL = ("app.kubernetes.io/part-of", "tessel")
APP_LABELS = ["app.kubernetes.io/name", "app.kubernetes.io/component",
              "app.kubernetes.io/part-of", "app.kubernetes.io/instance"]
UID = 65532
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


