#!/usr/bin/env python3
"""Writes Tessel's wheel (PEP 427) from files Bazel built, with the standard
library only: `bazel build //python:wheel` runs it (python/BUILD).

Usage: build_wheel.py --out=FILE --version=X.Y.Z --tag=cp311-cp311-linux_x86_64
                      DEST=SRC ...

Each DEST=SRC puts the file SRC at DEST inside the wheel (DEST is a path under
the package, e.g. tessel/_bin/tools/tessel-launch); the binaries under
tessel/_bin are installed executable, everything else 0644. The wheel's console scripts are tessel-launch and
tesselctl (tessel/_cli.py). Zip entries carry a fixed date so that the same
inputs make the same bytes.
"""
import argparse
import base64
import hashlib
import stat
import sys
import zipfile

DATE = (2020, 1, 1, 0, 0, 0)  # zip's epoch is 1980; any fixed date does
NAME = "tessel"
SUMMARY = "Tessel: a distributed parameter service for training (worker SDK, tessel.torch, tools)"
ENTRY_POINTS = """[console_scripts]
tessel-launch = tessel._cli:launch
tesselctl = tessel._cli:ctl
"""


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--tag", required=True, help="python-abi-platform, e.g. cp311-cp311-linux_x86_64")
    ap.add_argument("files", nargs="+", help="DEST=SRC")
    args = ap.parse_args()
    entries = []
    for item in args.files:
        dest, sep, src = item.partition("=")
        if not sep or not dest or not src or dest.startswith("/") or ".." in dest.split("/"):
            sys.exit(f"build_wheel: '{item}' is not DEST=SRC with DEST relative inside the wheel")
        entries.append((dest, src, dest.startswith("tessel/_bin/")))
    dests = [d for d, _, _ in entries]
    if len(set(dests)) != len(dests):
        sys.exit("build_wheel: a destination is given twice")

    dist_info = f"{NAME}-{args.version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {args.version}\n"
                f"Summary: {SUMMARY}\nRequires-Python: >=3.11,<3.12\n"
                "Requires-Dist: numpy\n")
    wheel = (f"Wheel-Version: 1.0\nGenerator: tessel build_wheel.py\nRoot-Is-Purelib: false\n"
             f"Tag: {args.tag}\n")
    records = []
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as z:
        def add(path, data, mode):
            info = zipfile.ZipInfo(path, DATE)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(record_line(path, data))

        for dest, src, exe in sorted(entries):
            with open(src, "rb") as f:
                add(dest, f.read(), 0o755 if exe else 0o644)
        add(f"{dist_info}/METADATA", metadata.encode(), 0o644)
        add(f"{dist_info}/WHEEL", wheel.encode(), 0o644)
        add(f"{dist_info}/entry_points.txt", ENTRY_POINTS.encode(), 0o644)
        record_path = f"{dist_info}/RECORD"
        records.append(f"{record_path},,")
        info = zipfile.ZipInfo(record_path, DATE)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        z.writestr(info, "\n".join(records) + "\n", zipfile.ZIP_DEFLATED)


if __name__ == "__main__":
    main()
