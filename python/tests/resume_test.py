"""A DDP script's resume, moved to tessel.torch: the optimizer's state dict (with
torch's param_groups) and a OneCycleLR scheduler's, through torch.save and
torch.load into a new tessel-launch, continue the run bitwise, onto another
strategy and shard count. SGD with momentum: zero2 on 2 workers x 2 servers
saved after step 4, resumed with fsdp on 2 x 2. AdamW: fsdp on 2 x 2 saved,
resumed with zero2 on 2 workers x 3 servers. Both with two parameter groups
(no weight decay on biases and norms) and OneCycleLR cycling lr and momentum
(beta1); the resumed runs first check that bad state dicts are refused with
nothing changed (resume_worker.py).

Usage: resume_test.py --launch=tessel-launch --worker=resume_worker.py
"""
import argparse
import os
import tempfile

import numpy as np

import driver

# (optimizer, strategy saved from, strategy resumed with, servers of the resume)
CASES = (("sgd", "zero2", "fsdp", 2), ("adamw", "fsdp", "zero2", 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="resume-")
    failures = []
    for opt, saved_with, resumed_with, servers in CASES:
        for mode, strategy, n in (("full", saved_with, 2), ("resume", resumed_with, servers)):
            out, secs = driver.launch(args.launch, f"resume-{opt}-{mode}",
                                      ["/usr/bin/python3", args.worker, opt, strategy, mode, d],
                                      servers=n, what=f"{opt} {strategy} {mode}")
            done = [line for line in out.splitlines() if " checks" in line]
            print(f"{opt} {strategy} {mode} on 2 workers x {n} servers: {secs:.1f} s; "
                  f"{done[-1] if done else 'no checks line'}")
        want = np.load(os.path.join(d, f"{opt}-full.npy"))
        got = np.load(os.path.join(d, f"{opt}-resumed-{resumed_with}-2x{servers}.npy"))
        ok = np.array_equal(got, want)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"{opt}: {saved_with} 2x2 saved after step 4 -> {resumed_with} 2x{servers}, "
              f"4 more steps: {'bitwise equal' if ok else f'DIFFERENT (relative {rel:.3g})'} "
              f"to the uninterrupted run")
        if not ok:
            failures.append(f"{opt} resume is not bitwise the uninterrupted run ({rel:.3g})")
    driver.finish(failures)


if __name__ == "__main__":
    main()
