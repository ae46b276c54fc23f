"""tesselctl against a real cluster (a registry, two shard servers, one job
trained by two tessel-train workers): kubectl's conventions. `version`
(client and servers), -o table|json|yaml on the read commands with numbers
as numbers and enums as words, `describe job`, `delete job` (admin only),
`--watch` seeing a member join, an unknown command named with a suggestion,
bash completion, and contexts in a config file (flags, then the
environment, then the context).

Usage: ctl_test.py REGISTRY SERVER TRAIN TESSELCTL
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, spawn, start_registry  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
STEPS = 40


def main():
    registry, server, train, ctl = sys.argv[1:5]
    d = tempfile.mkdtemp(prefix="tessel-ctl-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSEL_")}
    env["TESSEL_CONFIG"] = os.path.join(d, "config")

    def run(*args, extra_env=None, timeout=30):
        e = dict(env, **(extra_env or {}))
        return subprocess.run([ctl] + list(args), capture_output=True, text=True, env=e,
                              timeout=timeout)

    try:
        token = os.path.join(d, "admin.token")
        # Token files are secrets: owner-only, or every binary refuses them.
        with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("s3cret-admin-token-0123456789\n")
        _, reg = start_registry(registry, d, 1500)
        ck = os.path.join(d, "ck")

        def start_server(shard):
            return spawn([server, "--registry=" + reg, "--shard=%d" % shard, UCX,
                          "--checkpoint_dir=" + ck, "--lease_ttl_ms=1500",
                          "--admin_token_file=" + token], os.path.join(d, "server%d.log" % shard))

        for shard in range(2):
            start_server(shard)
        up = False
        for _ in range(200):
            r = run("--registry", reg, "members", "--group", "default", "-o", "json")
            if r.returncode == 0 and len(json.loads(r.stdout)[0]["members"]) == 2:
                up = True
                break
            time.sleep(0.05)
        if not check(up, "two shard servers registered"):
            return 1
        procs = [spawn([train, "--registry=" + reg, "--job=mlp", "--rank=%d" % r, "--world=2",
                        "--servers=2", "--steps=%d" % STEPS, "--layers=16,32,4", "--samples=256",
                        "--batch=8", "--optimizer=adam", "--strategy=zero2",
                        "--checkpoint_every_steps=20", "--log_every=1000000", UCX,
                        "--token_file=" + token, "--out=" + os.path.join(d, "out.npy")],
                       os.path.join(d, "worker%d.log" % r)) for r in range(2)]
        for p in procs:
            p.wait(timeout=120)
        check(all(p.returncode == 0 for p in procs), "a job trained %d steps" % STEPS)
        R = ["--registry", reg]

        # version
        v = run("version", "--client")
        check(v.returncode == 0 and v.stdout.startswith("Client: tessel "),
              "version --client: %r" % v.stdout.strip())
        v = run(*R, "version", "-o", "json")
        vj = json.loads(v.stdout) if v.returncode == 0 else {}
        check(vj.get("client", {}).get("version", "").startswith("tessel ") and
              [s.get("version") for s in vj.get("servers", [])] ==
              [vj["client"]["version"]] * 2,
              "version: the client's and both servers' (%s)" % v.stdout.strip()[:200])
        # How each server authenticates its callers: these hold an admin token.
        check([s.get("security") for s in vj.get("servers", [])] == ["tokens"] * 2 and
              "--insecure" not in v.stderr,
              "version: both servers' callers 'tokens', no warning (%r)" % v.stderr.strip()[:200])
        # A server started with --insecure (a pool of its own): flagged.
        spawn([server, "--insecure", "--registry=" + reg, "--pool=open", "--shard=0", UCX,
               "--lease_ttl_ms=1500"], os.path.join(d, "open-server.log"))
        for _ in range(100):
            v = run(*R, "--pool", "open", "version")
            if v.returncode == 0:
                break
            time.sleep(0.1)
        check(v.returncode == 0 and "callers: insecure" in v.stdout and
              "shard server 0" in v.stderr and "runs with --insecure" in v.stderr,
              "version: an --insecure server is shown and warned about (%r, %r)"
              % (v.stdout.strip()[-120:], v.stderr.strip()[:200]))
        v = run("--registry", "127.0.0.1:1", "--timeout", "2", "version")
        check(v.returncode == 4 and "Client: tessel" in v.stdout,
              "version with no cluster: the client's, then exit 4 (%d)" % v.returncode)

        # members: numbers and words
        m = run(*R, "members", "-o", "json")
        mj = json.loads(m.stdout)
        pool = [g for g in mj if g["group"] == "default"][0]
        check(isinstance(pool["epoch"], int) and
              sorted(x["role"] for x in pool["members"]) == ["server", "server"] and
              all(isinstance(x["rank"], int) and isinstance(x["pid"], int)
                  for x in pool["members"]),
              "members -o json: epoch and ranks are numbers, roles are words")
        my = yaml.safe_load(run(*R, "members", "-o", "yaml").stdout)
        check(my == mj, "members -o yaml says what -o json says")

        # jobs, stats, shards: yaml and json agree, numbers are numbers
        jy = yaml.safe_load(run(*R, "jobs", "-o", "yaml").stdout)
        jj = json.loads(run(*R, "jobs", "-o", "json").stdout)
        check(jy == jj and jj[0]["job"] == "mlp" and
              [s["step"] for s in jj[0]["shards"]] == [STEPS, STEPS] and
              jj[0]["shards"][0]["strategy"] == "zero2",
              "jobs -o yaml == -o json; steps are numbers (%s)" %
              [s.get("step") for s in jj[0]["shards"]] if jj else "jobs")
        st = json.loads(run(*R, "stats", "--job", "mlp", "-o", "json").stdout)
        check(st["step_min"] == STEPS and isinstance(st["pushed_bytes"], int),
              "stats -o json: numbers")
        sh = yaml.safe_load(run(*R, "shards", "--job", "mlp", "-o", "yaml").stdout)
        check([s["stats"]["step"] for s in sh] == [STEPS, STEPS], "shards -o yaml")

        # describe job
        dsc = run(*R, "describe", "job", "mlp")
        check(dsc.returncode == 0 and "Name:         mlp" in dsc.stdout and
              re.search(r"Checkpoints:  \d+, newest step %d" % STEPS, dsc.stdout) and
              "Recoveries:   0" in dsc.stdout and "Shards:" in dsc.stdout,
              "describe job: name, checkpoints, recoveries, shards:\n" + dsc.stdout)
        dj = json.loads(run(*R, "describe", "job", "mlp", "-o", "json").stdout)
        check(dj["step"] == {"min": STEPS, "max": STEPS} and dj["recoveries"] == 0 and
              dj["checkpoints"][-1]["step"] == STEPS and len(dj["shards"]) == 2 and
              re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", dj["checkpoints"][-1]["created"]),
              "describe job -o json: step, recoveries, checkpoints (RFC 3339 times), shards")
        nf = run(*R, "describe", "job", "nope")
        check(nf.returncode == 3, "describe job of an unknown job: exit 3 (%d)" % nf.returncode)

        # checkpoint show honours -o
        cs = yaml.safe_load(run(*R, "checkpoint", "show", "--job", "mlp", "--step", str(STEPS),
                                "-o", "yaml").stdout)
        check(cs.get("job") == "mlp" and cs.get("step") == STEPS,
              "checkpoint show -o yaml: the manifest")
        ct = run(*R, "checkpoint", "show", "--job", "mlp", "--step", str(STEPS))
        check("Step:      %d" % STEPS in ct.stdout, "checkpoint show: a summary")

        # unknown command
        u = run(*R, "jbos")
        check(u.returncode == 2 and 'unknown command "jbos"; did you mean jobs?' in u.stderr,
              "an unknown command is named with a suggestion: %r" % u.stderr.strip())
        u = run("frobnicate")
        check(u.returncode == 2 and 'unknown command "frobnicate"' in u.stderr and
              "commands:" in u.stderr, "an unknown command with no near one lists the commands")

        # completion
        comp = run("completion", "bash")
        path = os.path.join(d, "completion.bash")
        open(path, "w").write(comp.stdout)
        syntax = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        check(comp.returncode == 0 and syntax.returncode == 0, "completion bash: valid bash")

        def complete(*words):
            script = ('source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _tesselctl; '
                      'printf "%%s\\n" "${COMPREPLY[@]}"' %
                      (path, " ".join("'%s'" % w for w in words), len(words) - 1))
            return subprocess.run(["bash", "-c", script], capture_output=True,
                                  text=True).stdout.split()

        check(complete("tesselctl", "che") == ["checkpoint"], "completes a command")
        check(set(complete("tesselctl", "checkpoint", "")) >=
              {"save", "list", "show", "verify", "restore", "delete"},
              "completes checkpoint's subcommands")
        check("--job" in complete("tesselctl", "--registry", "x", "checkpoint", "list", "--"),
              "completes a subcommand's flags after global flags")
        check(complete("tesselctl", "describe", "") == ["job"] or
              "job" in complete("tesselctl", "describe", ""), "completes describe job")

        # contexts
        c = run("config", "set-context", "local", "registry=" + reg, "pool=default")
        check(c.returncode == 0 and "created" in c.stdout, "config set-context creates")
        j = run("jobs")
        check(j.returncode == 0 and "mlp" in j.stdout,
              "with a context, no --registry is needed (%d %s)" % (j.returncode, j.stderr.strip()))
        run("config", "set-context", "dead", "registry=127.0.0.1:1")
        gc = run("config", "get-contexts")
        check(re.search(r"^\*\s+local\s", gc.stdout, re.M) is not None,
              "config get-contexts marks the current one:\n" + gc.stdout)
        dead = run("--context", "dead", "--timeout", "2", "jobs")
        check(dead.returncode == 4, "--context picks a context (unreachable one: exit 4)")
        check(run("config", "use-context", "dead").returncode == 0 and
              run("config", "current-context").stdout.strip() == "dead", "config use-context")
        check(run("--registry", reg, "jobs").returncode == 0, "a flag beats the context")
        check(run("jobs", extra_env={"TESSEL_REGISTRY": reg}).returncode == 0,
              "the environment beats the context")
        nope = run("--context", "nope", "jobs")
        check(nope.returncode == 2 and 'no context "nope"' in nope.stderr,
              "--context that does not exist: exit 2")
        bad = run("config", "set-context", "x", "colour=blue")
        check(bad.returncode == 2, "set-context with an unknown key: exit 2")
        check(oct(os.stat(env["TESSEL_CONFIG"]).st_mode & 0o777) == "0o600",
              "the config file is private (0600)")
        open(env["TESSEL_CONFIG"], "a").write("bogus: [\n")
        broken = run("jobs")
        check(broken.returncode == 2 and env["TESSEL_CONFIG"] in broken.stderr,
              "a broken config file: exit 2 naming it (%r)" % broken.stderr.strip()[:200])
        os.unlink(env["TESSEL_CONFIG"])

        # --watch sees a member join
        out = os.path.join(d, "watch.out")
        w = subprocess.Popen([ctl, "--registry", reg, "members", "--group", "default", "--watch",
                              "--watch_interval", "0.2"], stdout=open(out, "w"),
                             stderr=subprocess.STDOUT, env=env)
        time.sleep(1.0)
        start_server(2)
        deadline = time.time() + 15
        while time.time() < deadline and open(out).read().count("# ") < 2:
            time.sleep(0.1)
        w.send_signal(signal.SIGINT)
        w.wait(timeout=10)
        text = open(out).read()
        blocks = [b for b in re.split(r"(?m)^# \S+Z$", text) if b.strip()]
        check(w.returncode == 0 and len(blocks) >= 2 and blocks[0].count("server") == 2 and
              blocks[-1].count("server") == 3,
              "members --watch prints again when a server joins; Ctrl-C exits 0 (%d blocks)" %
              len(blocks))

        # delete job: admin only
        nd = run(*R, "delete", "job", "mlp")
        check(nd.returncode == 5, "delete job without the admin token: exit 5 (%d)" % nd.returncode)
        dl = run(*R, "--token_file", token, "delete", "job", "mlp")
        check(dl.returncode == 0 and "deleted from 3 shard servers" in dl.stdout or
              "deleted from 2 shard servers" in dl.stdout,
              "delete job with the admin token: %r" % (dl.stdout + dl.stderr).strip())
        check("mlp" not in run(*R, "jobs").stdout, "the job is gone from `jobs`")
        again = run(*R, "--token_file", token, "delete", "job", "mlp")
        check(again.returncode == 3, "deleting it again: exit 3 (%d)" % again.returncode)
        lst = run(*R, "checkpoint", "list", "--job", "mlp")
        check(lst.returncode == 0 and re.search(r"^%d " % STEPS, lst.stdout, re.M),
              "its checkpoints are kept")
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
