#!/usr/bin/env bash
# Tessel's data path beside Open MPI's MPI_Allreduce of the same sizes, in one
# run on this machine (the baseline of ../shared/anchors/). Ratios, not
# absolute numbers, are what compare across runs of a shared, noisy machine.
#
# Usage: bazel run //benchmarks:run_datapath -- [--workers=2] [--servers=2]
#          [--sizes_mib=1,16,64] [--iters=10] [--ucx_tls=posix,sysv,self]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="${here}/datapath_bench"
mpi="${here}/mpi_allreduce"
workers=2 sizes=1,16,64 iters=10
for a in "$@"; do
  case "$a" in
    --workers=*) workers="${a#*=}" ;;
    --sizes_mib=*) sizes="${a#*=}" ;;
    --iters=*) iters="${a#*=}" ;;
  esac
done
command -v mpirun >/dev/null || { echo "mpirun not found: apt-get install openmpi-bin" >&2; exit 1; }
out="$(mktemp -d)"
mpirun --allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo -np "$workers" "$mpi" "$sizes" "$iters" > "$out/mpi.txt"
"$bench" "$@" > "$out/tessel.txt"
cat "$out/tessel.txt"
echo
cat "$out/mpi.txt"
echo
echo "# ratio (Tessel busbw / MPI_Allreduce busbw, same run; > 1 means Tessel is faster)"
join <(grep -v '^#' "$out/tessel.txt" | tail -n +2 | awk '{print $1, $6}' | sort) \
     <(grep -v '^#' "$out/mpi.txt" | tail -n +2 | awk '{print $1, $6}' | sort) |
  sort -n | awk '{printf "%-8s tessel %.3f GB/s  mpi %.3f GB/s  ratio %.2fx\n", $1, $2, $3, $2/$3}'
rm -rf "$out"
