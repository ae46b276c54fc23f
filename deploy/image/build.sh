#!/usr/bin/env bash
# Builds Tessel's OCI images offline from Debian packages (mmdebstrap + umoci):
#
#   tessel:<release>      CPU image: the four binaries, the Debian runtime
#                         libraries they load, CA certificates; no CUDA
#   tessel:<release>-gpu  the CPU image plus one layer with the CUDA runtime
#                         (libcudart) under /usr/local/cuda/lib64
#
# Output (DIR, default ./image-out):
#   DIR/tessel-oci              OCI image layout holding the requested tags
#   DIR/tessel-<tag>.tar        one OCI archive per tag (podman load, skopeo
#                               copy oci-archive:, ctr images import)
#
# Usage (as root: mmdebstrap extracts packages with their owners and modes):
#   deploy/image/build.sh [--out DIR] [--variant cpu|gpu|all]
#       [--bin PATH ...]      prebuilt tessel-registry, tessel-server,
#                             tessel-train, tesselctl (all four); without
#                             --bin they are built with bazel
#       [--cache DIR]         .debs kept between runs
#                             (default /var/cache/tessel-image; --cache= off)
#       [--cuda DIR]          CUDA toolkit for the gpu variant (/usr/local/cuda)
#       [--suite NAME]        Debian suite (default: this host's, bookworm)
#
# Packages: the runtime libraries are found from the binaries themselves:
# ldd of each binary (and of the UCX and verbs modules UCX loads with dlopen)
# -> dpkg -S -> package names, installed with mmdebstrap's "extract" variant
# from the host's apt sources. Hard dependencies that apt pulls in but no
# binary loads (adduser, passwd, PAM, debconf, perl: maintainer-script tools)
# are removed again, so the image holds no shell and no package manager.
# Binaries are copied with debug sections stripped (symbols kept).
set -euo pipefail

# Bazel tests and sudo may run with a PATH without sbin (chroot, ldconfig).
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
REPO="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
OUT="$PWD/image-out"
VARIANT="all"
CACHE="/var/cache/tessel-image"
CUDA="/usr/local/cuda"
SUITE=""
BINS=()
NAMES=(tessel-registry tessel-server tessel-train tesselctl)
TARGETS=(//registry:tessel-registry //server:tessel-server //tools:tessel-train //client:tesselctl)
UID_TESSEL=65532
IMAGE_NAME=tessel
MULTIARCH="x86_64-linux-gnu"

die() {
  echo "build.sh: $*" >&2
  exit 1
}
usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
T_STEP=""
step() { # prints the previous step's time, then the new step's title
  [ -z "$T_STEP" ] || echo "   ($(since "$T_STEP"))"
  T_STEP=$(now)
  [ $# -eq 0 ] || echo "== $*"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#*=}"; shift ;;
    --variant) VARIANT="$2"; shift 2 ;;
    --variant=*) VARIANT="${1#*=}"; shift ;;
    --bin) BINS+=("$2"); shift 2 ;;
    --bin=*) BINS+=("${1#*=}"); shift ;;
    --cache) CACHE="$2"; shift 2 ;;
    --cache=*) CACHE="${1#*=}"; shift ;;
    --cuda) CUDA="$2"; shift 2 ;;
    --cuda=*) CUDA="${1#*=}"; shift ;;
    --suite) SUITE="$2"; shift 2 ;;
    --suite=*) SUITE="${1#*=}"; shift ;;
    -h|--help) usage 0 ;;
    *) echo "build.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
case "$VARIANT" in cpu|gpu|all) ;; *) die "--variant must be cpu, gpu or all (got '$VARIANT')" ;; esac
[ "$(id -u)" -eq 0 ] || die "run as root: mmdebstrap --mode=root extracts packages as root"
for tool in mmdebstrap umoci dpkg-deb ldconfig objcopy python3; do
  command -v "$tool" >/dev/null || die "$tool not found; run scripts/install_deps.sh"
done
if [ -z "$SUITE" ]; then
  SUITE="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  [ -n "$SUITE" ] || die "cannot tell this host's Debian suite; pass --suite"
fi
T_ALL=$(now)

# --- the binaries ---------------------------------------------------------
declare -A BIN
if [ ${#BINS[@]} -eq 0 ]; then
  step "building ${TARGETS[*]} with bazel"
  t=$(now)
  (cd "$REPO" && bazel build "${TARGETS[@]}")
  bazel_bin="$(cd "$REPO" && bazel info bazel-bin 2>/dev/null)"
  BINS=("$bazel_bin/registry/tessel-registry" "$bazel_bin/server/tessel-server"
        "$bazel_bin/tools/tessel-train" "$bazel_bin/client/tesselctl")
  echo "   bazel: $(since "$t")"
fi
for b in "${BINS[@]}"; do
  [ -f "$b" ] && [ -x "$b" ] || die "--bin $b: not an executable file"
  name="$(basename "$b")"
  [[ " ${NAMES[*]} " == *" $name "* ]] || die "--bin $b: not one of ${NAMES[*]}"
  BIN[$name]="$(readlink -f "$b")"
done
for name in "${NAMES[@]}"; do
  [ -n "${BIN[$name]:-}" ] || die "no $name given (--bin PATH for each of ${NAMES[*]})"
done

# One version line from all four binaries: "tessel 0.1.0 (wire v1, checkpoint v1)".
VERSION_LINE=""
for name in "${NAMES[@]}"; do
  line="$("${BIN[$name]}" --version 2>/dev/null | head -n1)" || die "$name --version failed"
  [[ "$line" == "tessel "* ]] || die "$name --version printed '$line', not 'tessel <release> (...)'"
  [ -z "$VERSION_LINE" ] || [ "$line" == "$VERSION_LINE" ] ||
    die "$name --version says '$line' but ${NAMES[0]} says '$VERSION_LINE': mixed builds"
  VERSION_LINE="$line"
done
RELEASE="$(echo "$VERSION_LINE" | awk '{print $2}')"
[[ "$RELEASE" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "cannot read a release from '$VERSION_LINE'"
echo "   version: $VERSION_LINE"

# The CPU image carries no CUDA: no binary may need libcudart.
for name in "${NAMES[@]}"; do
  if ldd "${BIN[$name]}" | grep -q 'libcudart'; then
    die "$name links libcudart ($(ldd "${BIN[$name]}" | grep libcudart | xargs)); the images \
find CUDA at run time (//gpu:detect) and must not need it to start"
  fi
done

# --- the runtime packages: ldd -> dpkg -S ----------------------------------
# Library paths a binary or module loads (and the dynamic loader).
libs_of() {
  ldd "$1" | awk -v f="$1" '
    /not found/ { print "NOTFOUND " $1 " (needed by " f ")"; next }
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }'
}
# dpkg knows each file under one spelling (/lib/... or /usr/lib/..., before or
# after symlinks): every spelling of a library, for one `dpkg -S` call.
spellings_of() {
  local c
  for c in "$1" "$(readlink -f "$1")"; do
    printf '%s\n' "$c" "${c#/usr}" "/usr$c"
  done
}
step "finding the runtime packages (ldd -> dpkg -S)"
objects=("${BIN[@]}")
# UCX loads its transports, and libibverbs its NIC drivers, with dlopen: ldd
# of the binaries does not see them, so their libraries are added here.
for dir in "/usr/lib/$MULTIARCH/ucx" "/usr/lib/$MULTIARCH/libibverbs"; do
  [ -d "$dir" ] || continue
  while IFS= read -r f; do objects+=("$f"); done < <(find "$dir" -maxdepth 1 -name '*.so*' -type f)
done
declare -A PKG_OF_LIB OWNER
mapfile -t libs < <({
  for o in "${objects[@]}"; do libs_of "$o"; done
  printf '%s\n' "${objects[@]:${#NAMES[@]}}"  # the modules themselves
} | sort -u)
for l in "${libs[@]}"; do
  [[ "$l" != NOTFOUND* ]] || die "a library is missing on this host: ${l#NOTFOUND }"
done
mapfile -t spellings < <(for l in "${libs[@]}"; do spellings_of "$l"; done | sort -u)
# "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6" -> OWNER[/lib/...]=libc6
while IFS= read -r line; do
  [[ "$line" == */* && "$line" != diversion* ]] || continue
  pkg="${line%%: /*}"
  OWNER["/${line#*: /}"]="${pkg%%[:,]*}"
done < <(dpkg -S "${spellings[@]}" 2>/dev/null || true)
for l in "${libs[@]}"; do
  while IFS= read -r v; do
    if [ -n "${OWNER[$v]:-}" ]; then
      PKG_OF_LIB[$l]="${OWNER[$v]}"
      break
    fi
  done < <(spellings_of "$l")
  [ -n "${PKG_OF_LIB[$l]:-}" ] ||
    die "$l (loaded by the binaries) belongs to no Debian package; the image is built from \
Debian packages only"
done
# base-files: /etc/os-release and the directory tree; netbase: /etc/services,
# /etc/protocols; ca-certificates: the Mozilla roots (bundled below).
mapfile -t PACKAGES < <(printf '%s\n' base-files netbase ca-certificates "${PKG_OF_LIB[@]}" | sort -u)
echo "   ${#libs[@]} libraries from ${#PACKAGES[@]} packages: ${PACKAGES[*]}"

# --- the root filesystem: mmdebstrap --variant=extract ---------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tessel-image.XXXXXX")"
cleanup() { rm -rf --one-file-system "$WORK"; }
trap cleanup EXIT
ROOT="$WORK/rootfs"
EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH="$EPOCH"

hooks=()
if [ -n "$CACHE" ]; then
  mkdir -p "$CACHE/archives"
  # The last run's .debs go in before apt runs (apt downloads only what it
  # does not have) and this run's come out after extraction. Measured here
  # against this host's mirror the cache saves nothing (the mirror serves
  # 18 MB in under a second); on a slow link it saves those 18 MB. The
  # package lists are fetched every time (about 9 MB): caching them too (51 MB
  # unpacked) made no measurable difference. One build at a time uses the cache.
  exec {lock}>"$CACHE/.lock"
  flock "$lock"
  hooks+=(
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"'
    --setup-hook="sync-in $CACHE/archives /var/cache/apt/archives"
    --extract-hook="sync-out /var/cache/apt/archives $WORK/debs"
  )
else
  hooks+=(--extract-hook="sync-out /var/cache/apt/archives $WORK/debs")
fi
# The list of packages extracted (chroot paths of their .debs).
hooks+=(--extract-hook='printf "%s\n" $MMDEBSTRAP_ESSENTIAL > "$1/.tessel-extracted"')

step "mmdebstrap $SUITE (extract: ${#PACKAGES[@]} packages and their dependencies)"
t=$(now)
mkdir -p "$WORK/debs"
include="$(IFS=,; echo "${PACKAGES[*]}")"
mmdebstrap --mode=root --variant=extract --quiet \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="$include" \
  "${hooks[@]}" \
  "$SUITE" "$ROOT" >"$WORK/mmdebstrap.log" 2>&1 ||
  { cat "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed (log above)"; }
T_MMDEBSTRAP="$(since "$t")"
mapfile -t EXTRACTED < <(sed 's|^/var/cache/apt/archives/||' "$ROOT/.tessel-extracted")
rm -f "$ROOT/.tessel-extracted"
if [ -n "$CACHE" ]; then
  # The cache keeps exactly this run's packages (older versions go).
  find "$CACHE/archives" -maxdepth 1 -name '*.deb' -type f -delete
  for deb in "${EXTRACTED[@]}"; do cp -p "$WORK/debs/$deb" "$CACHE/archives/"; done
  flock -u "$lock"
fi
echo "   mmdebstrap: $T_MMDEBSTRAP ($(du -sh "$ROOT" | cut -f1) extracted)"

# --- trim to what the binaries load ----------------------------------------
step "removing dependencies no binary loads"
declare -A KEEP
for p in "${PACKAGES[@]}"; do KEEP[$p]=1; done
mkdir -p "$ROOT/var/lib/dpkg/status.d"
dropped=()
kept_dirs="$WORK/kept-dirs"
: >"$kept_dirs"
for deb in "${EXTRACTED[@]}"; do
  f="$WORK/debs/$deb"
  [ -f "$f" ] || die "extracted package $deb not found in $WORK/debs"
  pkg="$(dpkg-deb -f "$f" Package)"
  if [ -n "${KEEP[$pkg]:-}" ]; then
    # For image scanners (trivy, grype): which Debian packages are inside.
    dpkg-deb -f "$f" >"$ROOT/var/lib/dpkg/status.d/$pkg"
    dpkg-deb --fsys-tarfile "$f" | tar -t | grep '/$' >>"$kept_dirs" || true
  else
    dropped+=("$pkg")
  fi
done
for deb in "${EXTRACTED[@]}"; do
  f="$WORK/debs/$deb"
  pkg="$(dpkg-deb -f "$f" Package)"
  [ -z "${KEEP[$pkg]:-}" ] || continue
  dpkg-deb --fsys-tarfile "$f" | tar -t >>"$WORK/dropped-files"
done
# Files and links first, then the dropped packages' directories left empty
# (deepest first; directories a kept package ships stay).
if [ -s "$WORK/dropped-files" ]; then
  { grep -v '/$' "$WORK/dropped-files" || true; } | sed "s|^\./|$ROOT/|" | tr '\n' '\0' |
    xargs -0 -r rm -f
  { grep '/$' "$WORK/dropped-files" || true; } | { grep -vxFf "$kept_dirs" || true; } |
    sort -ru | sed "s|^\./|$ROOT/|" | tr '\n' '\0' | xargs -0 -r rmdir --ignore-fail-on-non-empty 2>/dev/null || true
fi
echo "   removed ${#dropped[@]} packages: ${dropped[*]:-none}"
# Documentation (but copyright files), manuals, translations, and glibc's
# iconv modules (gconv, 8 MB; nothing here converts character sets). Removed
# after extraction: mmdebstrap's --dpkgopt=path-exclude filters every package
# through mmtarfilter, measured 4 s slower for the same result.
find "$ROOT/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$ROOT"/usr/share/{man,info,locale,lintian,bug} "$ROOT/usr/lib/$MULTIARCH/gconv"
# No package manager in the image: its state and configuration go.
rm -rf "$ROOT/etc/apt" "$ROOT/etc/dpkg" "$ROOT/var/lib/apt" "$ROOT/var/cache/apt" \
  "$ROOT/var/cache/debconf" "$ROOT/var/log"/* "$ROOT/var/lib/dpkg/info" \
  "$ROOT/var/lib/dpkg/status" "$ROOT/var/lib/dpkg/available" "$ROOT/var/lib/dpkg"/*-old \
  "$ROOT/var/lib/dpkg/triggers" "$ROOT/var/lib/dpkg/updates" "$ROOT/var/lib/dpkg/alternatives" \
  "$ROOT/var/lib/dpkg/arch" "$ROOT/var/lib/dpkg/diversions" "$ROOT/var/lib/dpkg/statoverride" \
  "$ROOT/var/lib/dpkg/lock"*

# --- configuration, user, certificates, binaries ---------------------------
step "user, certificates, binaries"
cat >"$ROOT/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
tessel:x:$UID_TESSEL:$UID_TESSEL:tessel:/var/lib/tessel:/usr/sbin/nologin
EOF
cat >"$ROOT/etc/group" <<EOF
root:x:0:
nogroup:x:65534:
tessel:x:$UID_TESSEL:
EOF
printf 'hosts: files dns\npasswd: files\ngroup: files\n' >"$ROOT/etc/nsswitch.conf"
echo 'include /etc/ld.so.conf.d/*.conf' >"$ROOT/etc/ld.so.conf"
# What update-ca-certificates (ca-certificates' maintainer script, not run in
# an extract) would write: every Mozilla root in one bundle, where OpenSSL,
# gRPC and Go look for it.
mkdir -p "$ROOT/etc/ssl/certs" "$ROOT/usr/lib/ssl"
find "$ROOT/usr/share/ca-certificates" -name '*.crt' -type f | LC_ALL=C sort |
  while IFS= read -r c; do cat "$c"; [ -z "$(tail -c1 "$c")" ] || echo; done \
  >"$ROOT/etc/ssl/certs/ca-certificates.crt"
ncerts="$(grep -c 'BEGIN CERTIFICATE' "$ROOT/etc/ssl/certs/ca-certificates.crt" || true)"
[ "$ncerts" -gt 0 ] || die "no CA certificates found in the ca-certificates package"
ln -sfn /etc/ssl/certs "$ROOT/usr/lib/ssl/certs"
ln -sfn /etc/ssl/certs/ca-certificates.crt "$ROOT/usr/lib/ssl/cert.pem"
mkdir -p "$ROOT/usr/local/bin" "$ROOT/var/lib/tessel/checkpoints" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"
chown -R "$UID_TESSEL:$UID_TESSEL" "$ROOT/var/lib/tessel"
for name in "${NAMES[@]}"; do
  objcopy --strip-debug "${BIN[$name]}" "$ROOT/usr/local/bin/$name"
  chmod 0755 "$ROOT/usr/local/bin/$name"
done
ldconfig -r "$ROOT"
# A kept package may ship a library that needs a removed one (libgrpc29's
# protoc plugin support needs libprotoc): no binary loads it (else its
# package would be kept), so it goes too, and so on until the image's own
# loader resolves every shared object in it.
unloadable=()
while :; do
  broken=()
  while IFS= read -r -d '' so; do
    rel="/${so#"$ROOT"/}"
    [[ "$rel" != */ld-linux* ]] || continue
    out="$(chroot "$ROOT" /lib64/ld-linux-x86-64.so.2 --list "$rel" 2>&1)" && [[ "$out" != *"not found"* ]] ||
      broken+=("$so")
  done < <(find "$ROOT/usr/lib" "$ROOT/usr/local" -name '*.so*' -type f -print0)
  [ ${#broken[@]} -gt 0 ] || break
  for so in "${broken[@]}"; do
    rm -f "$so"
    find "$ROOT/usr/lib" -type l -lname "*$(basename "$so")" -delete
    unloadable+=("/${so#"$ROOT"/}")
  done
  ldconfig -r "$ROOT"
done
rm -rf "$ROOT/var/cache/ldconfig"
[ ${#unloadable[@]} -eq 0 ] || echo "   removed libraries needing removed packages: ${unloadable[*]}"
# Files made here get the build's timestamp, as the packages' files have theirs.
find "$ROOT" -newermt "@$EPOCH" -exec touch -h -d "@$EPOCH" {} +
echo "   $ncerts CA certificates; binaries: $(du -ch "$ROOT"/usr/local/bin/* | tail -n1 | cut -f1)"

# --- OCI images --------------------------------------------------------------
LAYOUT="$OUT/tessel-oci"
CPU_TAG="$RELEASE"
GPU_TAG="$RELEASE-gpu"
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
REVISION="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
mkdir -p "$OUT"
rm -rf "$LAYOUT"
step "OCI layout $LAYOUT: tessel:$CPU_TAG"
t=$(now)
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$CPU_TAG"
# The image has no shell: PATH serves exec-form commands (manifests name
# binaries), and Cmd prints the version when nothing else is asked.
umoci config --image "$LAYOUT:$CPU_TAG" --no-history \
  --created "$CREATED" --author "Tessel" --architecture amd64 --os linux \
  --config.user "$UID_TESSEL:$UID_TESSEL" --config.workingdir /var/lib/tessel \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env HOME=/var/lib/tessel \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.cmd=/usr/local/bin/tessel-server --config.cmd=--version \
  --config.label org.opencontainers.image.title=tessel \
  --config.label "org.opencontainers.image.description=Tessel parameter service: tessel-registry, tessel-server, tessel-train, tesselctl (CPU; no CUDA)" \
  --config.label "org.opencontainers.image.version=$RELEASE" \
  --config.label "org.opencontainers.image.revision=$REVISION" \
  --config.label "org.opencontainers.image.created=$CREATED" \
  --config.label "org.opencontainers.image.base.name=debian:$SUITE" \
  --config.label "tessel.image.variant=cpu" \
  --config.label "tessel.image.version-line=$VERSION_LINE"
umoci insert --image "$LAYOUT:$CPU_TAG" --history.created "$CREATED" \
  --history.created_by "deploy/image/build.sh: Debian $SUITE runtime packages (${PACKAGES[*]}) + Tessel binaries" \
  "$ROOT" /

if [ "$VARIANT" != cpu ]; then
  step "gpu variant: CUDA runtime layer"
  cudart=()
  for d in "$CUDA/lib64" "$CUDA/targets/x86_64-linux/lib"; do
    if compgen -G "$d/libcudart.so.*" >/dev/null; then
      cudart=("$d"/libcudart.so*)
      break
    fi
  done
  [ ${#cudart[@]} -gt 0 ] ||
    die "no libcudart.so.* under $CUDA/lib64 or $CUDA/targets/x86_64-linux/lib (--cuda DIR; or --variant cpu)"
  GPU="$WORK/gpu-layer"
  GPU_ROOT="$WORK/gpu-rootfs"
  mkdir -p "$GPU/usr/local/cuda/lib64" "$GPU/etc/ld.so.conf.d"
  cp -a "${cudart[@]}" "$GPU/usr/local/cuda/lib64/"
  echo /usr/local/cuda/lib64 >"$GPU/etc/ld.so.conf.d/tessel-cuda.conf"
  # The loader's cache with the CUDA directory in it: DetectCuda's
  # dlopen("libcudart.so.N") finds the library through it.
  cp -a "$ROOT" "$GPU_ROOT"
  cp -a "$GPU/." "$GPU_ROOT/"
  ldconfig -r "$GPU_ROOT"
  rm -rf "$GPU_ROOT/var/cache/ldconfig"
  cp -a "$GPU_ROOT/etc/ld.so.cache" "$GPU/etc/ld.so.cache"
  find "$GPU" "$GPU_ROOT" -newermt "@$EPOCH" -exec touch -h -d "@$EPOCH" {} +
  cuda_version="$(basename "$(readlink -f "${cudart[0]}")" | sed 's/^libcudart\.so\.//')"
  umoci tag --image "$LAYOUT:$CPU_TAG" "$GPU_TAG"
  umoci insert --image "$LAYOUT:$GPU_TAG" --history.created "$CREATED" \
    --history.created_by "deploy/image/build.sh: CUDA runtime libcudart.so.$cuda_version from $CUDA" \
    "$GPU" /
  umoci config --image "$LAYOUT:$GPU_TAG" --no-history --created "$CREATED" \
    --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    --config.label "org.opencontainers.image.description=Tessel parameter service: tessel-registry, tessel-server, tessel-train, tesselctl, with the CUDA runtime (libcudart $cuda_version)" \
    --config.label "tessel.image.variant=gpu" \
    --config.label "tessel.image.cuda-runtime=$cuda_version"
  [ "$VARIANT" != gpu ] || umoci rm --image "$LAYOUT:$CPU_TAG"
fi
umoci gc --layout "$LAYOUT"
T_UMOCI="$(since "$t")"

# --- archives and sizes ------------------------------------------------------
TAGS=()
[ "$VARIANT" == gpu ] || TAGS+=("$CPU_TAG")
[ "$VARIANT" == cpu ] || TAGS+=("$GPU_TAG")
step "archives and sizes"
for tag in "${TAGS[@]}"; do
  one="$WORK/archive-$tag"
  cp -a "$LAYOUT" "$one"
  for other in "${TAGS[@]}"; do
    [ "$other" == "$tag" ] || umoci rm --image "$one:$other"
  done
  umoci gc --layout "$one"
  # In an archive the reference names the image as well as the tag, so that
  # `podman load` makes localhost/tessel:<tag> and `ctr images import`
  # docker.io/library/tessel:<tag> (the layout keeps bare tags, as umoci and
  # `skopeo copy oci:DIR:<tag>` expect).
  python3 - "$one/index.json" "$IMAGE_NAME:$tag" <<'EOF_PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for m in index["manifests"]:
    m.setdefault("annotations", {})["org.opencontainers.image.ref.name"] = ref
json.dump(index, open(path, "w"), separators=(",", ":"))
EOF_PY
  tar -C "$one" -cf "$OUT/tessel-$tag.tar" oci-layout index.json blobs
  rm -rf "$one"
done
python3 - "$LAYOUT" "$OUT" "$ROOT" "${GPU_ROOT:-}" "${TAGS[@]}" <<'EOF'
import json, os, sys
layout, out, cpu_root, gpu_root, tags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]

def blob(d):
    algo, h = d.split(":")
    return os.path.join(layout, "blobs", algo, h)

def tree_bytes(root):
    total = 0
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total

index = json.load(open(os.path.join(layout, "index.json")))
mb = lambda n: "%.1f MB" % (n / 1e6)
for m in index["manifests"]:
    tag = m.get("annotations", {}).get("org.opencontainers.image.ref.name")
    if tag not in tags:
        continue
    manifest = json.load(open(blob(m["digest"])))
    layers = [l["size"] for l in manifest["layers"]]
    compressed = sum(layers) + manifest["config"]["size"] + m["size"]
    root = gpu_root if tag.endswith("-gpu") else cpu_root
    unpacked = tree_bytes(root)
    archive = os.path.getsize(os.path.join(out, "tessel-%s.tar" % tag))
    print("   tessel:%-12s manifest %s  layers %s (compressed %s)  unpacked %s  archive %s" % (
        tag, m["digest"][:19], " + ".join(mb(l) for l in layers), mb(compressed), mb(unpacked),
        mb(archive)))
EOF
step
echo "   mmdebstrap $T_MMDEBSTRAP, umoci $T_UMOCI, total $(since "$T_ALL")"
echo "OK: $LAYOUT (tags: ${TAGS[*]}), $(printf "$OUT/tessel-%s.tar " "${TAGS[@]}")"
