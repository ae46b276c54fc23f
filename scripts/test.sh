#!/usr/bin/env bash
# The README's second command: install what is missing and run every test
# (unit tests, and integration tests that start real processes on loopback).
# Ends with one line "N passed, N failed" counting test cases.
# Extra arguments go to `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || exit 1
log="$(mktemp)"
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
python3 scripts/count_tests.py "$log" "$(bazel info bazel-testlogs 2>/dev/null)"
count_rc=$?
rm -f "$log"
[ "$rc" -eq 0 ] && [ "$count_rc" -eq 0 ]
