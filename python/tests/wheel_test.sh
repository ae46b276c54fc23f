#!/usr/bin/env bash
# The wheel as a user installs it: `pip install` into a fresh virtual
# environment that sees the system's torch (--system-site-packages), then the
# digits example through `tessel-launch` from the environment's PATH, with no
# PYTHONPATH and outside the source tree; `tesselctl --version` likewise.
# Usage: wheel_test.sh WHEEL EXAMPLE
set -euo pipefail
wheel="$(readlink -f "$1")"
example="$(readlink -f "$2")"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/wheel-XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

/usr/bin/python3 -m venv --system-site-packages "$work/venv" || fail "python3 -m venv (python3-venv)"
"$work/venv/bin/pip" install --quiet --no-index --no-deps "$wheel" || fail "pip install $wheel"

cd "$work"
cp "$example" digits_cnn.py
clean_env=(env -u PYTHONPATH -u RUNFILES_DIR -u TEST_SRCDIR -u RUNFILES_MANIFEST_FILE
           "PATH=$work/venv/bin:/usr/bin:/bin" "HOME=$work")

where="$("${clean_env[@]}" python -c 'import tessel, tessel.torch; print(tessel.__file__)')"
[[ "$where" == "$work/venv/lib/"*"/site-packages/tessel/__init__.py" ]] ||
  fail "tessel imported from $where, not the virtual environment"
echo "import tessel: $where"

version="$("${clean_env[@]}" tesselctl --version)" || fail "tesselctl --version"
[[ "$version" == "tessel "* ]] || fail "tesselctl --version printed '$version'"
echo "tesselctl --version: $version"
launcher="$("${clean_env[@]}" bash -c 'command -v tessel-launch')"
[[ "$launcher" == "$work/venv/bin/tessel-launch" ]] || fail "tessel-launch resolves to '$launcher'"

start=$SECONDS
out="$("${clean_env[@]}" tessel-launch --nproc_per_node=2 --servers=2 --job=wheel-digits \
        --timeout_s=240 -- python digits_cnn.py --epochs=3 2>&1)" || {
  echo "$out" | tail -40
  fail "tessel-launch from the wheel exited non-zero"
}
line="$(echo "$out" | grep -E '^digits_cnn: backend tessel, 2 workers' || true)"
[[ -n "$line" ]] || { echo "$out" | tail -40; fail "no summary line from the example"; }
echo "$line ($((SECONDS - start)) s)"
acc="$(echo "$line" | sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/')"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$acc') >= 85.0 else 1)" ||
  fail "test accuracy $acc% < 85% after 3 epochs"
echo "1 passed, 0 failed"
