#!/usr/bin/env bash
# The demo end to end, as a user runs it: (1) a short run trains, reports
# accuracy and matches single-process training; (2) when a shard server dies
# (kill -9) the launcher names it, says why, and stops every other process;
# (3) Ctrl-C (SIGINT) stops every process it started.
set -uo pipefail
demo="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

children_of() { pgrep -P "$1" 2>/dev/null | tr '\n' ' '; }
wait_for_line() {  # file pattern timeout_s
  for _ in $(seq 1 $(( $3 * 10 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

echo "== 1. short run"
"$demo" --steps=60 --workers=2 --servers=2 > "$tmp/run1.txt" 2>&1 || { cat "$tmp/run1.txt"; fail "demo exited $?"; }
cat "$tmp/run1.txt"
grep -q "max relative difference vs single process: 0 " "$tmp/run1.txt" || fail "no bitwise match line"
grep -q "final accuracy: train" "$tmp/run1.txt" || fail "no accuracy"
grep -q "step    60/60" "$tmp/run1.txt" || fail "no progress lines"
"$demo" --steps=30 --strategy=zero1 --micro_batches=4 > "$tmp/run1b.txt" 2>&1 || { cat "$tmp/run1b.txt"; fail "micro-batch demo exited $?"; }
grep -q "max relative difference vs single process: 0 " "$tmp/run1b.txt" || { cat "$tmp/run1b.txt"; fail "gradient accumulation differs from the reference"; }
"$demo" --steps=30 --precision=bf16 > "$tmp/run1c.txt" 2>&1 || { cat "$tmp/run1c.txt"; fail "bf16 demo exited $?"; }
grep -q "max relative difference vs single process: 0 " "$tmp/run1c.txt" || fail "bf16 differs from the mixed-precision reference"
"$demo" --steps=20 --strategy=hybrid --dp=2 --tp=2 --pp=2 --micro_batches=4 > "$tmp/run1e.txt" 2>&1 || { cat "$tmp/run1e.txt"; fail "hybrid demo exited $?"; }
grep -q "max relative difference vs the single-process hybrid reference: 0 " "$tmp/run1e.txt" || fail "hybrid differs from its reference"
"$demo" --steps=20 --strategy=hybrid --precision=bf16 --dp=2 --tp=2 --pp=1 --micro_batches=2 > "$tmp/run1f.txt" 2>&1 || { cat "$tmp/run1f.txt"; fail "bf16 hybrid demo exited $?"; }
grep -q "precision bf16" "$tmp/run1f.txt" || { cat "$tmp/run1f.txt"; fail "the hybrid demo did not forward --precision"; }
grep -q "max relative difference vs the single-process hybrid reference: 0 " "$tmp/run1f.txt" || fail "bf16 hybrid differs from its mixed-precision reference"
"$demo" --steps=30 --strategy=fsdp > "$tmp/run1d.txt" 2>&1 || { cat "$tmp/run1d.txt"; fail "fsdp demo exited $?"; }
grep -q "max relative difference vs single process: 0 " "$tmp/run1d.txt" || fail "fsdp differs from the reference"
for mp in "fsdp fp16" "ddp bf16"; do
  set -- $mp
  "$demo" --steps=20 --strategy=$1 --precision=$2 > "$tmp/run1-$1.txt" 2>&1 || { cat "$tmp/run1-$1.txt"; fail "$1 $2 demo exited $?"; }
  grep -q "max relative difference vs single process: 0 " "$tmp/run1-$1.txt" || fail "$1 $2 differs from the mixed-precision reference"
done

# --device: the device code path (DeviceMlp, DeviceStaging, per-unit copies)
# on the host device is the CPU's bit for bit; --device=cuda without a GPU
# says why and trains on the CPU.
for dv in "zero2 fp32" "fsdp fp32" "ddp bf16"; do
  set -- $dv
  "$demo" --steps=20 --device=host --strategy=$1 --precision=$2 > "$tmp/run1-dev-$1.txt" 2>&1 || { cat "$tmp/run1-dev-$1.txt"; fail "--device=host $1 $2 demo exited $?"; }
  grep -q "ms/step  (host)" "$tmp/run1-dev-$1.txt" || { cat "$tmp/run1-dev-$1.txt"; fail "--device=host $1 did not compute on the host device"; }
  grep -q "data path moves host memory, so gradients and parameters are staged through pinned host memory" "$tmp/run1-dev-$1.txt" || { cat "$tmp/run1-dev-$1.txt"; fail "--device=host $1: no report of what the data path moves"; }
  grep -q "max relative difference vs single process: 0 " "$tmp/run1-dev-$1.txt" || fail "--device=host $1 $2 differs from the reference"
done
if ! nvidia-smi -L > /dev/null 2>&1; then
  "$demo" --steps=10 --device=cuda > "$tmp/run1-cuda.txt" 2>&1 || { cat "$tmp/run1-cuda.txt"; fail "--device=cuda without a GPU exited $?"; }
  grep -q "device=cuda: .*; computing on the CPU" "$tmp/run1-cuda.txt" || { cat "$tmp/run1-cuda.txt"; fail "--device=cuda without a GPU did not say why"; }
  grep -q "relative difference vs single process: 0 in norm (0 at worst element)" "$tmp/run1-cuda.txt" || fail "--device=cuda fallback differs from the reference"
fi
"$demo" --steps=10 --device=tpu > "$tmp/run1-tpu.txt" 2>&1 && fail "--device=tpu accepted"
grep -q "device must be cpu, cuda or host" "$tmp/run1-tpu.txt" || { cat "$tmp/run1-tpu.txt"; fail "--device=tpu: no clear error"; }

echo "== 2. a shard server dies"
"$demo" --steps=1000000 --workers=2 --servers=2 --skip_reference --log_every=20 > "$tmp/run2.txt" 2>&1 &
pid=$!
wait_for_line "$tmp/run2.txt" "step " 60 || { kill -9 $pid; cat "$tmp/run2.txt"; fail "training did not start"; }
kids="$(children_of $pid)"
victim="$(pgrep -P $pid -f 'tessel-server.*--shard=1')"
[ -n "$victim" ] || fail "server 1 not found among children: $kids"
kill -9 "$victim"
timeout 30 tail --pid=$pid -f /dev/null
wait $pid; rc=$?
cat "$tmp/run2.txt" | tail -20
[ $rc -ne 0 ] || fail "demo should fail when a server dies"
grep -q "process 'server1'" "$tmp/run2.txt" || fail "failure does not name server1"
grep -q "killed by signal 9" "$tmp/run2.txt" || fail "failure does not say why"
for k in $kids; do kill -0 "$k" 2>/dev/null && fail "process $k left running"; done

echo "== 3. Ctrl-C"
"$demo" --steps=1000000 --workers=2 --servers=1 --skip_reference --log_every=20 > "$tmp/run3.txt" 2>&1 &
pid=$!
wait_for_line "$tmp/run3.txt" "step " 60 || { kill -9 $pid; fail "training did not start"; }
kids="$(children_of $pid)"
kill -INT $pid
timeout 30 tail --pid=$pid -f /dev/null
wait $pid; rc=$?
tail -5 "$tmp/run3.txt"
[ $rc -ne 0 ] || fail "interrupted demo should exit non-zero"
grep -q "interrupted: stopping every process" "$tmp/run3.txt" || fail "no interruption message"
for k in $kids; do kill -0 "$k" 2>/dev/null && fail "process $k left running after Ctrl-C"; done
echo "PASS"
