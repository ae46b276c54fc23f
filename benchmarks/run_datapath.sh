#!/usr/bin/env bash
# Tessel's data path beside Open MPI and Gloo, fairly: see run_datapath.py.
# Usage: bazel run //benchmarks:run_datapath -- [--workers=2,4] [--sizes_mib=1,16,64,256]
#          [--repeats=5] [--iters=10] [--optimizers=sgd,adam] [--tcp] [--no_gloo]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
files="$here"
[ -f "$files/run_datapath.py" ] || files="$0.runfiles/tessel/benchmarks"
exec python3 "$files/run_datapath.py" --bench="$here/datapath_bench" --mpi="$here/mpi_allreduce" \
  --triad="$here/triad_steps" \
  --gloo_src="$files/gloo_allreduce.cc" --ddp_update_lib="$here/libtessel_ddp_update.so" "$@"
