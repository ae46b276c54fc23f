#!/usr/bin/env bash
# The README's second command: install what is missing and run every test
# (unit tests, and integration tests that start real processes on loopback),
# in three runs:
#   plain       bazel test //...                       (-c opt, the build users run)
#   asan+ubsan  bazel test --config=sanitize //...     (AddressSanitizer and
#               UndefinedBehaviorSanitizer together; the fuzz test is left out:
#               it builds its own asan+ubsan fuzzers, and so are tests tagged
#               "plain_only": images, manifests and network namespaces, which
#               exercise packaging and deployment, not our code's memory, the
#               HTTP/CLI/Chromium drivers, the demo's and checkpoint CLI's
#               many-run drivers and the operator, wedge, worker-death,
#               elastic and end-to-end TLS suites (CI time; the processes
#               they start run under ASan in the fault-injection and
#               hybrid-recovery suites), and
#               the unit tests of flags, logs, CLI output and config
#               files (runtime, rpc's flag tests, client, testing, tools'
#               launcher units: parsing that a sanitizer adds little to),
#               the Python tests (//python),
#               whose extension /usr/bin/python3 loads without a sanitizer
#               runtime)
#   tsan        bazel test --config=tsan, the tests tagged "concurrency"
#               (threads in one process: transports, peer groups, registry,
#               health checks, checkpointer, workers on threads)
# Ends with one line "N passed, N failed" counting test cases of all runs.
#
# TESSEL_TEST_RUNS picks runs (default "plain sanitize tsan"; e.g.
# TESSEL_TEST_RUNS=plain for a quick check). Extra arguments go to every
# `bazel test` (e.g. --test_output=all); with arguments and no
# TESSEL_TEST_RUNS, only the plain run is made.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || exit 1
if [ $# -gt 0 ]; then
  runs="${TESSEL_TEST_RUNS:-plain}"
else
  runs="${TESSEL_TEST_RUNS:-plain sanitize tsan}"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
count_args=()
rc=0
for run in $runs; do
  case "$run" in
    plain) flags=(); label=plain; filter=() ;;
    # --build_tests_only: the sanitizer runs build only the tests they run
    # (and what those depend on), not every binary and filtered-out test.
    sanitize) flags=(--config=sanitize); label=asan+ubsan; filter=(--test_tag_filters=-fuzz,-plain_only --build_tests_only) ;;
    tsan) flags=(--config=tsan); label=tsan; filter=(--test_tag_filters=concurrency --build_tests_only) ;;
    *) echo "test.sh: unknown run '$run' (plain, sanitize, tsan)" >&2; exit 2 ;;
  esac
  echo "== test run: $label (bazel test ${flags[*]} ${filter[*]} //... $*)"
  bazel test "${flags[@]}" "${filter[@]}" //... "$@" 2>&1 | tee "$tmp/$run.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  # Each run has its own output folder (--platform_suffix), so its results stay.
  count_args+=("$label" "$tmp/$run.log" "$(bazel info "${flags[@]}" bazel-testlogs 2>/dev/null)")
done
python3 scripts/count_tests.py "${count_args[@]}"
count_rc=$?
[ "$rc" -eq 0 ] && [ "$count_rc" -eq 0 ]
