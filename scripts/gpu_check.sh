#!/usr/bin/env bash
# Runs Tessel's GPU checks on a machine with a CUDA GPU, from the bundle that
# scripts/gpu_bundle.sh made (copied beside this script as .gpu-bundle/).
# Needs only the NVIDIA driver and cuBLAS 13 on that machine. Writes each
# step's log under $OUT (default ./gpu-check-out) and prints a summary last.
#
#   bash .gpu-bundle/gpu_check.sh [quick|full]
#     quick: the test suites only; full: the demo on --device=cpu too (the
#     default runs it on cuda only, comparing it with the CPU reference it
#     trains itself; the whole default run fits a 5-minute device call)
#
# Steps: the device, the kernels' architectures (cuobjdump, where present),
# the four CUDA test suites (the device's kernels vs the CPU, the model's
# layers vs the CPU, the device MLP vs the CPU model, training through
# DeviceStaging vs the CPU path with overlap and recovery), compute-sanitizer
# memcheck over the two kernel suites, gpu_bench, and
# the demo's real cluster (2 shard servers + 2 worker processes) on
# --device=cuda against --device=cpu for zero2, ddp (its update on the
# device) and fsdp in fp32 and zero2 in bf16 (the CPU runs bitwise, the CUDA
# runs by --cuda_tolerance), and ddp with top-k compression (ratio 0.01).
set -uo pipefail
B="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

# cuBLAS: the loader's path, the toolkit, or a Python wheel's copy.
cublas="$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 /{print $NF; exit}')"
if [ -z "$cublas" ]; then
  cublas="$(find /usr/local/cuda*/ /usr/local/cuda/lib64 /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)"
fi
export LD_LIBRARY_PATH="$B/lib${cublas:+:$(dirname "$cublas")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$B/ucx"
say "== device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "== cuBLAS: ${cublas:-not found}"

step() {  # step NAME TIMEOUT_S COMMAND...: runs, logs, records the result
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  say "$(printf '%-28s rc=%-3d %4ds' "$name" "$rc" $((SECONDS - t0)))"
  return $rc
}

if command -v cuobjdump >/dev/null; then
  cuobjdump --list-elf --list-ptx "$B/gpu/device_test" >"$OUT/cuobjdump.log" 2>&1
  say "== kernels in the binary: $(grep -o 'sm_[0-9]*\|compute_[0-9]*' "$OUT/cuobjdump.log" | sort -u | tr '\n' ' ')"
fi

for t in gpu/device_test model/device_layers_test model/device_mlp_test worker/device_staging_test; do
  name="$(basename "$t")"
  TEST_TMPDIR="$(mktemp -d)" step "$name" 120 "$B/$t" --gtest_color=no
  say "   cuda cases: $(grep -c '^\[       OK \] .*/cuda' "$OUT/$name.log") passed," \
    "$(grep -c '^\[  FAILED  \] .*/cuda.* ms)$' "$OUT/$name.log") failed," \
    "$(grep -c '^\[  SKIPPED \] .*/cuda.* ms)$' "$OUT/$name.log") skipped; all: $(grep '^\[  PASSED  \]' "$OUT/$name.log")"
  grep -E '^\[  FAILED  \] .* ms\)$' "$OUT/$name.log" | head -8 | sed 's/^/   /' >>"$summary"
done
[ "${1:-}" = quick ] && { cat "$summary"; exit 0; }

if command -v compute-sanitizer >/dev/null; then
  # Less the test that asks for 4 PiB on purpose (its refusal is reported).
  step compute_sanitizer 240 compute-sanitizer --tool memcheck --error-exitcode 7 \
    "$B/gpu/device_test" --gtest_color=no '--gtest_filter=*cuda*:-*TooLargeAllocation*'
  tail -3 "$OUT/compute_sanitizer.log" | sed 's/^/   /' >>"$summary"
  step compute_sanitizer_layers 240 compute-sanitizer --tool memcheck --error-exitcode 7 \
    "$B/model/device_layers_test" --gtest_color=no '--gtest_filter=*cuda*'
  tail -3 "$OUT/compute_sanitizer_layers.log" | sed 's/^/   /' >>"$summary"
fi

step gpu_bench 240 "$B/benchmarks/gpu_bench" --device=cuda
sed 's/^/   /' "$OUT/gpu_bench.log" >>"$summary"

devices=cuda
[ "${1:-}" = full ] && devices="cpu cuda"
for run in zero2:fp32 ddp:fp32 fsdp:fp32 zero2:bf16; do
  s="${run%%:*}" p="${run#*:}"
  for d in $devices; do
    name="demo_${s}_${p}_$d"
    step "$name" 120 "$B/tools/tessel-demo" --strategy="$s" --precision="$p" --device="$d"
    grep -E 'ms/step|accuracy|relative difference|OK$|FAILED' "$OUT/$name.log" | tail -7 |
      sed 's/^/   /' >>"$summary"
    # Where worker 0 computed (its own log, in the demo's log folder).
    logs="$(grep -o 'logs in [^ ;]*' "$OUT/$name.log" | head -1 | cut -d' ' -f3)"
    [ -n "$logs" ] && grep -h 'computing on' "$logs"/* 2>/dev/null | head -1 | sed 's/^/   /' >>"$summary"
  done
done
# Top-k compression on the device (the CUDA kernel, DeviceStaging's device
# residual): the CPU run compresses on the host; the selections are the same
# bits, so the accuracies should agree to the cuBLAS tolerance.
for d in $devices; do
  name="demo_ddp_topk_$d"
  step "$name" 120 "$B/tools/tessel-demo" --strategy=ddp --topk_ratio=0.01 --device="$d"
  grep -E 'ms/step|accuracy|received|not bitwise' "$OUT/$name.log" | tail -5 |
    sed 's/^/   /' >>"$summary"
done
echo
cat "$summary"
