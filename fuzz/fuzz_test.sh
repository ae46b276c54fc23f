#!/usr/bin/env bash
# //fuzz:fuzz_test: runs fuzz/run_fuzzers.sh on the sources in the test's
# runfiles. A missing clang or libFuzzer runtime fails the test with what to
# install; it is never skipped.
set -uo pipefail
src="${TEST_SRCDIR:?run this through: bazel test //fuzz:fuzz_test}/${TEST_WORKSPACE:-tessel}"
export TESSEL_FUZZ_SRC="$src"
exec bash "$src/fuzz/run_fuzzers.sh"
