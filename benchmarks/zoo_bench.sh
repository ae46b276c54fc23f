#!/usr/bin/env bash
# The model zoo's step time and memory through Tessel, torch DDP and torch FSDP:
# see zoo_bench.py.
# Usage: bazel run //benchmarks:zoo_bench -- [--models=resnet18,lm] [--repeats=3]
#          [--steps=10] [--contenders=...] [--quiet_max_s=30]
# It uses whichever BLAS torch loads and prints it (Debian's torch links the
# generic libblas.so.3; e2e_mlp.sh installs OpenBLAS): every contender runs with
# the same one in the same run, but with the reference BLAS the LM's matmuls
# dominate its step.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}/tessel"
exec /usr/bin/python3 "$runfiles/benchmarks/zoo_bench.py" --launch="$runfiles/tools/tessel-launch" \
  --python_root="$runfiles/python" --zoo_root="$runfiles/python/tests" "$@"
