# Sourced by the examples' tests: a registry and two shard servers on loopback
# for a test of its own, and everything it starts killed on exit.
#
#   source "$(dirname "$0")/test_cluster.sh"
#   start_cluster NAME REGISTRY_BIN SERVER_BIN   # sets tmp (logs) and REG (host:port)
#   some_worker --registry="$REG" ... > "$tmp/w.log" 2>&1 & pids+=($!)
#   fail "why"                                     # prints each log's tail, exits 1
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; grep -v "UCX  WARN" "$f" | tail -5; done; exit 1; }

start_cluster() {
  local name=$1 registry=$2 server=$3
  tmp="${TEST_TMPDIR:-$(mktemp -d)}/$name"
  rm -rf "$tmp"; mkdir -p "$tmp"
  "$registry" --insecure --listen=127.0.0.1:0 --port_file="$tmp/port" > "$tmp/registry.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || fail "the registry did not start"
  REG="$(cat "$tmp/port")"
  for s in 0 1; do
    "$server" --insecure --registry="$REG" --shard=$s --ucx_tls=posix,sysv,self > "$tmp/server$s.log" 2>&1 &
    pids+=($!)
  done
}
