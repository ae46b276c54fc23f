#!/usr/bin/env bash
# Roles (docs/operations.md, "Roles and credentials") end to end with real
# binaries on loopback: least privilege for workers, by token and by
# certificate identity.
#
#  A. tokens (plaintext): a registry and two shard servers with an admin
#     token, worker tokens (one any-job, one scoped to job 'ra') and a server
#     token (the registry's --server_token_file, tessel-server --token_file)
#     1. a shard server without the server token cannot join
#     2. two workers train job 'rt' with the worker token (checkpoints)
#     3. the job-scoped worker token trains job 'ra' but cannot create 'rb'
#     4. tesselctl with the worker token lists checkpoints but cannot delete
#        one (exit 5, message naming the admin credential); ReadState
#        without a credential is refused even though reads are anonymous;
#        WriteState behind the latest checkpoint (a rewind) needs the admin
#        token; a job named 'ra.g1' that another tenant (a token scoped to
#        'ra.g1') trained is out of reach of the token scoped to 'ra'
#     5. servers restarted: tesselctl with the worker token cannot restore an
#        older checkpoint (an operator's rewind); with the admin token it
#        can; the workers (worker token) join that rewind with --resume
#        --resume_step and end bitwise where the first run ended; a worker
#        cannot rewind a running job itself; the admin deletes a checkpoint
#  B. mutual TLS with role certificates and --cert_roles, no tokens:
#     6. a shard server with a certificate without a role cannot join
#     7. workers with the worker certificate train; a worker certificate
#        scoped to job 'ca' cannot create job 'cb'
#     8. tesselctl with the worker certificate cannot delete a checkpoint,
#        with the admin certificate it can; ReadState with a certificate
#        without a role is refused, with the worker certificate it passes
set -uo pipefail
GEN="$1" REGISTRY="$2" SERVER="$3" TRAIN="$4" CTL="$5" PROBE="$6"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/roles"
rm -rf "$tmp"; mkdir -p "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }
step() { echo; echo "== $*"; }
# expect CODE PATTERN CMD...: CMD exits CODE and its stderr+stdout match PATTERN.
expect() {
  local want=$1 pattern=$2; shift 2
  local out rc
  out=$(timeout 120 "$@" 2>&1); rc=$?
  echo "\$ ${*##*/} -> exit $rc"; echo "$out" | sed 's/^/    /' | tail -4
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc: $*"
  grep -qE -- "$pattern" <<<"$out" || fail "output does not match '$pattern': $*"
}
start_registry() {  # name flags...
  local name=$1; shift
  "$REGISTRY" --listen=127.0.0.1:0 --port_file="$tmp/$name.port" --lease_ttl_ms=1500 "$@" \
    > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$tmp/$name.port" ] && break; sleep 0.1; done
  [ -s "$tmp/$name.port" ] || fail "registry $name did not start"
}
declare -A server_pid
start_server() {  # name shard flags...
  local name=$1 shard=$2; shift 2
  "$SERVER" --shard="$shard" --ucx_tls=posix,sysv,self --lease_ttl_ms=1500 "$@" \
    > "$tmp/$name-$shard.log" 2>&1 &
  server_pid[$name/$shard]=$!
  pids+=($!)
}
wait_servers() {  # count ctl-flags...
  local want=$1 n=0; shift
  for _ in $(seq 200); do
    n=$("$CTL" members --group default -o json "$@" 2>/dev/null | grep -c '"role": "server"')
    [ "$n" -ge "$want" ] && return 0
    sleep 0.05
  done
  fail "$want shard servers did not register (saw $n)"
}
MODEL=(--layers=16,32,4 --samples=512 --batch=8 --optimizer=adam --lr=0.01
  --ucx_tls=posix,sysv,self --log_every=1000000)
train() {  # job world steps out flags...: every rank in the background, waits for all
  local job=$1 world=$2 steps=$3 out=$4; shift 4
  local ps=() rc=0
  for r in $(seq 0 $((world - 1))); do
    timeout 120 "$TRAIN" --registry="$TESSEL_REGISTRY" --job="$job" --rank=$r --world=$world --servers=2 --steps="$steps" \
      --out="$out" "${MODEL[@]}" "$@" > "$tmp/train-$job-$r.log" 2>&1 &
    ps+=($!); pids+=($!)
  done
  for p in "${ps[@]}"; do wait "$p" || rc=1; done
  return $rc
}
grpc_of_shard0() {  # ctl-flags...: the gRPC address shard 0 registered
  "$CTL" members --group default -o json "$@" | python3 -c '
import json, sys
for v in json.load(sys.stdin):
    for m in v.get("members", []):
        if m.get("role") == "server" and int(m.get("rank", 0)) == 0:
            print(m["grpcAddress"] if "grpcAddress" in m else m["grpc_address"])'
}

"$GEN" "$tmp/certs" ca > "$tmp/gen.txt" || fail "gen_certs.sh failed"
c="$tmp/certs"
for f in admin worker reader server-role worker-ca; do
  [ -s "$c/$f.crt" ] && [ -s "$c/$f.key" ] || fail "gen_certs.sh did not issue $f"
done
openssl x509 -in "$c/worker-ca.crt" -noout -subject | grep -q "O = tessel:worker, CN = worker:ca" ||
  fail "worker-ca.crt does not carry O=tessel:worker, CN=worker:ca"

umask 077  # token files are secrets: owner-only, or every binary refuses them
echo "tessel-roles-admin-token-0123456" > "$tmp/admin.token"
echo "tessel-roles-worker-token-012345" > "$tmp/worker.token"
echo "tessel-roles-worker-token-job-ra" > "$tmp/worker-ra.token"
echo "tessel-roles-worker-token-ra.g1-" > "$tmp/worker-rag1.token"
echo "tessel-roles-server-token-012345" > "$tmp/server.token"
{
  echo "# worker tokens: any job, then one for job ra only"
  cat "$tmp/worker.token"
  echo "$(cat "$tmp/worker-ra.token") ra"
  echo "$(cat "$tmp/worker-rag1.token") ra.g1"
} > "$tmp/workers.tokens"
ADMIN=(--token_file="$tmp/admin.token")
WORKER=(--token_file="$tmp/worker.token")

step "A1. tokens: registry and shard servers; a server without the server token cannot join"
start_registry reg-a --admin_token_file="$tmp/admin.token" \
  --worker_token_file="$tmp/workers.tokens" --server_token_file="$tmp/server.token" \
  --allow_anonymous_reads=false
export TESSEL_REGISTRY="$(cat "$tmp/reg-a.port")"
ckdir="$tmp/checkpoints-a"
SERVER_A=(--registry="$TESSEL_REGISTRY" --checkpoint_dir="$ckdir"
  --admin_token_file="$tmp/admin.token" --worker_token_file="$tmp/workers.tokens"
  --token_file="$tmp/server.token")
expect 1 "this registry requires an admin or server credential for Join/SERVER" \
  "$SERVER" --insecure --registry="$TESSEL_REGISTRY" --shard=0 --pool=intruders \
  --ucx_tls=posix,sysv,self
start_server a 0 "${SERVER_A[@]}"
start_server a 1 "${SERVER_A[@]}"
wait_servers 2 "${WORKER[@]}"
grep -q "the worker token must\|same token" "$tmp/a-0.log" && fail "token files misread"

step "A2. two workers train job 'rt' with the worker token"
train rt 2 40 "$tmp/rt40.npy" "${WORKER[@]}" --checkpoint_every_steps=10 --checkpoint_initial \
  --keep_checkpoints=10 || fail "training with the worker token failed"
[ -s "$tmp/rt40.npy" ] || fail "no final parameters"
for _ in $(seq 100); do "$CTL" checkpoint list --job rt "${WORKER[@]}" | grep -q '^40 ' && break; sleep 0.1; done
expect 0 "^40 " "$CTL" checkpoint list --job rt "${WORKER[@]}"
ckpt_done=$(date +%s)

step "A3. a worker token scoped to job 'ra' trains 'ra' but cannot create 'rb'"
train ra 1 5 "$tmp/ra.npy" --token_file="$tmp/worker-ra.token" || fail "scoped worker on its job"
train rb 1 5 "$tmp/rb.npy" --token_file="$tmp/worker-ra.token" && fail "scoped worker created 'rb'"
grep -q "the worker credential for job 'ra' (token) may not act on job 'rb'" "$tmp/train-rb-0.log" ||
  fail "the refusal of job 'rb' does not say why: $(tail -3 "$tmp/train-rb-0.log")"
echo "refused: $(grep -o "this registry refuses.*" "$tmp/train-rb-0.log" | head -1)"

step "A4. what the worker token may not do"
expect 5 "the worker credential \(token\) may not delete checkpoints \(an admin credential may: tesselctl --token_file=" \
  "$CTL" checkpoint delete --job rt --step 10 "${WORKER[@]}"
addr=$(grpc_of_shard0 "${WORKER[@]}")
[ -n "$addr" ] || fail "no gRPC address for shard 0"
expect 0 "OK" "$PROBE" --address="$addr" --rpc=GetStats --job=rt  # anonymous stats: allowed...
expect 5 "this shard server requires an admin or worker credential for ReadState" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=rt  # ...ReadState never
expect 1 "FAILED_PRECONDITION|INVALID_ARGUMENT|OUT_OF_RANGE" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=rt "${WORKER[@]}"  # past the check
expect 5 "the worker credential for job 'ra' \(token\) may not act on job 'rt'" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=rt --token_file="$tmp/worker-ra.token"
# tessel.torch's second parameter group "ra.g1" is within the scope of 'ra':
# the call passes the check (and finds no such job on this server).
expect 1 "NOT_FOUND: .*no job 'ra.g1'" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ra.g1 --token_file="$tmp/worker-ra.token"
# A rewind behind the latest checkpoint is the operator's: WriteState of
# step 10 into 'rt' (at step 40, checkpoint 40 complete).
expect 5 "the worker credential \(token\) may not write step 10 into job 'rt' \(at step 40\): the latest complete checkpoint is step 40.*an admin credential may" \
  "$PROBE" --address="$addr" --rpc=WriteState --job=rt --step=10 "${WORKER[@]}"
expect 0 "OK" "$PROBE" --address="$addr" --rpc=WriteState --job=rt --step=10 "${ADMIN[@]}"
expect 0 "OK" "$PROBE" --address="$addr" --rpc=WriteState --job=rt --step=40 "${WORKER[@]}"
# Another tenant's job that happens to be named 'ra.g1' (its token scoped to
# 'ra.g1'): not the 'ra' token's, although 'ra.g1' derives from 'ra'.
train ra.g1 1 5 "$tmp/rag1.npy" --token_file="$tmp/worker-rag1.token" || fail "tenant 'ra.g1' on its job"
expect 5 "the worker credential for job 'ra' \(token\) reaches a name derived from its job only where that credential created it, and job 'ra.g1' was created by another credential" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ra.g1 --token_file="$tmp/worker-ra.token"
expect 1 "FAILED_PRECONDITION|INVALID_ARGUMENT|OUT_OF_RANGE" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ra.g1 --token_file="$tmp/worker-rag1.token"
expect 5 "the worker credential \(token\) may not list every group \(an admin or reader credential may\)" \
  "$CTL" members "${WORKER[@]}"
expect 0 "default +[0-9]+ +server +1" "$CTL" members "${ADMIN[@]}"

step "A5. rewinding is the operator's: servers restarted, restore an older checkpoint"
for s in 0 1; do kill "${server_pid[a/$s]}"; wait "${server_pid[a/$s]}" 2>/dev/null; done
start_server a 0 "${SERVER_A[@]}"
start_server a 1 "${SERVER_A[@]}"
wait_servers 2 "${WORKER[@]}"
# Checkpoints completed in the last 10 s do not count as newer (the shard
# service's kRecentCheckpointGrace): let step 40's settle.
while [ $(( $(date +%s) - ckpt_done )) -le 11 ]; do sleep 0.5; done
expect 5 "the worker credential \(token\) may not restore the checkpoint of step 20 of job 'rt': the latest complete checkpoint is step 40.*tesselctl checkpoint restore --job rt --step 20" \
  "$CTL" checkpoint restore --job rt --step 20 "${WORKER[@]}"
expect 0 "restored at step 20" "$CTL" checkpoint restore --job rt --step 20 "${ADMIN[@]}"
train rt 2 40 "$tmp/rt40-rewound.npy" "${WORKER[@]}" --resume --resume_step=20 \
  --checkpoint_every_steps=10 --keep_checkpoints=10 || fail "workers could not join the rewind"
cmp -s "$tmp/rt40.npy" "$tmp/rt40-rewound.npy" || fail "rewound run differs from the first run"
echo "identical: 40 steps == rewind to 20 + 20 steps (worker token)"
t0=$(date +%s)
train rt 2 45 "$tmp/rt45.npy" "${WORKER[@]}" --resume --resume_step=10 --recovery_timeout_s=10 &&
  fail "a worker rewound a running job to step 10"
grep -h "may not restore the checkpoint of step 10 of job 'rt'" "$tmp"/train-rt-*.log | head -1 |
  grep . || fail "the worker's rewind refusal does not say why"
echo "refused in $(( $(date +%s) - t0 )) s"
expect 0 "deleted checkpoint of job 'rt' at step 10" \
  "$CTL" checkpoint delete --job rt --step 10 "${ADMIN[@]}"
for s in 0 1; do kill "${server_pid[a/$s]}"; done
unset TESSEL_REGISTRY

step "B6. mutual TLS with role certificates (--cert_roles, no tokens)"
TLS_SERVER=(--tls_ca="$c/ca.crt" --tls_cert="$c/server-role.crt" --tls_key="$c/server-role.key")
tls() { echo --tls_ca="$c/ca.crt" --tls_cert="$c/$1.crt" --tls_key="$c/$1.key"; }
start_registry reg-b --cert_roles "${TLS_SERVER[@]}"
export TESSEL_REGISTRY="$(cat "$tmp/reg-b.port")"
SERVER_B=(--registry="$TESSEL_REGISTRY" --checkpoint_dir="$tmp/checkpoints-b" --cert_roles
  "${TLS_SERVER[@]}")
expect 1 "this registry requires an admin or server credential for Join/SERVER" \
  "$SERVER" --registry="$TESSEL_REGISTRY" --shard=0 --pool=intruders --ucx_tls=posix,sysv,self \
  --cert_roles --tls_ca="$c/ca.crt" --tls_cert="$c/server.crt" --tls_key="$c/server.key"
expect 1 "--cert_roles takes roles from client certificates and needs mutual TLS" \
  "$SERVER" --registry="$TESSEL_REGISTRY" --shard=0 --cert_roles
start_server b 0 "${SERVER_B[@]}"
start_server b 1 "${SERVER_B[@]}"
wait_servers 2 $(tls worker)

step "B7. workers train with the worker certificate; a job-scoped one stays in its job"
train ct 2 20 "$tmp/ct.npy" $(tls worker) --checkpoint_every_steps=10 --keep_checkpoints=5 ||
  fail "training with the worker certificate failed"
train ca 1 5 "$tmp/ca.npy" $(tls worker-ca) || fail "scoped worker certificate on its job"
train cb 1 5 "$tmp/cb.npy" $(tls worker-ca) && fail "a worker certificate for 'ca' created 'cb'"
grep -q "the worker credential for job 'ca' (certificate CN=worker:ca, O=tessel:worker) may not act on job 'cb'" \
  "$tmp/train-cb-0.log" || fail "the refusal of job 'cb' does not say why: $(tail -3 "$tmp/train-cb-0.log")"
for _ in $(seq 100); do "$CTL" checkpoint list --job ct $(tls worker) | grep -q '^20 ' && break; sleep 0.1; done

step "B8. tesselctl: the worker certificate cannot delete a checkpoint, the admin certificate can"
expect 5 "the worker credential \(certificate CN=tessel-worker, O=tessel:worker\) may not delete checkpoints" \
  "$CTL" checkpoint delete --job ct --step 10 $(tls worker)
expect 0 "deleted checkpoint of job 'ct' at step 10" \
  "$CTL" checkpoint delete --job ct --step 10 $(tls admin)
expect 5 "this registry requires .*credential for GetView" "$CTL" jobs $(tls client)
expect 0 "ct" "$CTL" jobs $(tls reader)
addr=$(grpc_of_shard0 $(tls admin))
[ -n "$addr" ] || fail "no gRPC address for shard 0"
expect 5 "this shard server requires an admin or worker credential for ReadState" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ct $(tls client)
expect 5 "the reader credential .* may not read this job's state" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ct $(tls reader)
expect 1 "FAILED_PRECONDITION|INVALID_ARGUMENT|OUT_OF_RANGE" \
  "$PROBE" --address="$addr" --rpc=ReadState --job=ct $(tls worker)

echo; echo "PASS"
