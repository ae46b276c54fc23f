#!/usr/bin/env bash
# Builds Tessel's libFuzzer targets with clang and runs each one for a bounded
# time on a copy of its seed corpus (fuzz/corpus/<target>/). Bazel builds with
# GCC here, which has no libFuzzer, so the targets are built outside Bazel,
# straight from the repository's sources. See fuzz/README.md.
#
# Usage:
#   fuzz/run_fuzzers.sh [TARGET...]            build, then fuzz TARGETs (default: all)
#   fuzz/run_fuzzers.sh --repro TARGET FILE... build TARGET and run it once on each FILE
#                                              (e.g. an input saved under fuzz/crashes/)
# Targets: wire_header peer_message npy manifest shard_entry job_spec train_state ucx_descriptor
#          data_plane worker_frames peer_group ucx_receiver
#
# Environment:
#   TESSEL_FUZZ_SECONDS  fuzzing time per target, in seconds (default 10)
#   TESSEL_FUZZ_TARGETS  targets to run when none are named (default: all)
#   TESSEL_FUZZ_JOBS     compiles and fuzzers run at once (default: nproc)
#   TESSEL_FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (default 10)
#   TESSEL_FUZZ_SRC      repository root (default: the parent of this script's folder)
#   TESSEL_FUZZ_WORK     build and run folder (default: a new temporary one, removed after
#                        a clean run, kept after a crash)
#   TESSEL_FUZZ_KEEP_GOING=1  go on fuzzing after a crash (libFuzzer's fork mode) to
#                        collect every distinct failure in the time given; still exits 1
#   TESSEL_FUZZ_CXXFLAGS extra compile flags, e.g. -fsanitize-recover=undefined to look
#                        past a known undefined-behaviour report
#   CXX                  clang++ to use (default clang++-14, else clang++)
#
# Exit status: 0 every target ran clean; 1 a target crashed, hung, ran out of
# memory or broke an invariant (the input and the stack are printed); 2 a tool
# is missing or the build failed.
set -uo pipefail

# Each target is fuzz/<target>_fuzzer.cc. What else it links is found by
# following its #includes through the repository: every "dir/x.h" with a
# dir/x.cc beside it adds that source, and "dir/x.pb.h" adds dir/x.proto
# (generated with protoc). One library per header pair, as the tree is laid out.
readonly ALL_TARGETS=(wire_header peer_message npy manifest shard_entry job_spec train_state
  ucx_descriptor data_plane worker_frames peer_group ucx_receiver)
# libFuzzer dictionaries (fuzz/dict/), for targets whose input is text.
declare -A TARGET_DICT=([npy]=npy.dict [manifest]=json.dict [shard_entry]=json.dict)
readonly PKG_MODULES="absl_strings absl_str_format absl_status absl_statusor absl_synchronization absl_hash absl_raw_hash_set protobuf libxxhash libcrypto"
readonly INSTALL_HINT="install them with: apt-get install clang libclang-rt-14-dev (scripts/install_deps.sh)"

SRC="${TESSEL_FUZZ_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
SECONDS_PER_TARGET="${TESSEL_FUZZ_SECONDS:-10}"
TIMEOUT="${TESSEL_FUZZ_TIMEOUT:-10}"
JOBS="${TESSEL_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"

say() { echo "run_fuzzers: $*"; }
die() {  # exit-code message...
  local code=$1; shift
  echo "run_fuzzers: FAIL: $*" >&2
  exit "$code"
}

# ---- arguments
repro=0
targets=()
repro_files=()
if [ "${1:-}" = "--repro" ]; then
  [ $# -ge 3 ] || die 2 "usage: $0 --repro TARGET FILE..."
  repro=1
  targets=("$2")
  shift 2
  for f in "$@"; do repro_files+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
else
  targets=("$@")
  # shellcheck disable=SC2206
  [ ${#targets[@]} -gt 0 ] || targets=(${TESSEL_FUZZ_TARGETS:-${ALL_TARGETS[*]}})
fi
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die 2 "unknown target '$t'; targets: ${ALL_TARGETS[*]}"
done
[[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]] ||
  die 2 "TESSEL_FUZZ_SECONDS must be a positive integer, got '$SECONDS_PER_TARGET'"
[ -f "$SRC/core/wire.h" ] || die 2 "no Tessel sources at $SRC (set TESSEL_FUZZ_SRC)"

# ---- toolchain: a missing tool is a failure, never a silent skip
if [ -z "${CXX:-}" ]; then
  CXX="$(command -v clang++-14 || command -v clang++ || true)"
fi
if [ -z "$CXX" ] || ! command -v "$CXX" >/dev/null; then
  die 2 "clang++ not found; the fuzz targets need clang 14 and its libFuzzer runtime; $INSTALL_HINT"
fi
"$CXX" --version 2>/dev/null | grep -q clang ||
  die 2 "CXX=$CXX is not clang (libFuzzer needs clang); $INSTALL_HINT"
runtime_dir="$("$CXX" -print-runtime-dir 2>/dev/null)"
for rt in fuzzer asan ubsan_standalone; do
  [ -f "$runtime_dir/libclang_rt.$rt-x86_64.a" ] ||
    die 2 "the clang runtime libclang_rt.$rt-x86_64.a is missing from ${runtime_dir:-?}; $INSTALL_HINT"
done
command -v protoc >/dev/null || die 2 "protoc not found; apt-get install protobuf-compiler"
command -v pkg-config >/dev/null || die 2 "pkg-config not found; apt-get install pkg-config"
# shellcheck disable=SC2086
pkg-config --exists $PKG_MODULES ||
  die 2 "pkg-config cannot find some of: $PKG_MODULES; run scripts/install_deps.sh"

# ---- work folder
if [ -n "${TESSEL_FUZZ_WORK:-}" ]; then
  WORK="$TESSEL_FUZZ_WORK"
  mkdir -p "$WORK"
  keep_work=1
else
  WORK="$(mktemp -d "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/tessel-fuzz.XXXXXX")"
  keep_work=0
fi
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR" "$WORK/gen" "$WORK/obj" "$WORK/bin" "$WORK/log"

# ---- build
# shellcheck disable=SC2086
read -r -a PKG_CFLAGS <<<"$(pkg-config --cflags $PKG_MODULES)"
# shellcheck disable=SC2086
read -r -a PKG_LIBS <<<"$(pkg-config --libs $PKG_MODULES)"
# shellcheck disable=SC2054
SAN=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
# -ffile-prefix-map: invariant reports name files as in the repository, not by
# the (sandbox) path they were compiled from.
# shellcheck disable=SC2206
CXXFLAGS=(-std=c++17 -O1 -g "${SAN[@]}" -I"$SRC" -I"$WORK/gen" "-ffile-prefix-map=$SRC/="
  "-ffile-prefix-map=$WORK/gen/=" "${PKG_CFLAGS[@]}"
  ${TESSEL_FUZZ_CXXFLAGS:-})
# Our fuzz targets build warning-free; the library sources get clang's
# defaults only, so a clang-only warning elsewhere cannot break this test.
FUZZ_WARNINGS=(-Wall -Wextra -Werror)

say "sources $SRC"
say "compiler $("$CXX" --version | head -1), work folder $WORK"
start=$(date +%s)
# Runs "$@" in the background, at most $JOBS at once; the log is $WORK/log/$name.log
# and the exit status $WORK/log/$name.rc.
bg_pids=()
spawn() {  # name command...
  local name=$1; shift
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  ( "$@" >"$WORK/log/$name.log" 2>&1; echo $? >"$WORK/log/$name.rc" ) &
  bg_pids+=($!)
}
wait_all() { for p in "${bg_pids[@]}"; do wait "$p" 2>/dev/null; done; bg_pids=(); }

# Repository files `file` includes or imports (repo-relative), one a line.
repo_includes() {  # file
  local inc
  sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
    -e 's/^[[:space:]]*import[[:space:]]*"\([^"]*\.proto\)".*/\1/p' "$SRC/$1" |
    while read -r inc; do
      if [[ "$inc" == *.pb.h ]] && [ -f "$SRC/${inc%.pb.h}.proto" ]; then
        echo "${inc%.pb.h}.proto"
      elif [ -f "$SRC/$inc" ]; then
        echo "$inc"
      fi
    done
}
# Translation units (repo-relative .cc and .proto files) a target needs.
units_of() {  # target
  local -A seen=()
  local work=("fuzz/$1_fuzzer.cc") f dep
  while [ ${#work[@]} -gt 0 ]; do
    f="${work[-1]}"
    unset 'work[-1]'
    [ -z "${seen[$f]:-}" ] || continue
    seen[$f]=1
    case "$f" in
      *.cc | *.proto) echo "$f" ;;
    esac
    for dep in $(repo_includes "$f"); do
      work+=("$dep")
      [[ "$dep" == *.h && -f "$SRC/${dep%.h}.cc" ]] && work+=("${dep%.h}.cc")
      # A class split by concept over files without headers of their own
      # (server/shard_job_hold.cc implements part of shard_job.h): X_*.cc
      # beside X.h, not tests, benchmarks or test helpers.
      if [[ "$dep" == *.h ]]; then
        local part
        for part in "$SRC/${dep%.h}"_*.cc; do
          [ -f "$part" ] || continue
          part="${part#"$SRC"/}"
          case "$part" in *_test.cc | *_bench.cc | *_testing.cc | *_fixture.cc) continue ;; esac
          [ -f "$SRC/${part%.cc}.h" ] || work+=("$part")
        done
      fi
    done
  done
}
obj_of() { local u="${1//\//_}"; echo "$WORK/obj/${u%.*}.o"; }

declare -A target_units=() all_units=()
for t in "${targets[@]}"; do
  [ -f "$SRC/fuzz/${t}_fuzzer.cc" ] || die 2 "no fuzz/${t}_fuzzer.cc under $SRC"
  target_units[$t]="$(units_of "$t" | sort | tr '\n' ' ')"
  for u in ${target_units[$t]}; do all_units[$u]=1; done
done
for u in "${!all_units[@]}"; do
  [[ "$u" == *.proto ]] || continue
  protoc --proto_path="$SRC" --cpp_out="$WORK/gen" "$SRC/$u" >"$WORK/log/protoc.log" 2>&1 ||
    { cat "$WORK/log/protoc.log"; die 2 "protoc failed on $u"; }
done
for u in "${!all_units[@]}"; do
  name="cc_${u//\//_}"
  src_file="$SRC/$u"
  extra=()
  case "$u" in
    *.proto) src_file="$WORK/gen/${u%.proto}.pb.cc" ;;
    fuzz/*) extra=("${FUZZ_WARNINGS[@]}") ;;
    # clang 14 refuses target_clones on function templates (optimizer.cc's
    # kernels), and __builtin_cpu_supports("f16c") (precision.cc's choice of
    # kernel); without them each function has its default, portable
    # version only, which is all fuzzing needs.
    *) extra=('-Dtarget_clones(...)=' '-D__builtin_cpu_supports(feature)=0') ;;
  esac
  spawn "$name" "$CXX" "${CXXFLAGS[@]}" "${extra[@]}" -c "$src_file" -o "$(obj_of "$u")"
done
wait_all
# A library source clang cannot compile is fatal only for a target that needs
# it at link time: following #includes also finds sources of headers that are
# included for a type or a constant only.
declare -A broken=()
for u in "${!all_units[@]}"; do
  [ "$(cat "$WORK/log/cc_${u//\//_}.rc" 2>/dev/null)" = 0 ] || broken[$u]=1
done
for t in "${targets[@]}"; do
  objs=()
  for u in ${target_units[$t]}; do
    if [ -n "${broken[$u]:-}" ]; then
      [[ "$u" == fuzz/* ]] && continue 2  # reported below
    else
      objs+=("$(obj_of "$u")")
    fi
  done
  spawn "ld_$t" "$CXX" "${SAN[@]}" "${objs[@]}" "${PKG_LIBS[@]}" -o "$WORK/bin/${t}_fuzzer"
done
wait_all
build_failed=()
for t in "${targets[@]}"; do
  [ "$(cat "$WORK/log/ld_$t.rc" 2>/dev/null)" = 0 ] && continue
  build_failed+=("$t")
  for u in ${target_units[$t]}; do
    [ -n "${broken[$u]:-}" ] && { echo "---- $t: compiling $u"; tail -30 "$WORK/log/cc_${u//\//_}.log"; }
  done
  [ -f "$WORK/log/ld_$t.log" ] && { echo "---- $t: linking"; tail -30 "$WORK/log/ld_$t.log"; }
done
[ ${#build_failed[@]} -eq 0 ] || die 2 "building failed: ${build_failed[*]}"
for u in "${!broken[@]}"; do
  say "note: $u does not compile with clang ($(grep -m1 'error:' "$WORK/log/cc_${u//\//_}.log" |
    sed 's/.*error: //')); the fuzzers link without it"
done
say "built ${#targets[@]} fuzzer(s) from ${#all_units[@]} sources in $(($(date +%s) - start)) s"
for t in "${targets[@]}"; do
  linked=()
  for u in ${target_units[$t]}; do [ -n "${broken[$u]:-}" ] || linked+=("$u"); done
  say "  $t: ${linked[*]}"
done

export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=0:detect_odr_violation=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1"

# ---- repro mode: run one target on given inputs, show everything
if [ $repro -eq 1 ]; then
  t="${targets[0]}"
  TESSEL_FUZZ_SHOW_INPUT=1 "$WORK/bin/${t}_fuzzer" -timeout="$TIMEOUT" -rss_limit_mb=2048 "${repro_files[@]}"
  rc=$?
  [ $keep_work -eq 1 ] || rm -rf "$WORK"
  if [ $rc -eq 0 ]; then say "$t: every input ran clean"; else say "$t: FAILED (exit $rc)"; fi
  exit $rc
fi

# ---- fuzz
for t in "${targets[@]}"; do
  mkdir -p "$WORK/corpus/$t" "$WORK/artifacts/$t"
  seeds="$SRC/fuzz/corpus/$t"
  [ -d "$seeds" ] && cp -RL "$seeds/." "$WORK/corpus/$t/"
  dict=()
  [ -n "${TARGET_DICT[$t]:-}" ] && dict=(-dict="$SRC/fuzz/dict/${TARGET_DICT[$t]}")
  keep_going=()
  [ "${TESSEL_FUZZ_KEEP_GOING:-0}" = 1 ] &&
    keep_going=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  spawn "run_$t" "$WORK/bin/${t}_fuzzer" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout="$TIMEOUT" -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" "${keep_going[@]}" \
    -artifact_prefix="$WORK/artifacts/$t/" "$WORK/corpus/$t"
done
say "fuzzing ${#targets[@]} target(s) for ${SECONDS_PER_TARGET} s each, $JOBS at a time"
wait_all

# ---- report
stat_of() {  # log key
  sed -n "s/^stat::$2: *\([0-9]*\).*/\1/p" "$1" | tail -1
}
crashed=()
printf '%-12s %10s %9s %7s %14s %6s  %s\n' target execs "execs/s" seeds corpus cov result
for t in "${targets[@]}"; do
  log="$WORK/log/run_$t.log"
  rc="$(cat "$WORK/log/run_$t.rc" 2>/dev/null || echo '?')"
  execs="$(stat_of "$log" number_of_executed_units)"
  rate="$(stat_of "$log" average_exec_per_sec)"
  # The final status line, or the last one before a crash.
  done_line="$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED).* corp: ' "$log" | tail -1)"
  corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<<"$done_line")"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")"
  if [ -z "$execs" ]; then  # fork mode: "#N: cov: C ft: F corp: K exec/s R ..."
    fork_line="$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)"
    execs="$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<<"$fork_line")"
    rate="$(sed -n 's/.* exec\/s \([0-9]*\).*/\1/p' <<<"$fork_line")"
    corp="$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$fork_line")"
    cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$fork_line")"
  fi
  n_seeds="$(find -L "$SRC/fuzz/corpus/$t" -type f 2>/dev/null | wc -l)"
  artifacts=("$WORK"/artifacts/"$t"/*)
  result=ok
  if [ "$rc" != 0 ] || [ -e "${artifacts[0]}" ]; then
    result="FAILED (exit $rc, $(find "$WORK/artifacts/$t" -type f | wc -l) input(s) saved)"
    crashed+=("$t")
  fi
  printf '%-12s %10s %9s %7s %14s %6s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$n_seeds" \
    "${corp:-?}" "${cov:-?}" "$result"
done

for t in "${crashed[@]}"; do
  log="$WORK/log/run_$t.log"
  echo
  echo "==== $t: the fuzzer failed; its report:"
  # From the first sanitizer, libFuzzer or invariant report to the end.
  first="$(grep -n -m1 -E '^==[0-9]+==|FUZZ_CHECK failed|runtime error:|^ALARM|ERROR: libFuzzer|deadly signal' "$log" |
    cut -d: -f1)"
  tail -n +"${first:-1}" "$log" | head -120
  shown=0
  for a in "$WORK"/artifacts/"$t"/*; do
    [ -e "$a" ] || continue
    name="$(basename "$a")"
    if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
      mkdir -p "$TEST_UNDECLARED_OUTPUTS_DIR/$t"
      cp "$a" "$TEST_UNDECLARED_OUTPUTS_DIR/$t/"
    fi
    shown=$((shown + 1))
    if [ $shown -gt 3 ]; then  # keep-going runs can save hundreds
      [ $shown -eq 4 ] && echo "---- more inputs: see $WORK/artifacts/$t/${TEST_UNDECLARED_OUTPUTS_DIR:+ (and the test outputs)}"
      continue
    fi
    echo "---- input $name ($(wc -c <"$a") bytes), first 512 bytes:"
    head -c 512 "$a" | od -A d -t x1z -v
    if [ "$(head -c 1 "$a" | od -A n -t x1 | tr -d ' ')" = 01 ]; then
      # Structure-aware input: show the document or file the target made of it.
      TESSEL_FUZZ_SHOW_INPUT=1 "$WORK/bin/${t}_fuzzer" -runs=1 "$a" 2>&1 |
        sed -n '/^---- generated input/,/^---- end of generated input/p' | head -80
    fi
    if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
      echo "saved in the test's outputs; keep it: unzip -d fuzz/crashes" \
        "bazel-testlogs/fuzz/fuzz_test/test.outputs/outputs.zip '$t/$name'"
    else
      echo "keep it: cp '$a' fuzz/crashes/$t/"
    fi
    echo "replay: fuzz/run_fuzzers.sh --repro $t fuzz/crashes/$t/$name"
  done
done

if [ ${#crashed[@]} -gt 0 ]; then
  say "FAIL: ${#crashed[@]} of ${#targets[@]} target(s) failed: ${crashed[*]}" \
    "$([ $keep_work -eq 1 ] || [ -n "${TEST_TMPDIR:-}" ] || echo "(work folder kept: $WORK)")"
  exit 1
fi
[ $keep_work -eq 1 ] || rm -rf "$WORK"
say "${#targets[@]} target(s) fuzzed for ${SECONDS_PER_TARGET} s each, no crash ($(($(date +%s) - start)) s in all)"
exit 0
