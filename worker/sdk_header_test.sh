#!/usr/bin/env bash
# The SDK's public headers must compile in a translation unit that sees no
# gRPC, protobuf, UCX or CUDA header: compile each one alone with g++ -H (which
# lists every header included, transitively) from a copy of just the files
# the SDK may include, and refuse any forbidden one.
set -euo pipefail
root="${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-tessel}"
[ -f "$root/worker/worker.h" ] || root="$PWD"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Only the files this target declares as data: anything else the headers
# include is missing and the compile fails.
for f in "$@"; do
  mkdir -p "$tmp/src/$(dirname "$f")"
  cp "$root/$f" "$tmp/src/$f"
done
fail=0
for h in worker/worker.h worker/options.h worker/reports.h worker/unit_step.h \
  worker/worker_flags.h worker/train_flags.h worker/hybrid.h worker/hybrid_layout.h \
  worker/peer_group.h \
  worker/collectives.h worker/ddp_updater.h; do
  printf '#include "%s"\nint main() { return 0; }\n' "$h" > "$tmp/tu.cc"
  if ! g++ -std=c++17 -fsyntax-only -H -I"$tmp/src" "$tmp/tu.cc" 2> "$tmp/h.txt"; then
    cat "$tmp/h.txt"
    echo "FAIL: $h does not compile with only the SDK's own headers"
    fail=1
    continue
  fi
  bad="$(grep -E '^\.+ ' "$tmp/h.txt" | grep -E 'grpc|protobuf|\.pb\.h|/ucp/|/ucs/|/uct/|cuda' || true)"
  if [ -n "$bad" ]; then
    echo "FAIL: $h includes:"
    echo "$bad"
    fail=1
  else
    echo "ok: $h ($(grep -cE '^\.+ ' "$tmp/h.txt") headers, none of gRPC/protobuf/UCX/CUDA)"
  fi
done
exit $fail
