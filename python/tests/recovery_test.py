"""Automatic recovery from Python: tessel-launch --max_restarts=1 restarts a
worker that died at step 7; under zero2 and fsdp it rejoins the step in
flight (the servers had applied 7; rank 0 waits in its step, no rollback);
with a BatchNorm model it resumes from the checkpoint of step 6 and the
other rank rolls back there; training ends bitwise where a run without
the crash ends (zero2 and fsdp, each also with the model staged as a CUDA
model is), and with a BatchNorm model (zero2-bn) rank 0's running statistics
and num_batches_tracked end bitwise as a clean run's too: the rollback
restores the buffers of the checkpoint's step.

Usage: recovery_test.py --launch=tessel-launch --worker=recovery_worker.py
"""
import argparse
import os
import re
import tempfile

import numpy as np

import driver


def launch(args, outdir, job, strategy, crash):
    ckpt = tempfile.mkdtemp(prefix="ckpt-")
    return driver.launch(
        args.launch, job,
        ["/usr/bin/python3", args.worker, strategy, outdir] + ([str(crash)] if crash else []),
        flags=[f"--checkpoint_dir={ckpt}", "--max_restarts=1"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="recovery-")
    failures = []
    # *-staged: a model staged as a CUDA model is (tessel.torch's staging),
    # against the clean run of its strategy.
    # zero2-bn: a BatchNorm model; rank 0's buffers must roll back with the parameters
    # (the job's buffers are checkpointed beside them: tessel.torch.buffer_store).
    # zero2-bn-rank0: rank 0 is the one killed; its restarted process resumes at step 6
    # and reads the buffers back from the servers (it made no recovery itself).
    # zero2-norejoin: rejoin_in_place=False, so rank 0 rolls back with the rest
    # (and the shards, holding one version, update in place).
    for strategy in ("zero2", "fsdp", "zero2-staged", "fsdp-staged", "zero2-bn",
                     "zero2-bn-rank0", "zero2-norejoin"):
        clean = strategy.replace("-staged", "").replace("-rank0", "").replace("-norejoin", "")
        # zero2 and fsdp without buffers: the replacement rejoins the step in
        # flight and rank 0 makes no recovery (docs/operations.md, "A lost
        # worker without rollback"); the BatchNorm model rolls back.
        in_place = (strategy.split("-")[0] in ("zero2", "fsdp") and "-bn" not in strategy and
                    not strategy.endswith("-norejoin"))
        want_recoveries = 0 if strategy.endswith("-rank0") or in_place else 1
        clean_s = 0.0
        if clean == strategy:
            _, clean_s = launch(args, out, f"clean-{strategy}", strategy, None)
        log, crash_s = launch(args, out, f"crash-{strategy}", strategy, 7)
        restarted = "restarting it" in log
        m = re.search(r"recoveries (\d+)", log)
        recoveries = int(m.group(1)) if m else -1
        same = np.array_equal(np.load(os.path.join(out, f"{clean}-clean.npy")),
                              np.load(os.path.join(out, f"{strategy}-crash.npy")))
        kept = "parameters and buffers" if "-bn" in strategy else "parameters"
        clean_note = f"clean run {clean_s:.1f} s" if clean == strategy else f"clean run: {clean}'s"
        killed = 0 if strategy.endswith("-rank0") else 1
        print(f"{strategy}: {clean_note}; with rank {killed} killed at step 7: "
              f"{crash_s:.1f} s, launcher restarted it: {'yes' if restarted else 'NO'}, "
              f"rank 0 recoveries: {recoveries}, final {kept} "
              f"{'bitwise equal' if same else 'DIFFERENT'}")
        if not restarted:
            failures.append(f"{strategy}: the launcher did not restart the dead worker")
        if recoveries != want_recoveries:
            failures.append(f"{strategy}: rank 0 made {recoveries} recoveries, "
                            f"not {want_recoveries}")
        if not same:
            failures.append(f"{strategy}: the recovered run is not bitwise the clean one")
        try:
            with open(os.path.join(out, f"{strategy}-restart.txt")) as f:
                restart = f.read()
        except FileNotFoundError:
            restart = ""
        said = re.search(r"resuming at step (\d+), in place: (True|False)", restart)
        print(f"  the restarted rank {'rejoined in place at step ' + said.group(1) if said and said.group(2) == 'True' else 'resumed from a checkpoint' if said else 'said nothing'}")
        if said is None or (said.group(2) == "True") != in_place:
            failures.append(f"{strategy}: the restarted rank {'did not rejoin' if in_place else 'rejoined'} "
                            f"in place")
        elif in_place and said.group(1) != "7":
            failures.append(f"{strategy}: the replacement rejoined at step {said.group(1)}, "
                            f"not 7 (the step the servers had applied)")
    driver.finish(failures)


if __name__ == "__main__":
    main()
