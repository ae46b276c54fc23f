#!/usr/bin/env bash
# tessel-registry --backend=etcd over TLS with real processes: a real etcd on
# loopback serving only https client URLs and requiring client certificates
# (--client-cert-auth), certificates from scripts/gen_certs.sh.
#
#  1. refused at start-up, clearly and within --etcd_timeout_ms: a registry
#     without --etcd_tls_* (plaintext to a TLS etcd), one that does not trust
#     etcd's CA, one whose client certificate etcd does not trust, one with no
#     client certificate at all
#  2. misuse is exit 2 with a message naming the flag: cert without key,
#     http:// with --etcd_tls_ca, mixed schemes, --etcd_tls_* without
#     --backend=etcd, an unreadable CA file
#  3. over TLS (https:// endpoint): two shard servers register, etcdctl with
#     the certificates sees both member keys and the epoch record
#  4. the registry is killed and restarted with host:port and --etcd_tls_ca
#     (TLS without a scheme): members stay, their leases are renewed through it
set -uo pipefail
GEN="$1" REGISTRY="$2" SERVER="$3"
if [ ! -x /usr/bin/etcd ]; then
  echo "SKIP: /usr/bin/etcd not found: install etcd-server (scripts/install_deps.sh does)"
  exit 0
fi
command -v etcdctl > /dev/null || { echo "FAIL: etcdctl not found: install etcd-client (scripts/install_deps.sh does)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}/registry-etcd-tls"
rm -rf "$tmp"; mkdir -p "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; cp "$tmp"/*.log "${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp}/" 2>/dev/null; rm -rf "$tmp/etcd"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -8 "$f"; done; exit 1; }
step() { echo; echo "== $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

step "certificates and a TLS-only etcd with --client-cert-auth"
"$GEN" "$tmp/certs" > /dev/null || fail "gen_certs.sh failed"
C="$tmp/certs"
cport=$(free_port); pport=$(free_port)
ETCD="127.0.0.1:$cport"
# Only the client URL is TLS (the peer URL of this one-member cluster is unused).
# server.crt names 127.0.0.1 and carries serverAuth (and clientAuth).
/usr/bin/etcd --name=t --data-dir="$tmp/etcd" --listen-client-urls="https://$ETCD" \
  --advertise-client-urls="https://$ETCD" --listen-peer-urls="http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls="http://127.0.0.1:$pport" \
  --initial-cluster="t=http://127.0.0.1:$pport" \
  --cert-file="$C/server.crt" --key-file="$C/server.key" --trusted-ca-file="$C/ca.crt" \
  --client-cert-auth --log-level=warn --logger=zap > "$tmp/etcd.log" 2>&1 &
pids+=($!)
ctl() {
  ETCDCTL_API=3 etcdctl --endpoints="https://$ETCD" --cacert="$C/ca.crt" --cert="$C/client.crt" \
    --key="$C/client.key" --command-timeout=2s "$@"
}
for _ in $(seq 100); do ctl endpoint health > /dev/null 2>&1 && break; sleep 0.1; done
ctl endpoint health > /dev/null 2>&1 || fail "etcd did not start with TLS"
ETCDCTL_API=3 etcdctl --endpoints="http://$ETCD" --command-timeout=2s endpoint health > /dev/null 2>&1 &&
  fail "etcd answers plaintext: the test setup is not TLS-only"
epoch() { ctl get /tessel/groups/default/epoch --print-value-only; }
members() { ctl get /tessel/groups/default/members/ --prefix --keys-only | grep -c members/; }

# expect CODE PATTERN ARGS...: the registry with ARGS exits CODE (within
# --etcd_timeout_ms=2000 plus start-up, bounded by `timeout`) and its output
# matches PATTERN.
expect() {
  local want=$1 pattern=$2; shift 2
  local out rc t
  t=$(now)
  out=$(timeout 30 "$REGISTRY" --insecure --listen=127.0.0.1:0 --etcd_timeout_ms=2000 \
    --health_check_period_ms=0 "$@" 2>&1); rc=$?
  local took; took=$(since "$t")
  out=$(grep -v '^E[0-9]' <<<"$out")  # gRPC's own handshake log lines
  echo "\$ tessel-registry ${*//$C\//} -> exit $rc in ${took} s"; echo "$out" | sed 's/^/    /' | head -3
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc: $*"
  grep -qE -- "$pattern" <<<"$out" || fail "output does not match '$pattern': $*"
  awk -v t="$took" 'BEGIN { exit !(t < 8) }' || fail "took ${took} s, more than 8 s with a 2 s etcd timeout: $*"
}
CA="--etcd_tls_ca=$C/ca.crt"
PAIR=("--etcd_tls_cert=$C/client.crt" "--etcd_tls_key=$C/client.key")

step "1. refused at start-up"
# Plaintext gRPC to a TLS port: etcd closes the connection.
expect 1 "cannot reach etcd at $ETCD within 2s .*if etcd serves TLS.*--etcd_tls_ca" \
  --backend=etcd --etcd_endpoints="$ETCD"
# The registry does not trust etcd's certificate.
expect 1 "cannot reach etcd at $ETCD \(TLS\).*certificate verify failed.*--etcd_tls_ca is the CA" \
  --backend=etcd --etcd_endpoints="https://$ETCD" --etcd_tls_ca="$C/untrusted-ca.crt" "${PAIR[@]}"
# etcd does not trust the registry's certificate, or gets none.
expect 1 "cannot reach etcd at $ETCD \(TLS\).*--etcd_tls_cert/--etcd_tls_key are a pair issued by the CA in etcd's --trusted-ca-file" \
  --backend=etcd --etcd_endpoints="https://$ETCD" "$CA" \
  --etcd_tls_cert="$C/untrusted.crt" --etcd_tls_key="$C/untrusted.key"
expect 1 "cannot reach etcd at $ETCD \(TLS\).*--client-cert-auth" \
  --backend=etcd --etcd_endpoints="https://$ETCD" "$CA"

step "2. misuse: exit 2"
expect 2 "--etcd_tls_cert and --etcd_tls_key go together.*missing --etcd_tls_key" \
  --backend=etcd --etcd_endpoints="https://$ETCD" "$CA" --etcd_tls_cert="$C/client.crt"
expect 2 "etcd endpoint http://$ETCD is plaintext, but TLS credentials" \
  --backend=etcd --etcd_endpoints="http://$ETCD" "$CA" "${PAIR[@]}"
expect 2 "etcd endpoints mix plaintext" \
  --backend=etcd --etcd_endpoints="http://$ETCD,https://$ETCD"
expect 2 "need --backend=etcd" "$CA" "${PAIR[@]}"
expect 2 "cannot read --etcd_tls_ca file '$C/nope.crt'" \
  --backend=etcd --etcd_endpoints="https://$ETCD" --etcd_tls_ca="$C/nope.crt"
expect 2 "--etcd_tls_key file '$C/server.key' is not the key of the certificate in --etcd_tls_cert" \
  --backend=etcd --etcd_endpoints="https://$ETCD" "$CA" --etcd_tls_cert="$C/client.crt" \
  --etcd_tls_key="$C/server.key"

step "3. registry over TLS to etcd, two shard servers"
start_registry() {  # $1 = listen address, then the etcd flags
  local listen=$1; shift
  rm -f "$tmp/port"
  "$REGISTRY" --insecure --backend=etcd --listen="$listen" --port_file="$tmp/port" --lease_ttl_ms=2000 \
    --health_check_period_ms=0 --etcd_timeout_ms=2000 "$@" >> "$tmp/registry.log" 2>&1 &
  reg_pid=$!
  pids+=($reg_pid)
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || fail "registry did not start"
}
start_registry 127.0.0.1:0 --etcd_endpoints="https://$ETCD" "$CA" "${PAIR[@]}"
REG="$(cat "$tmp/port")"
grep -q "membership in etcd at https://$ETCD over TLS" "$tmp/registry.log" ||
  fail "registry does not log that it reaches etcd over TLS"
for s in 0 1; do
  "$SERVER" --insecure --registry="$REG" --shard=$s --ucx_tls=posix,sysv,self --lease_ttl_ms=2000 \
    > "$tmp/server$s.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 200); do [ "$(members)" = 2 ] && break; sleep 0.05; done
[ "$(members)" = 2 ] || fail "servers did not register (etcdctl sees $(members) member keys)"
[ "$(epoch)" = "2 2" ] || fail "epoch record is '$(epoch)', expected '2 2'"
ctl get /tessel/groups/default/members/ --prefix --keys-only | grep members/ | sed 's/^/    etcdctl: /'

step "4. restart the registry with host:port and --etcd_tls_ca (TLS without a scheme)"
kill -9 "$reg_pid"
t=$(now)
start_registry "$REG" --etcd_endpoints="$ETCD" "$CA" "${PAIR[@]}"
echo "registry restarted in $(since "$t") s"
sleep 3  # > lease ttl: only heartbeats through the new registry keep the servers in
[ "$(members)" = 2 ] || fail "members lost across the registry restart"
[ "$(epoch)" = "2 2" ] || fail "epoch moved across the restart: '$(epoch)'"
grep -q "no longer knows lease" "$tmp"/server*.log && fail "a server lost its lease"
echo PASS
