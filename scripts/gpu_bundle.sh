#!/usr/bin/env bash
# Packs the GPU checks into .gpu-bundle/ for a machine that has a GPU but not
# this build's libraries (a lent accelerator machine with no Bazel, no Debian
# packages, no network): the CUDA test binaries, gpu_bench and the demo's
# processes, stripped, with every shared library they load that is not glibc's
# own (Debian's gRPC, protobuf, Abseil, UCX and its transport modules, OpenSSL,
# Bazel's _solib libraries of the tests), and scripts/gpu_check.sh to run them.
#
#   bash scripts/gpu_bundle.sh              # builds (-c opt) and packs
#   (then, on the GPU machine, from the repository root)
#   bash .gpu-bundle/gpu_check.sh           # logs and a summary under $OUT
#
# .gpu-bundle/ is ignored by git (.git/info/exclude); carry it to the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(
  //gpu:device_test
  //model:device_layers_test
  //model:device_mlp_test
  //worker:device_staging_test
  //benchmarks:gpu_bench
  //tools:tessel-demo
  //tools:tessel-train
  //server:tessel-server
)
bazel build "${TARGETS[@]}"
path_of() { local rel="${1#//}"; echo "${rel/://}"; }  # //pkg:name -> pkg/name
bin="$(bazel info bazel-bin)"

out=.gpu-bundle
rm -rf "$out"
mkdir -p "$out/lib" "$out/ucx"
grep -qx '/.gpu-bundle/' .git/info/exclude 2>/dev/null || echo '/.gpu-bundle/' >>.git/info/exclude

for t in "${TARGETS[@]}"; do
  rel="$(path_of "$t")"
  mkdir -p "$out/$(dirname "$rel")"
  strip -o "$out/$rel" "$bin/$rel"
done

# Every resolved shared library except the C library's own (the GPU machine's
# glibc is at least Debian 12's, and a foreign ld.so cannot be mixed in).
keep_lib() {
  case "$(basename "$1")" in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | ld-linux* | libresolv.so.*) return 1 ;;
  esac
  return 0
}
copy_deps() {
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    keep_lib "$lib" || continue
    [ -e "$out/lib/$(basename "$lib")" ] || strip -o "$out/lib/$(basename "$lib")" "$(readlink -f "$lib")"
  done
}
for t in "${TARGETS[@]}"; do copy_deps "$bin/$(path_of "$t")"; done
# UCX loads its transports (shared memory, tcp, ...) as modules at run time,
# from UCX_MODULE_DIR; each is copied under every name it has (no links).
for m in /usr/lib/x86_64-linux-gnu/ucx/*.so*; do
  strip -o "$out/ucx/$(basename "$m")" "$(readlink -f "$m")"
  copy_deps "$m"
done
cp scripts/gpu_check.sh "$out/gpu_check.sh"
du -sh "$out"
