"""attack_test's `member` scenario: the attacks from inside (Tessel issue 42).

A cluster started by hand with tokens, one job of 3 ranks trained twice: ranks
0 and 1 are tessel-train, rank 2 is tests/attacker.cc in --mode=member, a
real member of the job (tenant A's worker credential, its own rank's frame
keys). In the reference run it only trains. In the attacked run it stops at
step 5 (the other ranks wait for it) and, from a second UCX endpoint, sends
frames sealed under its own keys: PUSH as the other ranks, its own PUSH,
micro-batch part and PULL replayed from that endpoint, and PARAMS and ERROR
toward the other workers under its up key; and asks GetFrameKey for every
other rank, a rank outside the world and the next epoch. Meanwhile another
tenant (B, a worker credential whose scope names the same job, as two teams
naming their jobs alike would have) tries every job RPC on tenant A's
derived-name jobs (`member.g1`, `member~sync1.e1`, created by A) and
GetMeshKey on `member.mesh` (A's), then creates `member.g2` (a derived name
nobody holds: allowed, B is its creator), takes the real key of its rank 0
and sends INIT, PUSH and PULL for A's derived jobs sealed with it.

Checked: 0 applied (rank 0's final parameters bitwise the reference's; A's
derived jobs still uninitialized at step 0), 0 crashes, 0 jobs killed (every
rank exited 0), every RPC refused with the expected code, no frame answered
to the attacking endpoints (a replayed PULL gets no PARAMS), and the
defences that fired say so in the logs: the servers dropped frames as
replays and as unauthenticated, the workers dropped unauthenticated frames.
"""
import base64
import os
import re
import subprocess

from attack_lib import (Local, add_kinds, describe, members, record, start_cluster, ucx_of,
                        wait_training)
from proc_util import check, log, read, spawn

MEMBER_KINDS = "steal_key,other_rank,replay_push,replay_pull,forged_direction"
ATTACK_AT = 5
VICTIMS = ["member.g1", "member~sync1.e1"]
MESH = "member.mesh"
OWN = "member.g2"  # the other tenant's own derived name


def secret_file(path, text):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)


def parse(out):
    """{"sent", "rpcs": [refused, tried], "answers", "kinds"} from the attacker's line."""
    m = re.search(r"sent (\d+) frames \((\d+) failed\); kinds ([^;]*); answers (\d+); "
                  r"rpcs (\d+)/(\d+)", out)
    if not m:
        return None
    return {"sent": int(m.group(1)), "failed": int(m.group(2)), "kinds": add_kinds({}, out),
            "answers": int(m.group(4)), "rpcs": [int(m.group(5)), int(m.group(6))]}


def write_targets(tools, reg, job, path):
    """What the registry lists to anyone, as tests/attack_rpc.h's file."""
    view = members(tools, reg)
    servers = ucx_of(view, "default", "server")
    workers = ucx_of(view, job, "worker")
    lines = ["server %d %s %s" % (r, g, a) for r, a, g in servers]
    lines += ["worker %d %s" % (r, a) for r, a, _ in workers]
    secret_file(path + ".tmp", "\n".join(lines) + "\n")
    os.rename(path + ".tmp", path)
    return len(servers), len(workers)


def scenario(args, tools, d, model, gen_tokens):
    log("== member: a real member of the job attacks it from inside; another tenant its "
        "derived names")
    d = os.path.join(d, "member")
    os.makedirs(d)
    creds = os.path.join(d, "creds")
    subprocess.run(["bash", gen_tokens, creds], check=True, capture_output=True)
    tok = {r: os.path.join(creds, r + ".token") for r in ("admin", "server")}
    table = os.path.join(creds, "workers")
    lines = []
    for tenant, scope in (("a", "member-ref,member"), ("b", "member")):
        token = base64.b64encode(os.urandom(24)).decode()
        tok[tenant] = os.path.join(creds, "tenant-%s.token" % tenant)
        secret_file(tok[tenant], token + "\n")
        lines.append("%s %s" % (token, scope))
    secret_file(table, "\n".join(lines) + "\n")
    auth = ["--admin_token_file=" + tok["admin"], "--worker_token_file=" + table]
    ucx = [m for m in model if m.startswith("--ucx_tls")]
    reg, servers = start_cluster(args, d, auth, tok["server"], ucx[0])

    def train(job, attacked):
        out = os.path.join(d, job + ".npy")
        procs = [spawn([args.train, "--registry=" + reg, "--job=" + job, "--rank=%d" % r,
                        "--world=3", "--servers=2", "--log_every=100", "--token_file=" + tok["a"]] +
                       model + (["--out=" + out] if r == 0 else []),
                       os.path.join(d, "%s.rank%d.log" % (job, r))) for r in range(2)]
        targets = os.path.join(d, job + ".targets")
        member_log = os.path.join(d, "%s.rank2.log" % job)
        procs.append(spawn([args.attacker, "--mode=member", "--job=" + job, "--rank=2",
                            "--world=3", "--servers=2", "--registry=" + reg,
                            "--token_file=" + tok["a"], "--targets=" + targets,
                            "--attack_at=%d" % ATTACK_AT, "--buckets=2",
                            "--kinds=" + (MEMBER_KINDS if attacked else "")] + model, member_log))
        answer = None
        if attacked:
            info = wait_training(tools, reg, job, tok["admin"], min_step=ATTACK_AT)
            if check(info is not None, "%s is training, its member waiting at step %d"
                     % (job, ATTACK_AT)):
                n = write_targets(tools, reg, job, targets)
                check(n == (2, 3), "the registry lists 2 servers and 3 workers (%s)" % (n,))
                answer = tenants(args, tools, targets, tok)
        rcs = [p.wait(timeout=300) for p in procs]
        if attacked:
            member = parse(read(member_log))
            if check(member is not None, "the member reported its attack"):
                log("  member: sent %d frames (%d failed): %s; answers %d; RPCs refused %d/%d"
                    % (member["sent"], member["failed"], fmt(member["kinds"]), member["answers"],
                       member["rpcs"][0], member["rpcs"][1]))
                check(member["answers"] == 0, "no server or worker answered the member's "
                      "second endpoint (a replayed PULL got no PARAMS)")
                check(member["rpcs"][0] == member["rpcs"][1] > 0,
                      "every GetFrameKey for another rank, a rank outside the world and the "
                      "next epoch refused")
                answer = merge(answer, member)
        return out, rcs, answer

    ref, rcs, _ = train("member-ref", False)
    check(rcs == [0, 0, 0], "the reference trained, with the member as rank 2 (exit codes %s)"
          % rcs)
    got, rcs, answer = train("member", True)
    check(rcs == [0, 0, 0], "0 jobs killed: every rank of the attacked job exited 0 (%s)" % rcs)
    crashed = sum(p.poll() is not None for p in servers) + sum(rc < 0 for rc in rcs)
    check(crashed == 0, "0 crashes: both shard servers alive, no rank killed by a signal")
    same = (os.path.exists(ref) and os.path.exists(got) and
            open(ref, "rb").read() == open(got, "rb").read())
    check(same, "0 applied: the attacked job's final parameters are bitwise the reference's")
    info = describe(tools, reg, "member", tok["admin"]) or {}
    refused = info.get("refused_frames")
    kinds = answer["kinds"] if answer else {}
    to_servers = sum(kinds.get(k, 0) for k in ("other_rank", "replay_push", "replay_pull"))
    check(refused == to_servers > 0, "the servers refused every frame the member sent them "
          "(%s of %d)" % (refused, to_servers))
    server_logs = "".join(read(os.path.join(d, "server%d.log" % s)) for s in range(2))
    check("so this is a replay of captured bytes" in server_logs,
          "the servers dropped the member's replayed PUSH, part and PULL as replays")
    check("dropping an unauthenticated data-path frame" in server_logs,
          "the servers dropped the PUSH sealed by the member as other ranks (unauthenticated)")
    worker_logs = "".join(read(os.path.join(d, "member.rank%d.log" % r)) for r in range(2))
    check("dropping an unauthenticated data-path frame" in worker_logs,
          "the workers dropped the PARAMS and ERROR the member sealed with its own keys")
    tenant_frames = sum(kinds.get(k, 0) for k in ("tenant_init", "tenant_push", "tenant_pull"))
    stats = [victim_stats(tools, os.path.join(d, "member.targets"), v, tok) for v in VICTIMS]
    check(all(s[:2] == (False, 0) for s in stats) and sum(s[2] for s in stats) == tenant_frames > 0,
          "tenant A's %s untouched, every frame of tenant B's refused (initialized, step, refused: "
          "%s; %d sent)" % (" and ".join(VICTIMS), stats, tenant_frames))
    record("member", answer, refused, same, crashed, sum(rc != 0 for rc in rcs))


def fmt(kinds):
    return " ".join("%s=%d" % kv for kv in sorted(kinds.items()))


def merge(a, b):
    if a is None:
        return b
    if b is None:
        return a
    kinds = dict(a["kinds"])
    for k, n in b["kinds"].items():
        kinds[k] = kinds.get(k, 0) + n
    return {"sent": a["sent"] + b["sent"], "answers": a["answers"] + b["answers"],
            "kinds": kinds,
            "rpcs": [a["rpcs"][0] + b["rpcs"][0], a["rpcs"][1] + b["rpcs"][1]]}


def tenants(args, tools, targets, tok):
    """Tenant A makes its derived names; tenant B attacks them."""
    common = ["--targets=" + targets, "--victims=" + ",".join(VICTIMS), "--mesh=" + MESH,
              "--own=" + OWN, "--epoch=1"]
    r = Local.run([tools.attacker, "--mode=tenant_setup", "--token_file=" + tok["a"]] + common, 60)
    if not check(r.returncode == 0, "tenant A created %s and %s's key (%s)"
                 % (", ".join(VICTIMS), MESH, (r.stdout + r.stderr).strip()[-300:])):
        return None
    r = Local.run([tools.attacker, "--mode=tenant", "--token_file=" + tok["b"]] + common, 60)
    answer = parse(r.stdout)
    if not check(r.returncode == 0 and answer is not None,
                 "tenant B's attack ran (exit %d: %s)" % (r.returncode, r.stderr.strip()[-300:])):
        return None
    log("  tenant B: sent %d frames: %s; answers %d; RPCs refused %d/%d"
        % (answer["sent"], fmt(answer["kinds"]), answer["answers"], answer["rpcs"][0],
           answer["rpcs"][1]))
    check(answer["rpcs"][0] == answer["rpcs"][1] > 0,
          "every RPC of tenant B on tenant A's derived names refused (PERMISSION_DENIED)")
    check(answer["answers"] == 0, "no server answered tenant B's frames")
    return answer


def victim_stats(tools, targets, job, tok):
    """(initialized, step, frames refused) of a derived job over every shard,
    as its tenant reads it."""
    r = Local.run([tools.attacker, "--mode=tenant_stats", "--token_file=" + tok["a"],
                   "--targets=" + targets, "--victims=" + job], 30)
    m = re.search(r"initialized (\w+) step (\d+) refused (\d+)", r.stdout)
    return ((m.group(1) == "true", int(m.group(2)), int(m.group(3))) if m else
            (r.stderr.strip()[-200:], None, 0))
