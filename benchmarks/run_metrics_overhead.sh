#!/usr/bin/env bash
# Metrics overhead on the demo: see metrics_overhead.py.
# Usage: bazel run //benchmarks:metrics_overhead -- [--pairs=5] [--steps=1500] [--scrape_hz=1]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
files="$here"
[ -f "$files/metrics_overhead.py" ] || files="$0.runfiles/tessel/benchmarks"
runfiles="$0.runfiles/tessel"
exec python3 "$files/metrics_overhead.py" --demo="$runfiles/tools/tessel-demo" \
  --bench="$here/metrics_bench" "$@"
