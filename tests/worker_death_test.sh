#!/usr/bin/env bash
# A worker dies (kill -9): the others do not hang until the step deadline.
# Its lease lapses, the job's membership epoch changes, and every surviving
# worker stops within a few seconds saying which rank is gone and what to do.
set -uo pipefail
REGISTRY="$1" SERVER="$2" TRAIN="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/worker-death"
rm -rf "$tmp"; mkdir -p "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }

"$REGISTRY" --listen=127.0.0.1:0 --port_file="$tmp/port" --lease_ttl_ms=1500 > "$tmp/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
REG="$(cat "$tmp/port")"
"$SERVER" --registry="$REG" --shard=0 --ucx_tls=posix,sysv,self --lease_ttl_ms=1500 > "$tmp/server.log" 2>&1 &
pids+=($!)
sleep 0.5
for r in 0 1 2; do
  "$TRAIN" --registry="$REG" --rank=$r --world=3 --servers=1 --steps=100000000 --log_every=200 \
    --layers=16,32,4 --samples=512 --batch=8 --lr=0.01 --ucx_tls=posix,sysv,self \
    --step_timeout_s=120 > "$tmp/worker$r.log" 2>&1 &
  eval "w$r=$!"
  pids+=($!)
done
for _ in $(seq 200); do grep -q "step " "$tmp/worker0.log" && break; sleep 0.05; done
grep -q "step " "$tmp/worker0.log" || fail "training did not start"
start=$(date +%s.%N)
kill -9 "$w1"
for r in 0 2; do
  eval "p=\$w$r"
  timeout 30 tail --pid="$p" -f /dev/null
  wait "$p"; rc=$?
  [ $rc -ne 0 ] || fail "worker $r should stop with an error"
  # The survivor that stops second may also see the first one gone ("1, 2").
  grep -qE "worker rank\(s\) (1|0, 1|1, 2) left the job or stopped heartbeating" "$tmp/worker$r.log" ||
    fail "worker $r does not name the dead rank"
done
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "survivors stopped $elapsed s after the kill (worker lease ttl 3 s; step deadline 120 s)"
tail -1 "$tmp/worker0.log"
awk -v e="$elapsed" 'BEGIN { exit !(e < 15) }' || fail "took $elapsed s: the wait did not end at the membership change"
echo PASS
