"""opt.state_dict() is the whole training state and portable: saved by 2
zero2 workers after step 4, it resumes in 2 fsdp workers bitwise where the
uninterrupted run ends after step 7, and in 1 ddp worker (the same global
batches in one process) within 1e-5 of it (the whole batch's gradient
rounds differently from the mean of two halves).

Usage: state_test.py --launch=tessel-launch --worker=state_worker.py
"""
import argparse
import os
import tempfile

import numpy as np

import driver


def launch(args, n, job, *worker_args):
    driver.launch(args.launch, job, ["/usr/bin/python3", args.worker, *worker_args], nproc=n,
                  what=" ".join(worker_args))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="state-")
    launch(args, 2, "state-save", "save", "zero2", d)
    launch(args, 2, "state-fsdp", "load", "fsdp", d)
    launch(args, 1, "state-ddp", "load", "ddp", d)
    want = np.load(os.path.join(d, "uninterrupted.npy"))
    failures = []
    fsdp = np.load(os.path.join(d, "resumed-fsdp-2.npy"))
    ok = np.array_equal(fsdp, want)
    print(f"zero2 x2 -> fsdp x2 at step 4, 3 more steps: "
          f"{'bitwise equal' if ok else 'DIFFERENT'} to the uninterrupted run")
    if not ok:
        failures.append("fsdp x2 resume is not bitwise the uninterrupted run")
    ddp = np.load(os.path.join(d, "resumed-ddp-1.npy"))
    rel = float(np.abs(ddp - want).max() / np.abs(want).max())
    print(f"zero2 x2 -> ddp x1 at step 4, 3 more steps: relative difference {rel:.3g} "
          f"(tolerance 1e-5)")
    if not rel < 1e-5:
        failures.append(f"ddp x1 resume differs by {rel:.3g}")
    driver.finish(failures)


if __name__ == "__main__":
    main()
