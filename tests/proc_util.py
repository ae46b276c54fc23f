"""Helpers shared by the multi-process test drivers (fault_injection.py,
elastic_test.py, hybrid_recovery_test.py): every process they start goes
through spawn(), so cleanup() can kill whatever is left, and check() records
failed checks in `failures`."""
import subprocess

procs = []
failures = []


def log(*a):
    print(*a, flush=True)


def spawn(args, out):
    """Starts `args` with stdout and stderr appended to the file `out`."""
    p = subprocess.Popen(args, stdout=open(out, "a"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def cleanup():
    """Kills every process spawn() started that is still running, and reaps them."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    procs.clear()


def check(cond, what):
    log(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond
