#!/usr/bin/env bash
# Runs a Python test driver with Debian's /usr/bin/python3 (it sees Debian's
# python3-torch, -numpy and -sklearn; `python3` on PATH may be another one),
# with the tessel package from the runfiles first on PYTHONPATH.
set -euo pipefail
export PYTHONPATH="$PWD/python:$PWD/python/tests${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 "$@"
