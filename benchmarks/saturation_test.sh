#!/bin/bash
# Load is never taken for a fault (issue 31): 4 workers saturate 2 shard
# servers over tcp with 256 MiB steps in 256 MiB buckets (one 128 MiB push
# per worker and shard, ~0.4 s a step on a 2-core machine) for 50 steps
# (~20 s), while each server probes its own receive queue every 100 ms and
# calls a probe late after only 20 ms: under this load probes are late all
# the time. The run must finish every step with no endpoint renewed and no
# worker aborted, and the servers must have seen late probes (else the run
# proved nothing).
#
# Usage: saturation_test.sh DATAPATH_BENCH [ITERS]
set -u
BENCH=$1
ITERS=${2:-50}
export TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
out=$TMPDIR/saturation.out
err=$TMPDIR/saturation.err
failures=0
check() {  # check CONDITION_STATUS WHAT
  if [ "$1" -eq 0 ]; then echo "ok    $2"; else echo "FAIL  $2"; failures=$((failures + 1)); fi
}

start=$(date +%s)
timeout 600 "$BENCH" --workers=4 --servers=2 --sizes_mib=256 --bucket_bytes=268435456 \
  --ucx_tls=tcp,self --iters="$ITERS" \
  --server_args="--receive_check_ms=100 --receive_check_timeout_ms=20" >"$out" 2>"$err"
rc=$?
echo "datapath_bench exited $rc after $(( $(date +%s) - start )) s"
cat "$out"
run_dir=$(ls -dt "$TMPDIR"/tessel-bench-* 2>/dev/null | head -1)
logs=("$err")
[ -n "$run_dir" ] && logs+=("$run_dir"/*.log)

check "$rc" "the saturated run finished every step (exit 0)"
grep -q '^256 ' "$out"; check $? "it printed the 256 MiB step time"
renewed=$(cat "${logs[@]}" | grep -c 're-creating the UCX endpoint')
check "$([ "$renewed" -eq 0 ]; echo $?)" "no shard server renewed its endpoint (renewals: $renewed)"
aborted=$(cat "${logs[@]}" | grep -c 'ABORTED')
check "$([ "$aborted" -eq 0 ]; echo $?)" "no worker aborted (ABORTED lines: $aborted)"
late=$(cat "${logs[@]}" | grep -c 'load, not a wedge')
check "$([ "$late" -gt 0 ]; echo $?)" "the servers saw late probes and judged them load ($late log lines, at most one per 10 s per server)"
if [ "$failures" -ne 0 ]; then
  echo "--- stderr (last 40 lines)"; tail -40 "$err"
  [ -n "$run_dir" ] && for f in "$run_dir"/server*.log; do echo "--- $f"; tail -20 "$f"; done
fi
echo "$failures failed"
[ "$failures" -eq 0 ]
