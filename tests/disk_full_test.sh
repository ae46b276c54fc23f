#!/usr/bin/env bash
# A full disk under checkpoints (issue 31), with real binaries on loopback:
# the checkpoint directory is a 1 MiB tmpfs with room for one checkpoint of
# the model, so the first (step 10) is written and every later one fails
# with "No space left on device". Checks:
#   - training goes on to the end (both workers exit 0, the same parameters
#     as the same run with a roomy disk);
#   - no partial checkpoint is left: the only step directory is step 10's,
#     complete (no shard files of failed steps, no temporary files), and
#     `tesselctl checkpoint list` shows step 10 only;
#   - a slow disk (--checkpoint_write_delay_ms) paces training and every
#     checkpoint still completes;
#   - tesselctl says since which step checkpoints fail, and why; the
#     servers' metrics say it too (tessel_checkpoint_failing_since_step),
#     and the registry's status page (status.json),
#     and so does rank 0's log (--checkpoint_report_s=0: it asks at every
#     step here).
# Needs root (mount); cleans up its processes and the mount.
set -uo pipefail
REGISTRY="$1" SERVER="$2" TRAIN="$3" CTL="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/disk-full"
rm -rf "$tmp"; mkdir -p "$tmp/small" "$tmp/roomy"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  umount "$tmp/small" 2>/dev/null
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
step() { echo; echo "== $*"; }

if ! mount -t tmpfs -o size=1m tmpfs "$tmp/small" 2>"$tmp/mount.err"; then
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: mounting a tmpfs needs root"; exit 0; fi
  fail "cannot mount a tmpfs: $(cat "$tmp/mount.err")"
fi
# Leave room for one checkpoint of the model below (~230 KB: 19,210 Adam
# parameters x 3 floats, in two shard files) but not two.
dd if=/dev/zero of="$tmp/small/filler" bs=4k count=170 status=none || fail "cannot fill"
df -k "$tmp/small" | tail -1

"$REGISTRY" --insecure --listen=127.0.0.1:0 --port_file="$tmp/registry.port" --lease_ttl_ms=1500 \
  --metrics_address=127.0.0.1:0 > "$tmp/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/registry.port" ] && break; sleep 0.1; done
REG="$(cat "$tmp/registry.port")"
[ -n "$REG" ] || fail "registry did not start"
export TESSEL_REGISTRY="$REG"

start_server() {  # pool shard checkpoint_dir [extra flags]
  local pool=$1 shard=$2 dir=$3; shift 3
  "$SERVER" --insecure --registry="$REG" --pool="$pool" --shard="$shard" --ucx_tls=posix,sysv,self \
    --checkpoint_dir="$dir" --lease_ttl_ms=1500 --metrics_address=127.0.0.1:0 "$@" \
    > "$tmp/server-$pool-$shard.log" 2>&1 &
  pids+=($!)
}
wait_pool() {  # pool count
  for _ in $(seq 200); do
    n=$("$CTL" members --group "$1" -o json 2>/dev/null | grep -c '"role": "server"')
    [ "$n" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "pool $1 did not reach $2 servers"
}
MODEL=(--layers=64,256,10 --samples=512 --batch=8 --optimizer=adam --lr=0.01
       --ucx_tls=posix,sysv,self --checkpoint_every_steps=10 --keep_checkpoints=2
       --checkpoint_report_s=0)
train() {  # job pool steps out [extra flags]
  local ps=() rc=0 job=$1 pool=$2 steps=$3 out=$4; shift 4
  for r in 0 1; do
    "$TRAIN" --registry="$REG" --job="$job" --pool="$pool" --rank=$r --world=2 --servers=2 \
      --steps="$steps" --out="$out" --log_every=1000000 "${MODEL[@]}" "$@" \
      > "$tmp/train-$job-$r.log" 2>&1 &
    ps+=($!)
  done
  for p in "${ps[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || { tail -5 "$tmp"/train-"$job"-*.log; fail "training $job failed"; }
}

step "the same run on a roomy disk, and on the full one"
start_server roomy 0 "$tmp/roomy"; start_server roomy 1 "$tmp/roomy"; wait_pool roomy 2
start_server full 0 "$tmp/small"; start_server full 1 "$tmp/small"; wait_pool full 2
train roomy roomy 60 "$tmp/roomy.npy"
train full full 60 "$tmp/full.npy"
cmp -s "$tmp/roomy.npy" "$tmp/full.npy" || fail "the full disk changed training"
echo "training went on: the same parameters as on a roomy disk"

step "no partial checkpoint is left"
sleep 1  # the servers resolve the last checkpoint
ls -la "$tmp/small/full" || fail "no checkpoint directory"
dirs=$(ls "$tmp/small/full")
[ "$dirs" = "step-0000000010" ] || fail "expected only step-0000000010, found: $dirs"
[ -s "$tmp/small/full/step-0000000010/MANIFEST.json" ] || fail "step 10 is not complete"
stray=$(ls "$tmp/small/full/step-0000000010" | grep -c tmp)
[ "$stray" -eq 0 ] || fail "temporary files left behind"
"$CTL" --pool full checkpoint list --job full | tee "$tmp/list.txt"
[ "$(grep -c '^[0-9]' "$tmp/list.txt")" -eq 1 ] && grep -q '^10 ' "$tmp/list.txt" \
  || fail "tesselctl should list step 10 only"
ls "$tmp/roomy/roomy"  # steps 50 and 60 (keep 2)

step "tesselctl and the metrics say since which step checkpoints fail"
"$CTL" --pool full jobs | tee "$tmp/jobs.txt"
"$CTL" --pool full shards --job full | tee "$tmp/shards.txt"
grep -q "checkpoints failing since step 20" "$tmp/shards.txt" \
  || fail "tesselctl shards does not say checkpoints fail since step 20"
grep -q "No space left on device" "$tmp/shards.txt" || fail "tesselctl shards does not say why"
grep -q "checkpoints failing since step 20" "$tmp/jobs.txt" \
  || fail "tesselctl jobs does not say checkpoints fail since step 20"
"$CTL" --pool full describe job full -o json | grep -q '"checkpoints_failing_since": 20' \
  || fail "tesselctl describe job -o json lacks checkpoints_failing_since"
"$CTL" --pool roomy shards --job roomy | grep -q "failing" && fail "the roomy run reports failures"
for s in 0 1; do
  addr=$(grep -o 'metrics at http://[0-9.:]*' "$tmp/server-full-$s.log" | head -1 | sed 's|metrics at http://||')
  [ -n "$addr" ] || { grep -i metrics "$tmp/server-full-$s.log" | head -3; fail "server $s has no metrics address"; }
  /usr/bin/python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" "http://$addr/metrics" | grep 'tessel_checkpoint_failing_since_step{job="full"' \
    | tee -a "$tmp/metrics.txt"
done
grep -q ' 20$' "$tmp/metrics.txt" || fail "tessel_checkpoint_failing_since_step is not 20"
# The registry's status page (status.json, which the page renders).
addr=$(grep -o 'metrics at http://[0-9.:]*' "$tmp/registry.log" | head -1 | sed 's|metrics at http://||')
[ -n "$addr" ] || fail "the registry has no status page address"
/usr/bin/python3 - "http://$addr/status.json" <<'PY' || fail "the status page does not say checkpoints fail since step 20"
import json, sys, urllib.request
page = json.load(urllib.request.urlopen(sys.argv[1]))
jobs = {j["name"]: j for j in page["jobs"]}
full, roomy = jobs["full"], jobs["roomy"]
print("status page: full: failing since", full["checkpoints_failing_since"], "-",
      full["checkpoint_error"], "| roomy:", roomy["checkpoints_failing_since"])
assert full["checkpoints_failing_since"] == 20, full
assert "No space left on device" in full["checkpoint_error"], full
assert roomy["checkpoints_failing_since"] is None, roomy
PY
grep -h "checkpoints have been failing since step 20" "$tmp/train-full-0.log" | head -1
grep -q "checkpoints have been failing since step 20 (.*No space left on device" \
  "$tmp/train-full-0.log" || fail "rank 0 does not say checkpoints fail since step 20, and why"
grep -q "checkpoints have been failing" "$tmp/train-roomy-0.log" && fail "the roomy run warns"
step "a slow disk paces training (backpressure), and loses no checkpoint"
# 1.1 M Adam parameters: 6.5 MiB per shard file, paused 150 ms after each
# MiB written (--checkpoint_write_delay_ms): ~0.9 s a checkpoint, and one
# at most may wait for the writer (--checkpoint_max_queued=1). Ten
# checkpoints in 20 steps then take at least ~8 x 0.9 s; training that
# outran the disk would take a second or two.
mkdir -p "$tmp/slow"
for s in 0 1; do
  start_server slow $s "$tmp/slow" --checkpoint_write_delay_ms=150 --checkpoint_max_queued=1
done
wait_pool slow 2
t0=$(date +%s%N)
train slow slow 20 "$tmp/slow.npy" --checkpoint_every_steps=2 --keep_checkpoints=20 \
  --layers=64,1024,1024,10
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "20 steps with 10 checkpoints on the slow disk: ${took_ms} ms"
[ "$took_ms" -ge 6000 ] || fail "training outran the slow disk (${took_ms} ms): no backpressure"
for _ in $(seq 100); do
  [ "$("$CTL" --pool slow checkpoint list --job slow | grep -c '^[0-9]')" -ge 10 ] && break
  sleep 0.1
done
"$CTL" --pool slow checkpoint list --job slow | tee "$tmp/list-slow.txt"
[ "$(grep -c '^[0-9]' "$tmp/list-slow.txt")" -eq 10 ] || fail "a checkpoint of the slow disk is missing"
echo "PASS"
