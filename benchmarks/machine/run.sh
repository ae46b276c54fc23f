#!/usr/bin/env bash
# The machine's own limits, measured from inside the repository: what
# docs/machine.md quotes and docs/performance.md compares against.
#
#   bash benchmarks/machine/run.sh                 # memory and loopback TCP (~20 s)
#   bash benchmarks/machine/run.sh --all           # also UCX, Open MPI, Gloo
#   bash benchmarks/machine/run.sh --ucx --collectives --out=machine.txt
#
# Options:
#   --threads=1,2        membw thread counts (default: 1 and the CPU count)
#   --mem_sizes=1,64     membw array sizes in MiB (default 1,64,256)
#   --tcp_sizes=1,16,64  tcpbw message sizes in MiB (default 1,16,64,256)
#   --samples=N          samples per point (default 10)
#   --ucx                ucx_perftest tag_bw and ucp_put_bw over posix, sysv and
#                        tcp on 127.0.0.1 (Debian: ucx-utils), 16 and 64 MiB
#   --collectives        2-rank float32 allreduce of Open MPI and Gloo with
#                        benchmarks/mpi_allreduce.c and gloo_allreduce.cc (the
#                        same programs run_datapath compares Tessel with),
#                        built here with mpicc and g++ (openmpi-bin
#                        libopenmpi-dev; libgloo-dev), 16 and 64 MiB
#   --all                --ucx --collectives
#   --quiet_max_s=N      wait up to N s (default 60; 0 = never) for the machine
#                        to be >= 90 % idle for 3 s before each program
#   --out=FILE           also write everything printed to FILE
# Environment: CC (default cc), CFLAGS (default -O2).
#
# Every program prints its units. GB/s = 10^9 B/s; ucx_perftest prints MiB/s
# ("MB/s" in its table), converted here. Numbers move between runs (shared
# and virtual machines swing 2x): compare ratios measured in one run.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
threads=""
mem_sizes="1,64,256"
tcp_sizes="1,16,64,256"
samples=10
ucx=0
collectives=0
quiet_max_s=60
out=""
for arg in "$@"; do
  case "$arg" in
    --threads=*) threads="${arg#*=}" ;;
    --mem_sizes=*) mem_sizes="${arg#*=}" ;;
    --tcp_sizes=*) tcp_sizes="${arg#*=}" ;;
    --samples=*) samples="${arg#*=}" ;;
    --ucx) ucx=1 ;;
    --collectives) collectives=1 ;;
    --all) ucx=1; collectives=1 ;;
    --quiet_max_s=*) quiet_max_s="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $arg (--help)" >&2; exit 2 ;;
  esac
done
if [ -n "$out" ]; then
  exec > >(tee "$out") 2>&1
fi
cpus="$(nproc)"
[ -n "$threads" ] || { threads=1; [ "$cpus" -gt 1 ] && threads="1,$cpus"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/tessel-machine.XXXXXX")"
ucx_pids=()
cleanup() {
  for p in "${ucx_pids[@]:-}"; do
    if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# CPU idle fraction over one second, from /proc/stat (percent).
idle_percent() {
  local a b
  read -r -a a < <(grep '^cpu ' /proc/stat)
  sleep 1
  read -r -a b < <(grep '^cpu ' /proc/stat)
  local total=0 idle
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  idle=$(((b[4] - a[4]) + (b[5] - a[5])))
  [ "$total" -gt 0 ] || { echo 100; return; }
  echo $((100 * idle / total))
}

# Waits until 3 consecutive seconds are >= 90 % idle, at most $quiet_max_s s;
# says which.
wait_quiet() {
  [ "$quiet_max_s" -gt 0 ] || return 0
  local start=$SECONDS run=0 idle=100
  while [ $((SECONDS - start)) -lt "$quiet_max_s" ]; do
    idle="$(idle_percent)"
    if [ "$idle" -ge 90 ]; then run=$((run + 1)); else run=0; fi
    if [ "$run" -ge 3 ]; then echo "# quiet: ${idle}% idle"; return 0; fi
  done
  echo "# NOT QUIET: last second ${idle}% idle after ${quiet_max_s}s; these numbers are disturbed"
}

echo "# benchmarks/machine/run.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# kernel: $(uname -srm)"
echo "# cpus: $cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
if command -v lscpu >/dev/null; then
  lscpu | grep -E '^(L3 cache|Hypervisor vendor|Thread\(s\) per core|NUMA node\(s\))' |
    sed 's/  */ /g; s/^/# /'
fi
echo "# memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "# compiler: ${CC:-cc} ${CFLAGS:--O2}: $("${CC:-cc}" --version | head -1)"

# shellcheck disable=SC2086
"${CC:-cc}" ${CFLAGS:--O2} -pthread -o "$work/membw" "$here/membw.c"
# shellcheck disable=SC2086
"${CC:-cc}" ${CFLAGS:--O2} -o "$work/tcpbw" "$here/tcpbw.c"

echo
echo "## memory bandwidth (membw.c)"
for t in ${threads//,/ }; do
  wait_quiet
  "$work/membw" -t "$t" -s "$mem_sizes" -n "$samples"
done

echo
echo "## loopback TCP (tcpbw.c)"
wait_quiet
"$work/tcpbw" -s "$tcp_sizes" -n "$samples"

if [ "$ucx" = 1 ]; then
  echo
  echo "## UCX (ucx_perftest on 127.0.0.1, overall bandwidth; its \"MB/s\" are MiB/s)"
  if ! command -v ucx_perftest >/dev/null; then
    echo "skipped: ucx_perftest not found (Debian: apt-get install ucx-utils)"
  else
    echo "# UCX $(ucx_info -v 2>/dev/null | head -1 | sed 's/^# *//')"
    printf '%-6s %-11s %8s %10s %8s\n' UCX_TLS test S_MiB MiB/s GB/s
    port=$((20000 + RANDOM % 20000))
    for tls in posix sysv tcp; do
      for test in tag_bw ucp_put_bw; do
        for mib in 16 64; do
          iters=$((mib == 16 ? 40 : 12)) warm=2
          # UCP put over tcp crawls in UCX 1.13 (docs/machine.md): one iteration.
          if [ "$tls" = tcp ] && [ "$test" = ucp_put_bw ]; then iters=1 warm=0; fi
          port=$((port + 1))
          wait_quiet >/dev/null
          UCX_TLS="$tls,self" ucx_perftest -p "$port" >"$work/ucx_server.log" 2>&1 &
          ucx_pids=("$!")
          sleep 0.5
          line="$(UCX_TLS="$tls,self" timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
                    -s $((mib << 20)) -n "$iters" -w "$warm" 2>&1 | grep '^Final:' || true)"
          # The server ends with the client's test; one left waiting (the
          # client failed to connect) is stopped.
          sleep 0.2
          kill "${ucx_pids[0]}" 2>/dev/null || true
          wait "${ucx_pids[0]}" 2>/dev/null || true
          ucx_pids=()
          if [ -z "$line" ]; then
            printf '%-6s %-11s %8s %10s %8s\n' "$tls" "$test" "$mib" failed -
          else
            # Final: iters  lat50  lat_avg  lat_overall  bw_avg  bw_overall  ...
            awk -v t="$tls" -v x="$test" -v s="$mib" \
              '{printf "%-6s %-11s %8s %10.0f %8.2f\n", t, x, s, $7, $7 * 1048576 / 1e9}' <<<"$line"
          fi
        done
      done
    done
  fi
fi

if [ "$collectives" = 1 ]; then
  echo
  echo "## collectives, 2 ranks, float32 allreduce (Tessel's baselines: benchmarks/run_datapath.py)"
  if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    mpicc -O2 -I "$root" -o "$work/mpi_allreduce" "$root/benchmarks/mpi_allreduce.c"
    wait_quiet
    echo "# Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), default" \
      "transports; median (min, max) ms per allreduce, busbw = algbw for 2 ranks"
    mpirun --allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo \
      --mca oob_tcp_if_include lo -np 2 "$work/mpi_allreduce" 16,64 "$samples" allreduce
  else
    echo "Open MPI skipped: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
  fi
  if [ -e /usr/include/gloo/allreduce_ring.h ]; then
    g++ -O2 -std=c++17 -I "$root" -o "$work/gloo_allreduce" \
      "$root/benchmarks/gloo_allreduce.cc" -lgloo -lpthread
    wait_quiet
    echo "# Gloo ring allreduce, TCP on lo"
    "$work/gloo_allreduce" 2 16,64 "$samples"
  else
    echo "Gloo skipped: libgloo-dev not installed (apt-get install libgloo-dev)"
  fi
fi
