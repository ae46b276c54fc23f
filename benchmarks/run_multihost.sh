#!/usr/bin/env bash
# Tessel's data path across hosts (network namespaces) beside Open MPI and
# Gloo over the same namespaces: see run_multihost.py. Needs root.
# Usage: bazel run //benchmarks:run_multihost -- [--hosts=2] [--per_host=2] [--servers=2]
#          [--sizes_mib=1,16,64] [--repeats=3] [--iters=10] [--no_gloo] [--no_mpi_tcp]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
files="$here"
[ -f "$files/run_multihost.py" ] || files="$0.runfiles/tessel/benchmarks"
root="$(cd "$files/.." && pwd)"
exec python3 "$files/run_multihost.py" --bench="$here/datapath_bench" --mpi="$here/mpi_allreduce" \
  --server="$root/server/tessel-server" --registry="$root/registry/tessel-registry" \
  --gloo_src="$files/gloo_allreduce.cc" --netns="$root/tests" "$@"
