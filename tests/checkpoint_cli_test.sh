#!/usr/bin/env bash
# Checkpoints and tesselctl, exercised as an operator would: real binaries
# (tessel-registry, tessel-server, tessel-train, tesselctl) on loopback.
#
#  1. resume equality: 60 steps straight == 40 steps + checkpoint + resume 20 (bitwise)
#  2. reshard restore 2 -> 3 and 3 -> 2 servers, and 4 -> 2 workers
#  3. a flipped byte: verify and restore name the damaged file
#  4. kill -9 a server mid-write: the previous checkpoint is intact and listed, the partial one is not
#  5. the CLI itself: --help, exit codes, json output, admin token
set -uo pipefail
REGISTRY="$1" SERVER="$2" TRAIN="$3" CTL="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/ckpt-cli"
rm -rf "$tmp"; mkdir -p "$tmp"
ckdir="$tmp/checkpoints"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
step() { echo; echo "== $*"; }

# Token files are secrets: owner-only, or every binary refuses them.
(umask 077; echo "tessel-test-admin-token-0123456789" > "$tmp/token")
"$REGISTRY" --insecure --listen=127.0.0.1:0 --port_file="$tmp/registry.port" --lease_ttl_ms=1500 \
  > "$tmp/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/registry.port" ] && break; sleep 0.1; done
REG="$(cat "$tmp/registry.port")"
[ -n "$REG" ] || fail "registry did not start"
export TESSEL_REGISTRY="$REG"

declare -A server_pid
start_server() {  # pool shard [extra flags]
  local pool=$1 shard=$2; shift 2
  "$SERVER" --insecure --registry="$REG" --pool="$pool" --shard="$shard" --ucx_tls=posix,sysv,self \
    --checkpoint_dir="$ckdir" --admin_token_file="$tmp/token" --lease_ttl_ms=1500 "$@" \
    > "$tmp/server-$pool-$shard.log" 2>&1 &
  server_pid[$pool/$shard]=$!
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
stop_pool() {  # pool shards...
  local pool=$1; shift
  for s in "$@"; do kill "${server_pid[$pool/$s]}" 2>/dev/null; wait "${server_pid[$pool/$s]}" 2>/dev/null; done
}
MODEL=(--layers=16,32,4 --samples=512 --batch=8 --optimizer=adam --lr=0.01 --ucx_tls=posix,sysv,self)
train() {  # job pool world servers steps out [extra flags]
  local job=$1 pool=$2 world=$3 servers=$4 steps=$5 out=$6; shift 6
  local ps=()
  for r in $(seq 0 $((world - 1))); do
    "$TRAIN" --registry="$REG" --job="$job" --pool="$pool" --rank=$r --world=$world \
      --servers=$servers --steps=$steps --out="$out" --token_file="$tmp/token" \
      --log_every=1000000 "${MODEL[@]}" "$@" > "$tmp/train-$job-$r.log" 2>&1 &
    ps+=($!)
  done
  local rc=0
  for p in "${ps[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || { tail -5 "$tmp"/train-"$job"-*.log; fail "training $job failed"; }
}
same() { cmp -s "$1" "$2" || fail "$1 and $2 differ"; echo "identical: $(basename "$1") == $(basename "$2")"; }

step "1. resume equality (2 servers, 2 workers)"
start_server a 0; start_server a 1; wait_pool a 2
train straight a 2 2 60 "$tmp/straight60.npy"
train ck a 2 2 40 "$tmp/ck40.npy" --checkpoint_every_steps=20 --keep_checkpoints=5
for _ in $(seq 100); do "$CTL" --pool a checkpoint list --job ck | grep -q '^40 ' && break; sleep 0.1; done
"$CTL" --pool a checkpoint list --job ck | tee "$tmp/list1.txt"
grep -q '^20 ' "$tmp/list1.txt" && grep -q '^40 ' "$tmp/list1.txt" || fail "checkpoints 20 and 40 not listed"
"$CTL" --pool a checkpoint verify --job ck --step 40 || fail "verify of a good checkpoint failed"
# Resume on the same servers (the job is still there at step 40).
train ck a 2 2 60 "$tmp/ck60.npy" --resume
same "$tmp/ck60.npy" "$tmp/straight60.npy"

step "1b. timed checkpoints (rank 0 asks every second)"
# A model big enough that training lasts a few seconds whatever the machine.
train timed a 2 2 8000 "$tmp/timed.npy" --checkpoint_every_s=1 --keep_checkpoints=10 \
  --layers=64,256,256,10 --batch=32
"$CTL" --pool a checkpoint list --job timed | tee "$tmp/list-timed.txt"
[ "$(grep -c '^[0-9]' "$tmp/list-timed.txt")" -ge 1 ] || fail "no timed checkpoint"
newest="$(grep '^[0-9]' "$tmp/list-timed.txt" | tail -1 | awk '{print $1}')"
"$CTL" --pool a checkpoint verify --job timed --step "$newest" || fail "timed checkpoint damaged"

step "2a. reshard restore 2 -> 3 servers (fresh servers, as after losing machines)"
stop_pool a 0 1
start_server b 0; start_server b 1; start_server b 2; wait_pool b 3
"$CTL" --pool b checkpoint restore --job ck --step 40 --token_file "$tmp/token" || fail "restore 2->3"
"$CTL" --pool b shards --job ck | tee "$tmp/shards-b.txt"
[ "$(grep -c ' 40 ' "$tmp/shards-b.txt")" -eq 3 ] || fail "three shards at step 40 expected"
train ck b 2 3 60 "$tmp/ck60_from3.npy" --resume --checkpoint_every_steps=20
same "$tmp/ck60_from3.npy" "$tmp/straight60.npy"

step "2b. reshard restore 3 -> 2 servers"
for _ in $(seq 100); do "$CTL" --pool b checkpoint list --job ck | grep -q '^60 ' && break; sleep 0.1; done
"$CTL" --pool b checkpoint show --job ck --step 60 -o json | grep -q '"num_shards": 3' || fail "step 60 not written by 3 shards"
stop_pool b 0 1 2
start_server c 0; start_server c 1; wait_pool c 2
"$CTL" --pool c checkpoint restore --job ck --step 60 --token_file "$tmp/token" || fail "restore 3->2"
train ck c 2 2 60 "$tmp/ck60_back2.npy" --resume
same "$tmp/ck60_back2.npy" "$tmp/straight60.npy"

step "2c. 4 workers -> 2 workers"
train w4 c 4 2 20 "$tmp/w4_20.npy" --checkpoint_every_steps=20
for _ in $(seq 100); do "$CTL" --pool c checkpoint list --job w4 | grep -q '^20 ' && break; sleep 0.1; done
stop_pool c 0 1
start_server e 0; start_server e 1; wait_pool e 2
"$CTL" --pool e checkpoint restore --job w4 --step 20 --workers 2 --token_file "$tmp/token" || fail "restore 4->2 workers"
train w4 e 2 2 20 "$tmp/w4_20_as2.npy" --resume
same "$tmp/w4_20_as2.npy" "$tmp/w4_20.npy"
train w4 e 2 2 25 "$tmp/w4_25_as2.npy" --resume   # and training goes on with 2 workers

step "3. a flipped byte"
f="$(ls "$ckdir"/ck/step-0000000040/shard-00001.bin)"
cp "$f" "$tmp/shard1.bak"
printf '\x55' | dd of="$f" bs=1 seek=100 count=1 conv=notrunc status=none
"$CTL" --pool e checkpoint verify --job ck --step 40 > "$tmp/verify.txt"; rc=$?
cat "$tmp/verify.txt"
[ $rc -eq 6 ] || fail "verify of a damaged checkpoint must exit 6, got $rc"
grep -q "shard-00001.bin" "$tmp/verify.txt" || fail "verify does not name the damaged file"
"$CTL" --pool e checkpoint restore --job ck --step 40 --servers 2 --token_file "$tmp/token" > "$tmp/restore-bad.txt" 2>&1; rc=$?
cat "$tmp/restore-bad.txt"
[ $rc -eq 6 ] || fail "restore from a damaged file must exit 6, got $rc"
grep -q "shard-00001.bin" "$tmp/restore-bad.txt" || fail "restore does not name the damaged file"
"$CTL" --pool e jobs | grep -q "^ck " && fail "a refused restore must not create the job anywhere"
cp "$tmp/shard1.bak" "$f"

step "4. kill -9 a shard server in the middle of writing a checkpoint"
start_server f 0; start_server f 1 --checkpoint_write_delay_ms=300; wait_pool f 2
MODEL=(--layers=64,1024,1024,10 --samples=512 --batch=8 --optimizer=adam --lr=0.001 --ucx_tls=posix,sysv,self)
train big f 2 2 5 "$tmp/big5.npy" --checkpoint_every_steps=5
for _ in $(seq 200); do "$CTL" --pool f checkpoint list --job big | grep -q '^5 ' && break; sleep 0.1; done
"$CTL" --pool f checkpoint list --job big | grep -q '^5 ' || fail "first checkpoint of big not complete"
train big f 2 2 8 "$tmp/big8.npy" --resume --checkpoint_every_steps=5
"$CTL" --pool f --token_file "$tmp/token" checkpoint save --job big --wait=false | tee "$tmp/save8.txt" || fail "save"
grep -q "step 8" "$tmp/save8.txt" || fail "save should target step 8"
for _ in $(seq 100); do ls "$ckdir"/big/step-*/shard-00001.bin.tmp-* >/dev/null 2>&1 && break; sleep 0.05; done
ls "$ckdir"/big/step-*/ | head -20
kill -9 "${server_pid[f/1]}"
sleep 0.5
"$CTL" --pool f checkpoint list --job big | tee "$tmp/list-big.txt"
[ "$(grep -c '^[0-9]' "$tmp/list-big.txt")" -eq 1 ] || fail "exactly the previous checkpoint must be listed"
grep -q '^5 ' "$tmp/list-big.txt" || fail "previous checkpoint (step 5) missing"
"$CTL" --pool f checkpoint verify --job big --step 5 || fail "previous checkpoint damaged"
ls "$ckdir"/big/step-0000000008/ | grep -q "MANIFEST" && fail "the interrupted checkpoint has a manifest"
ls "$ckdir"/big/step-0000000008/ | grep -q "tmp" || echo "(shard 1 had not started its file)"

step "5. the CLI as a user runs it"
"$CTL" --help | grep -q "checkpoint" || fail "--help"
"$CTL" checkpoint --help | grep -q "restore" || fail "checkpoint --help"
"$CTL" checkpoint restore --help | grep -q -- "--servers" || fail "restore --help"
"$CTL" nosuchcommand > /dev/null 2>&1; [ $? -eq 2 ] || fail "unknown command must exit 2"
"$CTL" shards > /dev/null 2>&1; [ $? -eq 2 ] || fail "missing --job must exit 2"
"$CTL" --pool e jobs | tee "$tmp/jobs.txt"
grep -q "^w4 " "$tmp/jobs.txt" || fail "jobs does not list w4"
"$CTL" --pool e shards --job w4 -o json > "$tmp/shards.json" || fail "shards json"
python3 -c "import json,sys; d=json.load(open('$tmp/shards.json')); assert len(d)==2 and d[0]['health']=='ok', d" || fail "shards json content"
"$CTL" --pool e stats --job w4 | grep -q "pushed_bytes" || fail "stats"
"$CTL" members | grep -q "worker\|server" || fail "members"
"$CTL" --pool e shards --job nosuch > /dev/null 2>&1; [ $? -eq 3 ] || fail "unknown job must exit 3"
"$CTL" --pool e checkpoint save --job w4 > "$tmp/noauth.txt" 2>&1; rc=$?
cat "$tmp/noauth.txt"
[ $rc -eq 5 ] || fail "save without a token must exit 5, got $rc"
grep -q "TESSEL_TOKEN" "$tmp/noauth.txt" || fail "no hint about the token"
(umask 077; echo "wrong-token-wrong-token" > "$tmp/badtoken")
cp "$tmp/token" "$tmp/open.token" && chmod 644 "$tmp/open.token"
"$CTL" --pool e --token_file "$tmp/open.token" checkpoint delete --job ck --step 40 > "$tmp/open.txt" 2>&1 &&
  fail "a token file others can read must be refused"
grep -q "chmod 600 $tmp/open.token" "$tmp/open.txt" || fail "no chmod hint: $(cat "$tmp/open.txt")"
"$CTL" --pool e --token_file "$tmp/badtoken" checkpoint delete --job ck --step 40 > /dev/null 2>&1; [ $? -eq 5 ] || fail "wrong token must exit 5"
TESSEL_TOKEN="$(cat "$tmp/token")" "$CTL" --pool e checkpoint save --job w4 || fail "save with env token"
"$CTL" --pool e --token_file "$tmp/token" checkpoint delete --job ck --step 20 || fail "delete"
"$CTL" --pool e checkpoint list --job ck | grep -q '^20 ' && fail "deleted checkpoint still listed"
"$CTL" --pool e checkpoint show --job ck --step 20 > /dev/null 2>&1; [ $? -eq 3 ] || fail "deleted checkpoint must be not found (3)"
"$CTL" --registry 127.0.0.1:1 --timeout 2 members > /dev/null 2>&1; [ $? -eq 4 ] || fail "unreachable registry must exit 4"
start_server g 0 --allow_anonymous_reads=false; wait_pool g 1
"$CTL" --pool g jobs > /dev/null 2>&1; [ $? -eq 5 ] || fail "reads without a token must be refused when the server says so"
"$CTL" --pool g --token_file "$tmp/token" jobs > /dev/null || fail "reads with the token"
echo "PASS"
