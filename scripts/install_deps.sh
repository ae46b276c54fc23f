#!/usr/bin/env bash
# Installs what Tessel needs from Debian 12's repository, and nothing else.
# Idempotent: packages already present are skipped, and `apt-get update` runs
# only when something is missing. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  # Build: Bazel 4.2.3 and the rules it needs, offline.
  bazel-bootstrap bazel-platforms bazel-rules-java bazel-rules-proto bazel-skylib
  pkg-config g++ python3
  # Libraries.
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libucx-dev ucx-utils libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libxxhash-dev libcli11-dev libyaml-cpp-dev
  # The registry's etcd backend: tests start a real etcd on loopback.
  etcd-server etcd-client
  # Baselines and interop in tests and benchmarks; fuzzing (libFuzzer).
  openmpi-bin libopenmpi-dev python3-numpy clang libclang-rt-14-dev
  # Mutual TLS: certificates (scripts/gen_certs.sh), OpenSSL headers (rpc/tls.cc).
  openssl libssl-dev
  # OCI images built offline from Debian packages (deploy/image/build.sh).
  mmdebstrap umoci
  # Network namespaces as hosts in multi-host tests (tests/netns.py): ip, ss,
  # tc; iptables drops packets for the network faults of tests/chaos.
  iproute2 iptables
  # The manifest test (tests/manifests_test.py) reads kustomize's YAML.
  python3-yaml
  # Observability: promtool checks every /metrics scrape (tests/metrics_test.py);
  # headless Chromium renders the registry's status page (tests/status_page_test.py).
  prometheus chromium
  # The Python package (python/): pybind11 and Python's headers to build it;
  # PyTorch (CPU) and scikit-learn's digits for tessel.torch, its tests and
  # examples, all run by /usr/bin/python3.
  pybind11-dev python3-dev python3-torch python3-sklearn
  # The wheel's test installs it into a fresh virtual environment (//python:wheel_test).
  python3-venv
  # The model zoo (//python:zoo_test, benchmarks/zoo_bench.py): torchvision's ResNet-18.
  python3-torchvision
)

# Not Debian packages: the npm packages that validate Kubernetes manifests
# (deploy/validate/install.sh: pinned, into /var/cache/tessel-npm; installs
# Debian's nodejs and npm only when node is missing). A failure here does not
# stop the rest: only //tests:manifests_test needs them, and says so.
npm_deps() {
  bash "$(dirname "$0")/../deploy/validate/install.sh" ||
    echo "install_deps: warning: deploy/validate/install.sh failed; //tests:manifests_test will fail" >&2
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  npm_deps
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing ${missing[*]}; run as root (or with sudo) to install them" >&2
  exit 1
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
npm_deps
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: note: /usr/local/cuda/bin/nvcc not found; //gpu targets need the CUDA toolkit" >&2
fi
