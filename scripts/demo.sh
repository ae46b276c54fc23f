#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the demo
# (a real local cluster training an MLP). Extra arguments go to tessel-demo,
# e.g. scripts/demo.sh --workers=3 --strategy=ddp --optimizer=sgd --momentum=0.9
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bazel build //tools:tessel-demo
exec bazel-bin/tools/tessel-demo "$@"
