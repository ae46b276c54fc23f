"""The straggler report and warning in the user's process, end to end: three
tessel.torch ranks under tessel-launch (one shard server, its embedded
registry) train exact_model with zero2 (straggler_report_worker.py), each step
standing in 20 ms of compute; then rank 2 sleeps 200 ms a step until it and
rank 0 were warned; then all run alike again until the warning ended. Checks:
  - the fault-free steps warn nobody and last_step_report() names no rank;
  - rank 0 is warned once that rank 2 is the job's straggler (host, pid) and
    once that it no longer is; rank 2 once that it is ("this rank (2) ...
    phase computing") and once that it no longer is; rank 1 never; within
    MAX_NAMED_STEPS slowed steps; the lines are in the ranks' logs;
  - at that point rank 0's last_step_report() has slowest = rank 2 with its
    score >= 1.5, host and pid; rank 2's report has compute >= 0.2 s, rank 0's
    compute under 0.15 s and its wait >= 0.1 s (waiting for rank 2).
Usage: straggler_report_test.py --launch=tessel-launch --worker=straggler_report_worker.py
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import driver  # noqa: E402

WORLD, SLOW = 3, 2
# The servers name a rank after 5 counted steps; then their heartbeat, the
# registry's answer to the workers' (about 1 s each) and one step more.
MAX_NAMED_STEPS = 40


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tessel-straggler-report-")
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            failures.append(what)

    out = os.path.join(d, "out")
    os.mkdir(out)
    run = os.path.join(d, "run")
    _, secs = driver.launch(args.launch, "slowjob", ["/usr/bin/python3", args.worker, out,
                                                     str(SLOW)],
                            nproc=WORLD, servers=1, flags=[f"--run_dir={run}"], timeout_s=120)
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(WORLD)]
    phases = ranks[0]["phases"]
    print(f"phases (steps): {phases}")
    for r, got in enumerate(ranks):
        early = [s for s in got["said"] if s["step"] <= phases["fault_free"][1]]
        check(not early, f"rank {r}: no warning over {phases['fault_free'][1]} fault-free steps "
                         f"({early})")
        ff = got["reports"]["fault_free_end"]
        check(ff["slowest"] is None, f"rank {r}: fault-free report names nobody: {ff['repr']}")
    for r, got in enumerate(ranks):
        print(f"rank {r} warnings: {got['said']}")
    r0, r2 = ranks[0], ranks[SLOW]
    started = [s for s in r0["said"] if f"rank {SLOW} is the job's straggler" in s["text"]]
    ended = [s for s in r0["said"] if f"rank {SLOW} is no longer the job's straggler" in s["text"]]
    check(len(started) == 1 and len(ended) == 1 and len(r0["said"]) == 2,
          f"rank 0: warned once that rank {SLOW} is the job's straggler and once that it ended")
    if started:
        check(f"host " in started[0]["text"] and f"pid {r2['pid']}" in started[0]["text"],
              f"rank 0's warning names rank {SLOW}'s host and pid {r2['pid']}")
        took = started[0]["step"] - phases["slowed"][0] + 1
        check(took <= MAX_NAMED_STEPS,
              f"rank 0 warned {took} slowed steps after rank {SLOW} slowed (at most "
              f"{MAX_NAMED_STEPS})")
    own = [s for s in r2["said"] if f"this rank ({SLOW}) is the job's straggler" in s["text"]]
    own_end = [s for s in r2["said"] if f"this rank ({SLOW}) is no longer" in s["text"]]
    check(len(own) == 1 and len(own_end) == 1 and len(r2["said"]) == 2,
          f"rank {SLOW}: warned once that it is the job's straggler and once that it ended")
    if own:
        check("phase computing" in own[0]["text"], f"rank {SLOW}'s warning: {own[0]['text']}")
    check(ranks[1]["said"] == [], "rank 1 (neither rank 0 nor the straggler): no warning")

    named = r0["reports"]["slowed_named"]
    print(f"rank 0 when warned: {named['repr']}")
    print(f"rank {SLOW} when warned: {r2['reports']['slowed_named']['repr']}")
    s = named["slowest"] or {}
    check(s.get("rank") == SLOW and s.get("score", 0) >= 1.5 and s.get("host")
          and s.get("pid") == r2["pid"],
          f"rank 0's last_step_report().slowest is rank {SLOW} (score >= 1.5, host, pid): {s}")
    mine = r2["reports"]["slowed_named"]
    check(mine["compute"] >= 0.2, f"rank {SLOW}'s report: compute {mine['compute']:.3f} s >= 0.2")
    check(named["compute"] < 0.15 and named["wait"] >= 0.1,
          f"rank 0's report: compute {named['compute']:.3f} s < 0.15, wait {named['wait']:.3f} s "
          f">= 0.1 (waiting for rank {SLOW})")
    check(r0["reports"]["recovered_end"]["slowest"] is None,
          "after recovering, rank 0's report names nobody")

    logs = {r: open(os.path.join(run, f"worker{r}.log")).read()
            if os.path.exists(os.path.join(run, f"worker{r}.log")) else "" for r in range(WORLD)}
    check(f"StragglerWarning: tessel: rank {SLOW} is the job's straggler" in logs[0],
          "rank 0's log (stderr) has the warning")
    check(f"StragglerWarning: tessel: this rank ({SLOW}) is the job's straggler" in logs[SLOW],
          f"rank {SLOW}'s log (stderr) has the warning")
    print(f"{secs:.1f} s")
    if failures:
        print("logs kept in " + d)
        for r in range(WORLD):
            print(f"--- worker{r}.log\n" + logs[r][-2000:])
    else:
        shutil.rmtree(d, ignore_errors=True)
    driver.finish(failures)


if __name__ == "__main__":
    main()
