"""The console scripts of Tessel's wheel: `tessel-launch` and `tesselctl`.

The wheel (//python:wheel, python/wheel/build_wheel.py) carries the C++
binaries under tessel/_bin in Bazel's layout (tools/tessel-launch next to
server/tessel-server, which tessel-launch starts as the shard servers), and
pip's console-script wrappers call these functions, which replace the Python
process with the binary. The binaries load the Debian 12 libraries that
scripts/install_deps.sh installs (gRPC, UCX, Abseil, OpenSSL).
"""
import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin")


def _exec(relative, name):
    path = os.path.join(_BIN, relative)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: {path} is missing: this tessel package was not installed from its wheel "
                 "(build it with `bazel build //python:wheel`, or run the binary from bazel-bin)")
    os.execv(path, [name] + sys.argv[1:])


def launch():
    """tessel-launch: an embedded registry, shard servers and N workers (docs/launch.md)."""
    _exec("tools/tessel-launch", "tessel-launch")


def ctl():
    """tesselctl: the admin CLI (docs/tools.md)."""
    _exec("client/tesselctl", "tesselctl")
