"""Timelines of a real cluster (tessel-demo: registry, two shard servers, two
workers as processes, --timeline_dir) merged by tessel-timeline onto one
clock: every span nests, every bucket of every recorded step is causal
(push sent <= received <= reduce + update <= parameters sent <= received)
for zero2 and ddp. A server's file moved 5 s off and labelled as another
host is put back by the merge (the raw files then break causality); a file
cut short by a crash still loads; the SVG of one step draws.

Usage: timeline_test.py DEMO TIMELINE_TOOL
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log  # noqa: E402

STEPS = 30
RECORDED = 20  # the demo's --timeline_steps


def run(args, timeout=300):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def main():
    demo, tool = sys.argv[1:3]
    tool = [sys.executable, tool] if tool.endswith(".py") else [tool]
    d = tempfile.mkdtemp(prefix="tessel-timeline-")
    try:
        for strategy in ("zero2", "ddp"):
            td = os.path.join(d, strategy)
            os.makedirs(td)
            r = run([demo, "--skip_reference", "--strategy=" + strategy, "--steps=%d" % STEPS,
                     "--timeline_dir=" + td])
            if not check(r.returncode == 0, "%s: demo with --timeline_dir ran" % strategy):
                log(r.stdout[-2000:] + r.stderr[-2000:])
                continue
            files = sorted(os.path.join(td, f) for f in os.listdir(td))
            check([os.path.basename(f) for f in files] ==
                  ["server-0.json", "server-1.json", "worker-0.json", "worker-1.json"],
                  "%s: one file per server and worker" % strategy)
            merged = os.path.join(td, "job.json")
            m = run(tool + ["merge", "-o", merged] + files)
            check(m.returncode == 0, "%s: merge: %s" % (strategy, m.stdout.strip()[-300:]))
            c = run(tool + ["check", merged])
            got = re.search(r"(\d+) bucket paths checked, (\d+) problems", c.stdout)
            trace = json.load(open(merged))
            buckets = {(e["args"]["shard"], e["args"]["bucket"]) for e in trace["traceEvents"]
                       if e.get("name") == "reduce + update"}
            want = RECORDED * len(buckets) * 2
            check(c.returncode == 0 and got and int(got.group(1)) == want and
                  got.group(2) == "0",
                  "%s: spans nest, and %s bucket paths (steps %d x buckets %d x ranks 2) are "
                  "causal: %s" % (strategy, got.group(1) if got else "?", RECORDED, len(buckets),
                                  c.stdout.strip()[-300:]))
            steps = {e["args"]["step"] for e in trace["traceEvents"]
                     if e.get("name") == "exchange"}
            check(steps == set(range(1, RECORDED + 1)),
                  "%s: steps 1-%d recorded, no more" % (strategy, RECORDED))

        # Another host: server-1's clock 5 s ahead, under another host name.
        td = os.path.join(d, "zero2")
        src = os.path.join(td, "server-1.json")
        moved = os.path.join(d, "server-1-elsewhere.json")
        with open(src) as f, open(moved, "w") as out:
            for line in f:
                line = re.sub(r'"ts":(\d+)', lambda m: '"ts":%d' % (int(m.group(1)) + 5000000),
                              line)
                line = line.replace('"labels":"host=', '"labels":"host=elsewhere-')
                out.write(line)
        files = [os.path.join(td, n) for n in ("worker-0.json", "worker-1.json", "server-0.json")]
        merged = os.path.join(d, "hosts.json")
        m = run(tool + ["merge", "-o", merged] + files + [moved])
        clocks = json.load(open(merged))["otherData"]["clocks"]
        off = clocks["server[1]"]["offset_us"]
        lo, hi = clocks["server[1]"]["bounds_us"]
        check(lo <= 5000000 <= hi and abs(off - 5000000) <= (hi - lo) / 2 + 1,
              "a 5 s clock offset is estimated from the data path: %.1f us, bounds [%s, %s]" %
              (off, lo, hi))
        c = run(tool + ["check", merged])
        check(c.returncode == 0, "merged across 'hosts': causal (%s)" % c.stdout.strip()[-200:])
        raw = {"traceEvents": []}
        for i, f in enumerate(files + [moved]):
            for line in open(f):
                line = line.strip().rstrip(",").rstrip("]").lstrip("[")
                if line:
                    raw["traceEvents"].append(dict(json.loads(line), pid=i + 1))
        rawp = os.path.join(d, "raw.json")
        json.dump(raw, open(rawp, "w"))
        c = run(tool + ["check", rawp])
        check(c.returncode == 1 and "problem:" in c.stdout,
              "the same files not merged break causality (the check notices)")

        # A file cut short by a crash.
        cut = os.path.join(d, "cut.json")
        lines = open(os.path.join(td, "worker-0.json")).read().splitlines()
        open(cut, "w").write("\n".join(lines[:-7]) + "\n" + lines[-7][:20])
        m = run(tool + ["merge", "-o", os.path.join(d, "cut-merged.json"), cut])
        check(m.returncode == 0, "a timeline cut short by a crash still loads")

        s = run(tool + ["svg", "--step", "10", "-o", os.path.join(d, "step.svg"),
                        os.path.join(td, "job.json")])
        text = open(os.path.join(d, "step.svg")).read() if s.returncode == 0 else ""
        check(s.returncode == 0 and text.startswith("<svg") and "Step 10 of job demo" in text
              and text.count("<rect") > 4, "svg draws step 10")
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
