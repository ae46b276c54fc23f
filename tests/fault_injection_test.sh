#!/usr/bin/env bash
# Runs the fault-injection driver (tests/fault_injection.py): a few seeded
# runs by default, TESSEL_FAULT_RUNS=N for more.
set -euo pipefail
DRIVER="$1"; shift
exec python3 "$DRIVER" "$@"
