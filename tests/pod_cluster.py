"""Step 4's emulation for tests/manifests_test.py: an overlay's pods as local
processes, each in its own network namespace (tests/netns.py) and mount
namespace (tests/pod_exec.py), started with exactly the rendered command
line, env (the kubelet's $(VAR) expansion, downward API values), volumes
(ConfigMaps, Secrets root-owned with group fsGroup and their defaultMode,
emptyDirs, claims) and security context; probes asked as the kubelet asks.
"""
import base64
import json
import os
import random
import re
import signal
import string
import subprocess
import sys
import time
import urllib.request

from manifest_checks import (argv_of, check, config_of, log, pod_spec, port_of, selects,
                             tail, tessel_containers)

HERE = os.path.dirname(os.path.abspath(__file__))
POD_EXEC = os.path.join(HERE, "pod_exec.py")
NAMESPACE = "default"


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

