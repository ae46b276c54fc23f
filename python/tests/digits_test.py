"""The digits example (examples/digits_cnn.py) under tessel-launch: 2 workers,
2 shard servers, reaches >= 95% test accuracy; and the same model trained the
same way under torch's DistributedDataParallel (gloo) in the same run, for
the step-time comparison (printed, never asserted: the machine is shared).

Usage: digits_test.py --launch=tessel-launch --example=digits_cnn.py
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

import driver

LINE = re.compile(r"digits_cnn: backend (\w+), (\d+) workers, (\d+) steps, median step "
                  r"([\d.]+) ms, test accuracy ([\d.]+)%")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, label, extra, env=None):
    cmd = [args.launch, "--nproc_per_node=2", "--servers=2", f"--job=digits-{label}",
           "--timeout_s=400", "--", "/usr/bin/python3", args.example] + extra
    start = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=500, env=env)
    secs = time.monotonic() - start
    m = LINE.search(p.stdout)
    if p.returncode != 0 or m is None:
        print(p.stdout[-6000:])
        sys.exit(f"FAIL: {label}: tessel-launch exited {p.returncode}"
                 + ("" if m else " without the example's summary line"))
    progress = [l for l in p.stdout.splitlines() if l.startswith("epoch")]
    return {"label": label, "ms": float(m.group(4)), "acc": float(m.group(5)),
            "steps": int(m.group(3)), "secs": secs, "progress": progress}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--example", required=True)
    args = ap.parse_args()
    results = [run(args, "tessel-zero2", ["--strategy=zero2"]),
               run(args, "tessel-ddp", ["--strategy=ddp"]),
               run(args, "tessel-fsdp", ["--strategy=fsdp"])]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    results.append(run(args, "torch-ddp-gloo", ["--backend=gloo"], env))
    print("\n".join(results[0]["progress"]))
    gloo = results[-1]["ms"]
    print(f"\n{'run':16} {'steps':>5} {'median step':>12} {'vs gloo':>8} {'test acc':>9} "
          f"{'wall s':>7}")
    for r in results:
        print(f"{r['label']:16} {r['steps']:5d} {r['ms']:9.2f} ms {gloo / r['ms']:7.2f}x "
              f"{r['acc']:8.2f}% {r['secs']:7.1f}")
    print("(2 workers x 1 thread each, global batch 64, 12 epochs; 'vs gloo' = gloo's median "
          "step / this one's; wall s includes starting the registry and servers)")
    failures = [f"{r['label']}: test accuracy {r['acc']}% < 95%" for r in results[:3]
                if r["acc"] < 95.0]
    driver.finish(failures)


if __name__ == "__main__":
    main()
