"""The attacker's side of //tests:attack_test and //tests:attack_overlay_test,
shared by every scenario (attack_test.py: standalone, insecure, demo;
attack_launch.py: tessel-launch; attack_overlay.py: the dev overlay), and
the table of counters the suite prints at the end.

What the attacker knows is what anyone may read without a credential: the
members' UCX and gRPC addresses (`tesselctl members -o json`, no token)
and, from the same listing, each job's name and epoch. `attack()` sprays
tests/attacker.cc's hostile frames at every server and worker it lists,
then tries the control plane with no credential (GetFrameKey straight at a
server, a checkpoint delete through the registry). `Tools` holds the
binaries; `where` runs the attacker's commands where the attacker is
(`Local`: the test's own network namespace; attack_overlay.py: another).
"""
import base64
import json
import os
import re
import subprocess
import time

from proc_util import check, log, spawn

# The transport attacks (tests/attack_transport.h) and what the attacked
# processes log when they refuse them.
TRANSPORT_KINDS = "out_of_region,forged_release,hello_flood"
TRANSPORT_REFUSALS = (("out_of_region", "ucx: dropping a malformed payload descriptor"),
                      ("forged_release", "ucx: ignoring a RELEASE that is not its sender's"),
                      ("hello_flood", "ucx: ignoring a HELLO"))

# One row per scenario: name, frames sent, frames the servers refused, RPCs
# refused of those tried ("refused/tried"), applied (0 when the attacked job
# ended bitwise equal to its peaceful run), processes crashed, jobs killed,
# and the frames sent per kind ({kind: n}).
results = []


class Tools:
    """Paths of the binaries the attacker and the operator use."""

    def __init__(self, ctl, attacker, rpc_probe):
        self.ctl, self.attacker, self.rpc_probe = ctl, attacker, rpc_probe


class Local:
    """Runs commands here: run() to the end (output captured as text),
    start() in the background (stdout and stderr piped, as text)."""

    @staticmethod
    def run(argv, timeout):
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    @staticmethod
    def start(argv):
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_cluster(args, d, auth, server_token, ucx):
    """Starts tessel-registry and 2 tessel-servers by hand in `d` with `auth`
    (their credential flags) and the servers' token file `server_token` (""
    for none); returns (the registry's address, the server processes)."""
    port = os.path.join(d, "registry.port")
    spawn([args.registry, "--listen=127.0.0.1:0", "--port_file=" + port, "--lease_ttl_ms=3000"] +
          (["--server_token_file=" + server_token] if server_token else []) + auth,
          os.path.join(d, "registry.log"))
    for _ in range(200):
        if os.path.exists(port) and open(port).read().strip():
            break
        time.sleep(0.05)
    reg = open(port).read().strip()
    servers = [spawn([args.server, "--registry=" + reg, "--shard=%d" % s, ucx,
                      "--lease_ttl_ms=3000"] +
                     (["--token_file=" + server_token] if server_token else []) + auth,
                     os.path.join(d, "server%d.log" % s)) for s in range(2)]
    return reg, servers


def ctl(tools, reg, *args, token=None, where=Local):
    cmd = [tools.ctl, "--registry", reg] + (["--token_file", token] if token else []) + list(args)
    return where.run(cmd, 30)


def members(tools, reg, where=Local):
    """The registry's listing as anyone may read it (no credential)."""
    r = ctl(tools, reg, "members", "-o", "json", where=where)
    try:
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    except ValueError:
        return []


def ucx_of(view_list, group, role):
    return [(int(m.get("rank", 0)), base64.b64decode(m["ucx_address"]).hex(), m.get("grpc_address"))
            for v in view_list if v.get("group") == group
            for m in v.get("members", []) if m.get("role") in (role, "ROLE_" + role.upper())
            and m.get("ucx_address")]


def describe(tools, reg, job, admin):
    """The job as an operator sees it (the test's view, not the attacker's)."""
    r = ctl(tools, reg, "describe", "job", job, "-o", "json", token=admin)
    try:
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
    except ValueError:
        return None


def wait_training(tools, reg, job, admin, min_step=5, timeout=30.0, alive=lambda: True):
    """Waits until every rank of `job` passed `min_step`; returns describe's answer."""
    info = None
    end = time.time() + timeout
    while time.time() < end and alive():
        info = describe(tools, reg, job, admin)
        if info and info["step"]["min"] >= min_step:
            return info
        time.sleep(0.1)
    return info if info and info["step"]["min"] >= min_step else None


def attack(tools, reg, job, info, steps, servers_want=2, workers_want=2, insecure=False,
           ucx="--ucx_tls=posix,sysv,self", buckets=2, where=Local, insider_token=None):
    """Attacks every member of `job` and of the server pool from what the
    registry lists to anyone; `info` is the operator's describe of the job
    (to check the listing told the attacker the right epoch). With
    `insider_token` (a token file: a worker credential of another job), the
    job's RPCs are tried with it too. Returns {"sent": frames sent, "rpcs":
    [RPCs refused, RPCs tried]}."""
    view = members(tools, reg, where=where)
    servers = ucx_of(view, "default", "server")
    workers = ucx_of(view, job, "worker")
    check(len(servers) == servers_want and len(workers) == workers_want,
          "the attacker sees %d servers and %d workers from the registry, without a credential "
          "(%d, %d)" % (servers_want, workers_want, len(servers), len(workers)))
    # What the attacker knows: the group's epoch from the listing anyone may
    # read; the step it does not know, so it sprays every step of the run.
    epochs = [v.get("epoch") for v in view if v.get("group") == job]
    epoch = int(epochs[0]) if epochs else 0
    check(epoch == info["epoch"], "the listing gives the attacker the job's epoch (%s, %s)"
          % (epoch, info["epoch"]))
    common = ["--job=" + job, "--epoch=%d" % epoch, "--step_range=0:%d" % steps,
              "--ranks=0,1", "--shards=0,1", "--buckets=%d" % buckets, "--bytes=4096", ucx]
    sent, kinds = 0, {}
    # Frames, and below them the transport's own messages (DESCRIPTOR,
    # RELEASE, HELLO; --insecure changes nothing there).
    targets = [(a, "push,pull,init," + TRANSPORT_KINDS if not insecure else TRANSPORT_KINDS,
                "server") for _, a, _ in servers]
    targets += [(a, ("oversized,undersized," if insecure else
                     "params,error,oversized,undersized,") + TRANSPORT_KINDS, "worker")
                for _, a, _ in workers]
    # One attacker process per peer, all at once (the attack lasts about a
    # second, while the job trains); each peer's HELLOs name the next one's
    # address to dial.
    procs = [(where.start([tools.attacker, "--to=" + address, "--kinds=" + kinds,
                           "--third=" + targets[(i + 1) % len(targets)][0]] + common), what)
             for i, (address, kinds, what) in enumerate(targets)]
    for p, what in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        err = "\n".join(l for l in err.splitlines() if "UCX  WARN" not in l)
        log("  attacker -> %s: %s%s" % (what, out.strip(), err.strip()[-200:]))
        sent += int(out.split()[1]) if out.startswith("sent") else 0
        add_kinds(kinds, out)
    check(sent > 0, "the attacker sent %d frames" % sent)
    out = {"sent": sent, "rpcs": [0, 0], "kinds": kinds}  # rpcs: [refused, tried]
    if insecure:
        return out
    grpcs = [g for _, _, g in servers if g]
    # The control plane, with no credential, then (insider) with a worker
    # credential of another job.
    for who, token, rpcs in ((None, None, ("GetFrameKey", "ReadState")),
                             ("a worker token of another job", insider_token,
                              ("GetFrameKey", "ReadState", "SetEpoch", "WriteState"))):
        if who and not token:
            continue
        who = who or "no credential"
        for grpc in grpcs:
            for rpc in rpcs:
                r = where.run([tools.rpc_probe, "--address=" + grpc, "--rpc=" + rpc,
                               "--job=" + job] + (["--token_file=" + token] if token else []), 30)
                tally(out, r.returncode == 5, "%s on server %s with %s refused (exit %d: %s)"
                      % (rpc, grpc, who, r.returncode, r.stdout.strip()[:120]))
        r = ctl(tools, reg, "checkpoint", "delete", "--job", job, "--step", "1", token=token,
                where=where)
        tally(out, r.returncode == 5, "a checkpoint delete with %s refused (exit %d)"
              % (who, r.returncode))
    return out


def check_transport_refusals(logs, who):
    """Checks that `logs` (the attacked processes' logs) say each transport
    attack was refused."""
    for kind, line in TRANSPORT_REFUSALS:
        check(line in logs, "%s refused the %s messages (their logs: '%s')" % (who, kind, line))


def add_kinds(kinds, out):
    """Adds the "kinds K=n ..." of an attacker's line `out` to `kinds`."""
    m = re.search(r"kinds ([^;\n]*)", out)
    for kv in (m.group(1).split() if m else []):
        k, n = kv.split("=")
        kinds[k] = kinds.get(k, 0) + int(n)
    return kinds


def tally(out, refused, what):
    out["rpcs"][1] += 1
    out["rpcs"][0] += int(check(refused, what))


def record(name, attacked, refused, same, crashed, killed):
    """One row of the table (see `results`); `attacked`: attack()'s answer
    (None if the attack did not run); `same`: bitwise equal to the peaceful
    run."""
    attacked = attacked or {"sent": 0, "rpcs": [0, 0]}
    results.append((name, attacked["sent"], refused, "%d/%d" % tuple(attacked["rpcs"]),
                    0 if same else "some", crashed, killed, attacked.get("kinds", {})))


def print_table():
    if not results:
        return
    log("== counters per scenario")
    row = "  %-10s %10s %10s %12s %8s %8s %12s"
    log(row % ("scenario", "frames", "refused", "RPCs refused", "applied", "crashes",
               "jobs killed"))
    for name, sent, refused, rpcs, applied, crashed, killed, _ in results:
        log(row % (name, sent, "-" if refused is None else refused, rpcs, applied, crashed,
                   killed))
    log("  %-10s %10d" % ("total", sum(r[1] for r in results)))
    log("== frames (and transport messages) sent per kind")
    for r in results:
        log("  %-10s %s" % (r[0], " ".join("%s=%d" % kv for kv in sorted(r[7].items()))))
