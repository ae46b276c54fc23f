#!/usr/bin/env bash
# Runs tests/image_test.py: builds the OCI images (deploy/image/build.sh) from
# the Bazel-built binaries and runs them from their unpacked roots.
set -euo pipefail
DRIVER="$1"; shift
exec python3 "$DRIVER" "$@"
