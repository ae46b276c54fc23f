#!/usr/bin/env bash
# tessel-registry --backend=etcd with real processes: a real etcd on loopback,
# two shard servers. The registry is killed (-9) and restarted on the same
# port: members stay, their leases keep being renewed through the new
# registry, the epoch does not move. Then a server is killed (-9):
# its lease lapses, the registry bumps the epoch, and we time it (health
# checks are off here, so that this is the lease path; see
# registry/health_checker_test for eviction by health checks).
set -uo pipefail
REGISTRY="$1" SERVER="$2"
if [ ! -x /usr/bin/etcd ]; then
  echo "SKIP: /usr/bin/etcd not found: install etcd-server (scripts/install_deps.sh does)"
  exit 0
fi
command -v etcdctl > /dev/null || { echo "FAIL: etcdctl not found: install etcd-client (scripts/install_deps.sh does)"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}/registry-etcd"
rm -rf "$tmp"; mkdir -p "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; cp "$tmp"/*.log "${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp}/" 2>/dev/null; rm -rf "$tmp/etcd"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -8 "$f"; done; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

cport=$(free_port); pport=$(free_port)
ETCD="127.0.0.1:$cport"
# etcd's default timing (100 ms heartbeat, 1 s election): minimum lease 2 s.
/usr/bin/etcd --name=t --data-dir="$tmp/etcd" --listen-client-urls="http://$ETCD" \
  --advertise-client-urls="http://$ETCD" --listen-peer-urls="http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls="http://127.0.0.1:$pport" \
  --initial-cluster="t=http://127.0.0.1:$pport" --log-level=warn --logger=zap > "$tmp/etcd.log" 2>&1 &
pids+=($!)
ctl() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD" --command-timeout=2s "$@"; }
for _ in $(seq 100); do ctl endpoint health > /dev/null 2>&1 && break; sleep 0.1; done
ctl endpoint health > /dev/null 2>&1 || fail "etcd did not start"
epoch() { ctl get /tessel/groups/default/epoch --print-value-only; }
members() { ctl get /tessel/groups/default/members/ --prefix --keys-only | grep -c members/; }

start_registry() {  # $1 = listen address
  rm -f "$tmp/port"
  "$REGISTRY" --insecure --backend=etcd --etcd_endpoints="$ETCD" --listen="$1" --port_file="$tmp/port" \
    --lease_ttl_ms=2000 --health_check_period_ms=0 >> "$tmp/registry.log" 2>&1 &
  reg_pid=$!
  pids+=($reg_pid)
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || fail "registry did not start"
}
start_registry 127.0.0.1:0
REG="$(cat "$tmp/port")"
for s in 0 1; do
  "$SERVER" --insecure --registry="$REG" --shard=$s --ucx_tls=posix,sysv,self --lease_ttl_ms=2000 \
    > "$tmp/server$s.log" 2>&1 &
  eval "s$s=$!"
  pids+=($!)
done
for _ in $(seq 200); do [ "$(members)" = 2 ] && break; sleep 0.05; done
[ "$(members)" = 2 ] || fail "servers did not register"
[ "$(epoch)" = "2 2" ] || fail "epoch record is '$(epoch)', expected '2 2'"

kill -9 "$reg_pid"
t=$(now)
start_registry "$REG"
echo "registry restarted in $(since "$t") s"
sleep 3  # > lease ttl: only heartbeats through the new registry keep the servers in
[ "$(members)" = 2 ] || fail "members lost across the registry restart"
[ "$(epoch)" = "2 2" ] || fail "epoch moved across the restart: '$(epoch)'"
grep -q "no longer knows lease" "$tmp"/server*.log && fail "a server lost its lease"

kill -9 "$s1"
t=$(now)
for _ in $(seq 200); do [ "$(epoch)" = "3 1" ] && break; sleep 0.05; done
[ "$(epoch)" = "3 1" ] || fail "killed server not removed: epoch record '$(epoch)'"
echo "killed server removed, epoch 2 -> 3, $(since "$t") s after kill -9 (lease ttl 2 s)"
[ "$(members)" = 1 ] || fail "expected 1 member"
echo PASS
