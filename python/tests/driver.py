"""What the Python test drivers share: running tessel-launch, and the verdict."""
import subprocess
import sys
import time


def launch(launch_bin, job, command, nproc=2, flags=(), timeout_s=240, wait_s=None, what=None,
           servers=2):
    """tessel-launch --nproc_per_node=NPROC --servers=SERVERS --job=JOB --timeout_s=T FLAGS --
    COMMAND, waited for up to wait_s (default timeout_s + 60). If it fails, prints the
    end of its output and exits the driver. Returns (output, seconds)."""
    cmd = [launch_bin, f"--nproc_per_node={nproc}", f"--servers={servers}", f"--job={job}",
           f"--timeout_s={timeout_s}", *flags, "--", *command]
    start = time.monotonic()
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=wait_s or timeout_s + 60)
    secs = time.monotonic() - start
    if run.returncode != 0:
        print(run.stdout[-6000:])
        sys.exit(f"FAIL: {what or job}: tessel-launch exited {run.returncode}")
    return run.stdout, secs


def finish(failures):
    """Prints each failure and exits 1, or prints OK."""
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("OK")
