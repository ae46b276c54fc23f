#!/usr/bin/env bash
# Mutual TLS and admin tokens, end to end with real binaries on loopback:
#
#  1. certificates from scripts/gen_certs.sh; registry and two shard servers
#     with mTLS and an admin token (registry: no anonymous reads)
#  2. a 2-worker tessel-train job with mTLS runs to completion
#  3. tesselctl with a client certificate and the token: members, jobs
#  4. refused, with exit code 5 and a message naming the flag: no client
#     certificate (plaintext), a certificate from an untrusted CA, a client
#     that does not trust the server's CA; a TLS client against a plaintext
#     registry; exit 2 for a missing key or a key that is not the cert's
#  5. a plaintext shard server cannot join the TLS registry
#  6. tokens: ListGroups without / with a wrong token; an admin RPC on a
#     shard server without the token (roles in depth: roles_test.sh)
#  7. bad certificate paths stop a server at start-up with a clear message
#  8. tessel-demo and tessel-hybrid-train --local (embedded registry,
#     LocalCluster) forward --tls_* to every process they start
set -uo pipefail
GEN="$1" REGISTRY="$2" SERVER="$3" TRAIN="$4" CTL="$5" DEMO="$6" HYBRID="$7"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/tls"
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
  out=$(timeout 60 "$@" 2>&1); rc=$?
  echo "\$ ${*##*/} -> exit $rc"; echo "$out" | sed 's/^/    /' | head -4
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc: $*"
  grep -qE -- "$pattern" <<<"$out" || fail "output does not match '$pattern': $*"
}

step "1. certificates, registry and servers with mTLS"
"$GEN" "$tmp/certs" || fail "gen_certs.sh failed"
"$GEN" "$tmp/certs" > "$tmp/gen2.txt" || fail "gen_certs.sh is not idempotent"
grep -q "wrote" "$tmp/gen2.txt" && fail "gen_certs.sh re-issued existing certificates"
c="$tmp/certs"
SERVER_TLS=(--tls_ca="$c/ca.crt" --tls_cert="$c/server.crt" --tls_key="$c/server.key")
CLIENT_TLS=(--tls_ca="$c/ca.crt" --tls_cert="$c/client.crt" --tls_key="$c/client.key")
(umask 077  # token files are secrets: owner-only, or every binary refuses them
  echo "tessel-test-admin-token-0123456789" > "$tmp/token"
  echo "not-the-admin-token-but-long-enough" > "$tmp/wrong-token")

"$REGISTRY" --listen=127.0.0.1:0 --port_file="$tmp/registry.port" --lease_ttl_ms=1500 \
  --admin_token_file="$tmp/token" --allow_anonymous_reads=false "${SERVER_TLS[@]}" \
  > "$tmp/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/registry.port" ] && break; sleep 0.1; done
REG="$(cat "$tmp/registry.port")"
[ -n "$REG" ] || fail "registry did not start"
grep -q "(mutual TLS)" "$tmp/registry.log" || fail "registry does not say it uses mutual TLS"
export TESSEL_REGISTRY="$REG"
for s in 0 1; do
  "$SERVER" --registry="$REG" --shard=$s --ucx_tls=posix,sysv,self --lease_ttl_ms=1500 \
    --admin_token_file="$tmp/token" "${SERVER_TLS[@]}" > "$tmp/server$s.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 200); do
  n=$("$CTL" members --group default -o json "${CLIENT_TLS[@]}" 2>/dev/null | grep -c '"role": "server"')
  [ "$n" -ge 2 ] && break
  sleep 0.05
done
[ "$n" -ge 2 ] || fail "the two TLS shard servers did not register"

step "2. a training job over mTLS"
ps=()
for r in 0 1; do
  timeout 120 "$TRAIN" --registry="$REG" --job=tls --rank=$r --world=2 --servers=2 --steps=40 \
    --layers=16,32,4 --samples=512 --batch=8 --lr=0.01 --ucx_tls=posix,sysv,self \
    --token_file="$tmp/token" --out="$tmp/final.npy" "${CLIENT_TLS[@]}" > "$tmp/train$r.log" 2>&1 &
  ps+=($!); pids+=($!)
done
for p in "${ps[@]}"; do wait "$p" || fail "a TLS worker failed"; done
[ -s "$tmp/final.npy" ] || fail "no final parameters written"
echo "trained 40 steps with 2 workers and 2 shard servers over mutual TLS"

step "3. tesselctl with a client certificate"
expect 0 "ROLE|server" "$CTL" members --token_file "$tmp/token" "${CLIENT_TLS[@]}"
expect 0 "default +[0-9]+ +server +1" "$CTL" members --token_file "$tmp/token" "${CLIENT_TLS[@]}"
expect 0 "tls +zero2" "$CTL" jobs "${CLIENT_TLS[@]}"
# The same through the environment variables.
TESSEL_TLS_CA="$c/ca.crt" TESSEL_TLS_CERT="$c/client.crt" TESSEL_TLS_KEY="$c/client.key" \
  expect 0 "tls +zero2" "$CTL" jobs

step "4. refused clients"
expect 5 "refused this client's certificate or its lack of one.*--tls_cert" "$CTL" jobs
expect 5 "refused this client's certificate" "$CTL" jobs \
  --tls_ca="$c/ca.crt" --tls_cert="$c/untrusted.crt" --tls_key="$c/untrusted.key"
expect 5 "TLS handshake failed: check that --tls_ca" "$CTL" jobs \
  --tls_ca="$c/untrusted-ca.crt" --tls_cert="$c/client.crt" --tls_key="$c/client.key"
expect 2 "missing --tls_key" "$CTL" jobs --tls_ca="$c/ca.crt" --tls_cert="$c/client.crt"
expect 2 "is not the key of the certificate" "$CTL" jobs \
  --tls_ca="$c/ca.crt" --tls_cert="$c/client.crt" --tls_key="$c/server.key"
expect 2 "cannot read --tls_ca file '/nonexistent/ca.crt'" "$CTL" jobs \
  --tls_ca=/nonexistent/ca.crt --tls_cert="$c/client.crt" --tls_key="$c/client.key"
# A TLS client against a plaintext registry.
"$REGISTRY" --insecure --listen=127.0.0.1:0 --port_file="$tmp/plain.port" > "$tmp/plain-registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/plain.port" ] && break; sleep 0.1; done
expect 5 "TLS handshake failed.*uses TLS at all" "$CTL" --registry "$(cat "$tmp/plain.port")" \
  members "${CLIENT_TLS[@]}"

step "5. a plaintext shard server cannot join the TLS registry"
expect 1 "joining registry at .*--tls_cert" "$SERVER" --insecure --registry="$REG" --shard=5 \
  --pool=intruders --ucx_tls=posix,sysv,self

step "6. admin tokens"
expect 5 "this registry requires an admin or reader credential for ListGroups" "$CTL" members \
  "${CLIENT_TLS[@]}"
expect 5 "the token is not valid for this registry" "$CTL" members \
  --token_file "$tmp/wrong-token" "${CLIENT_TLS[@]}"
expect 0 "default" "$CTL" members --group default "${CLIENT_TLS[@]}"  # member read: no token
expect 5 "this shard server requires an admin credential for DeleteCheckpoint" "$CTL" checkpoint \
  delete --job tls --step 1 "${CLIENT_TLS[@]}"

step "7. bad certificate paths at start-up"
expect 1 "cannot read --tls_ca file '/nonexistent/ca.crt'" "$REGISTRY" --listen=127.0.0.1:0 \
  --tls_ca=/nonexistent/ca.crt --tls_cert="$c/server.crt" --tls_key="$c/server.key"
expect 1 "--tls_cert file '$c/server.key' holds no PEM certificate" "$SERVER" \
  --registry="$REG" --shard=0 --tls_ca="$c/ca.crt" --tls_cert="$c/server.key" \
  --tls_key="$c/server.key"

step "8. launchers forward --tls_* to their servers and workers"
timeout 120 "$DEMO" --steps=20 --skip_reference "${SERVER_TLS[@]}" > "$tmp/demo.txt" 2>&1 ||
  { cat "$tmp/demo.txt"; fail "tessel-demo with mTLS failed"; }
grep -q "step    20/20" "$tmp/demo.txt" || fail "tessel-demo did not finish its steps"
run_dir=$(sed -n 's/.*logs in \([^ ]*\)$/\1/p' "$tmp/demo.txt")
for s in 0 1; do
  grep -q "(mutual TLS)" "$run_dir/server$s.log" || fail "demo's server $s did not use mutual TLS"
done
echo "tessel-demo: 20 steps, its shard servers serve mutual TLS"
timeout 120 "$HYBRID" --local --dp=2 --tp=2 --pp=1 --micro_batches=2 --steps=10 \
  --layers=16,32,32,4 --batch=8 "${SERVER_TLS[@]}" > "$tmp/hybrid.txt" 2>&1 ||
  { cat "$tmp/hybrid.txt"; fail "tessel-hybrid-train --local with mTLS failed"; }
grep -q "max relative difference vs the single-process hybrid reference: 0 " "$tmp/hybrid.txt" ||
  { cat "$tmp/hybrid.txt"; fail "hybrid over mTLS differs from its reference"; }
hybrid_dir=$(sed -n 's/.*logs in \([^ ]*\)$/\1/p' "$tmp/hybrid.txt" | head -1)
keyed=$(cat "$hybrid_dir"/*.log 2>/dev/null | grep -c "worker-to-worker messages authenticated")
[ "$keyed" -eq 4 ] ||
  { cat "$tmp/hybrid.txt"; fail "expected 4 processes to authenticate their mesh, found $keyed (logs: $hybrid_dir)"; }
if cat "$hybrid_dir"/*.log | grep -q "dropping an unauthenticated"; then
  fail "a hybrid process dropped a mesh message of its own job"
fi
echo "tessel-hybrid-train --local: 4 processes over mutual TLS, mesh messages authenticated, match the reference"

echo; echo "PASS"
