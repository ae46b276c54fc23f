"""Runs tessel-launch --nproc_per_node=2 --servers=2 -- COMMAND... and checks
it exits 0 and rank 0's output contains --expect.

Usage: launch_and_check.py --launch=BIN --expect=TEXT -- COMMAND ARGS...
"""
import argparse
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--launch", required=True)
ap.add_argument("--expect", required=True)
ap.add_argument("command", nargs=argparse.REMAINDER)
args = ap.parse_args()
command = args.command[1:] if args.command[:1] == ["--"] else args.command
run = subprocess.run([args.launch, "--nproc_per_node=2", "--servers=2", "--job=check",
                      "--timeout_s=240", "--"] + command, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True, timeout=300)
print(run.stdout[-8000:])
if run.returncode != 0:
    sys.exit(f"FAIL: tessel-launch exited {run.returncode}")
if args.expect not in run.stdout:
    sys.exit(f"FAIL: rank 0 did not print {args.expect!r}")
print("OK")
