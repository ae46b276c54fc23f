#!/usr/bin/env bash
# The 25.2M-parameter MLP step through Tessel and torch DDP: see e2e_mlp.py.
# Usage: bazel run //benchmarks:e2e_mlp -- [--repeats=3] [--steps=15]
#          [--strategies=zero2,ddp] [--quiet_max_s=120]
set -euo pipefail
# Debian's torch links the generic libblas.so.3: reference BLAS makes the step
# 8x slower (docs/machine.md, "A torch DDP step"), so use OpenBLAS, as that
# baseline was measured.
if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "e2e_mlp: installing libopenblas0-pthread (torch's BLAS, as the anchors measured)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libopenblas0-pthread >/dev/null ||
      echo "e2e_mlp: could not install libopenblas0-pthread; torch uses reference BLAS" >&2
  else
    echo "e2e_mlp: libopenblas0-pthread is not installed; torch uses reference BLAS" >&2
  fi
fi
runfiles="${RUNFILES_DIR:-$0.runfiles}/tessel"
exec /usr/bin/python3 "$runfiles/benchmarks/e2e_mlp.py" --launch="$runfiles/tools/tessel-launch" \
  --python_root="$runfiles/python" "$@"
