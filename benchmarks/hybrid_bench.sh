#!/usr/bin/env bash
# Step time of the same transformer blocks as DP4, DP2 x TP2 and PP2 x DP2:
# see hybrid_bench.py.
# Usage: bazel run //benchmarks:hybrid_bench -- [--repeats=3] [--steps=30] [--embed=128 ...]
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}/tessel"
export PYTHONPATH="$runfiles/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 "$runfiles/benchmarks/hybrid_bench.py" \
  --launch="$runfiles/tools/tessel-launch" --example="$runfiles/examples/hybrid_attention.py" "$@"
