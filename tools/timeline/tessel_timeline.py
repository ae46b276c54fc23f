#!/usr/bin/env python3
"""tessel-timeline: the timelines of one job's workers and shard servers
(--timeline, Chrome trace event format) merged onto one clock, checked, and
drawn.

  tessel-timeline merge -o job.json worker-0.json worker-1.json server-0.json ...
      One trace (open it in ui.perfetto.dev or chrome://tracing): each file
      is a process; every clock is moved onto worker 0's (or the first
      file's). Files of one host share the system clock; across hosts each
      offset is estimated from the causal order of the data path: a push is
      received after it was sent and parameters arrive after they were sent,
      so a server's offset to a worker lies in
      [max(params sent - params received), min(push received - push sent)];
      the middle of that interval is taken and the interval is reported.
      (Files whose process_labels name the reference's host keep offset 0.)
  tessel-timeline check job.json
      Spans nest on each thread, and every bucket of every step is causal:
      push sent <= push received <= its reduce + update <= parameters sent
      <= parameters received, for every rank. Exit 1 naming the first
      violations otherwise.
  tessel-timeline svg --step N -o step.svg job.json
      One step drawn as an SVG picture: a lane per process and thread,
      spans as bars, pushes and parameters as ticks, one arrow per bucket.

Only the standard library; runs with any python3.
"""
import argparse
import collections
import json
import sys


def load(path):
    """Events of a timeline file: a JSON array, possibly cut short by a crash
    (no closing bracket, a partial last line), or a {"traceEvents": [...]}."""
    text = open(path).read()
    try:
        data = json.loads(text)
        return data["traceEvents"] if isinstance(data, dict) else data
    except ValueError:
        pass
    events = []
    for line in text.splitlines():
        line = line.strip().rstrip(",").rstrip("]").lstrip("[")
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            break  # a partial last line
    return events


def host_of(events):
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_labels":
            for label in str(e["args"].get("labels", "")).split(","):
                if label.startswith("host="):
                    return label[5:]
    return None


def process_name(events, path):
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            return e["args"]["name"]
    return path


def keyed(events, name, *fields):
    out = {}
    for e in events:
        if e.get("name") == name and e.get("ph") == "i":
            a = e.get("args", {})
            out[tuple(a.get(f) for f in fields)] = e["ts"]
    return out


KEY = ("step", "rank", "shard", "bucket")


def offset_between(x, y):
    """Bounds on clock(x) - clock(y) from the data path between processes x
    and y (lists of events; y's already on the reference clock)."""
    lo, hi = float("-inf"), float("inf")
    for sender, receiver, sent, received, sign in (
            (x, y, "push", "push received", +1), (y, x, "push", "push received", -1),
            (x, y, "params sent", "params", +1), (y, x, "params sent", "params", -1)):
        s = keyed(sender, sent, *KEY)
        r = keyed(receiver, received, *KEY)
        for k, ts in s.items():
            if k in r:
                d = ts - r[k] if sign > 0 else r[k] - ts
                # x sends (sign +1): t_x - o <= t_y  ->  o >= t_x - t_y
                # y sends (sign -1): t_y <= t_x - o  ->  o <= t_x - t_y
                if sign > 0:
                    lo = max(lo, d)
                else:
                    hi = min(hi, d)
    return lo, hi


def merge(paths):
    files = []
    for i, p in enumerate(paths):
        ev = load(p)
        files.append({"path": p, "events": ev, "name": process_name(ev, p), "pid": i + 1,
                      "host": host_of(ev)})
    ref = next((f for f in files if f["name"] == "worker[0]"), files[0])
    aligned = {id(ref): 0.0}
    report = {ref["name"]: {"offset_us": 0, "bounds_us": [0, 0], "reference": True}}
    pending = []
    for f in files:
        if f is ref:
            continue
        if f["host"] is not None and f["host"] == ref["host"]:
            # One host, one clock: nothing to estimate (the bounds are shown).
            lo, hi = offset_between(f["events"], ref["events"])
            aligned[id(f)] = 0.0
            report[f["name"]] = {"offset_us": 0, "bounds_us": [lo, hi],
                                 "consistent": lo <= 0 <= hi, "same_host": True}
        else:
            pending.append(f)
    while pending:
        progress = False
        for f in list(pending):
            best = None
            for g in files:
                if id(g) not in aligned:
                    continue
                shifted = [dict(e, ts=e["ts"] - aligned[id(g)]) if "ts" in e else e
                           for e in g["events"]]
                lo, hi = offset_between(f["events"], shifted)
                if lo == float("-inf") and hi == float("inf"):
                    continue
                width = (hi - lo) if lo > float("-inf") and hi < float("inf") else float("inf")
                if best is None or width < best[2]:
                    best = (lo, hi, width)
            if best is None:
                continue
            lo, hi, _ = best
            o = (lo + hi) / 2 if lo > float("-inf") and hi < float("inf") else (
                lo if lo > float("-inf") else hi)
            aligned[id(f)] = o
            report[f["name"]] = {"offset_us": round(o, 1), "bounds_us": [lo, hi],
                                 "consistent": lo <= hi}
            pending.remove(f)
            progress = True
        if not progress:
            for f in pending:  # no data path in common: keep its clock
                aligned[id(f)] = 0.0
                report[f["name"]] = {"offset_us": 0, "bounds_us": None, "consistent": None}
            pending = []
    out = []
    for f in files:
        o = aligned[id(f)]
        for e in f["events"]:
            e = dict(e, pid=f["pid"])
            if "ts" in e:
                e["ts"] = round(e["ts"] - o, 3)
            if e.get("name") == "end" and e.get("ph") == "i":
                continue
            out.append(e)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"tool": "tessel-timeline merge", "reference": ref["name"],
                          "clocks": report, "sources": [f["path"] for f in files]}}


def names_by_pid(events):
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


def check(trace):
    """Problems (strings) with nesting and causality; [] when sound."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs, _ = names_by_pid(events)
    problems = []
    # Spans on one thread nest or are disjoint.
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e))
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in spans:
            while stack and stack[-1][1] <= s[0]:
                stack.pop()
            if stack and s[1] > stack[-1][1]:
                problems.append("spans overlap without nesting: %s and %s" %
                                (stack[-1][2]["name"], s[2]["name"]))
            stack.append(s)
    # Worker instants lie inside their step's exchange span.
    spans = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "exchange":
            spans[(e["pid"], e["args"]["step"])] = (e["ts"], e["ts"] + e["dur"])
    for e in events:
        if e.get("ph") == "i" and e.get("name") in ("push", "params"):
            s = spans.get((e["pid"], e["args"]["step"]))
            if s and not s[0] <= e["ts"] <= s[1]:
                problems.append("%s %s of step %s outside its exchange span" %
                                (procs.get(e["pid"]), e["name"], e["args"]["step"]))
    # Causality per step, shard, bucket and rank.
    def index(name):
        return keyed(events, name, *KEY)
    push, recv, sent, params = index("push"), index("push received"), index("params sent"), \
        index("params")
    updates = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "reduce + update":
            a = e["args"]
            updates[(a["step"], a["shard"], a["bucket"])] = (e["ts"], e["ts"] + e["dur"])
    checked = 0
    for k, t_push in push.items():
        step, rank, shard, bucket = k
        u = updates.get((step, shard, bucket))
        chain = [("push sent", t_push), ("push received", recv.get(k))]
        if u:
            chain += [("update start", u[0]), ("update end", u[1])]
        chain += [("params sent", sent.get(k)), ("params received", params.get(k))]
        chain = [(n, t) for n, t in chain if t is not None]
        if len(chain) < 6:
            continue  # a step or bucket only partly recorded
        checked += 1
        for (n1, t1), (n2, t2) in zip(chain, chain[1:]):
            if t1 > t2:
                problems.append("step %s rank %s shard %s bucket %s: %s (%.1f) after %s (%.1f)" %
                                (step, rank, shard, bucket, n1, t1, n2, t2))
    return problems, checked


def svg(trace, step, width=1100):
    events = trace["traceEvents"]
    procs, threads = names_by_pid(events)
    mine = [e for e in events if e.get("args", {}).get("step") == step and "ts" in e]
    if not mine:
        raise SystemExit("tessel-timeline: no events of step %d" % step)
    t0 = min(e["ts"] for e in mine)
    t1 = max(e["ts"] + e.get("dur", 0) for e in mine)
    span = max(t1 - t0, 1)
    lanes = sorted({(procs.get(e["pid"], str(e["pid"])), threads.get((e["pid"], e["tid"]), ""),
                     e["pid"], e["tid"]) for e in mine},
                   key=lambda l: (not l[0].startswith("worker"), l[0], l[1]))
    left, top, lane_h = 190, 50, 34
    x = lambda t: left + (t - t0) / span * (width - left - 20)  # noqa: E731
    lane_y = {(l[2], l[3]): top + i * lane_h for i, l in enumerate(lanes)}
    height = top + len(lanes) * lane_h + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="22" font-size="15" font-weight="bold">Step %d of job %s: '
           '%.2f ms, every bucket from push to parameters</text>' %
           (step, mine[0]["args"].get("job", "?"), span / 1000.0)]
    palette = {"exchange": "#c6dbef", "reduce + update": "#fdae6b"}
    for (pname, tname, pid, tid), y in ((l, lane_y[(l[2], l[3])]) for l in lanes):
        out.append('<text x="10" y="%d">%s %s</text>' % (y + 20, pname, tname))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#ddd"/>' %
                   (left, width - 20, y + lane_h - 2, y + lane_h - 2))
    for e in mine:
        y = lane_y[(e["pid"], e["tid"])]
        if e.get("ph") == "X":
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" '
                       'stroke="#555"><title>%s %s</title></rect>' %
                       (x(e["ts"]), y + 6, max(1.0, x(e["ts"] + e["dur"]) - x(e["ts"])), 20,
                        palette.get(e["name"], "#ccc"), e["name"], json.dumps(e["args"])))
    colors = {"push": "#2171b5", "push received": "#2171b5", "params sent": "#238b45",
              "params": "#238b45"}
    for e in mine:
        if e.get("ph") == "i" and e["name"] in colors:
            y = lane_y[(e["pid"], e["tid"])]
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="2">'
                       '<title>%s %s</title></line>' %
                       (x(e["ts"]), x(e["ts"]), y + 4, y + 28, colors[e["name"]], e["name"],
                        json.dumps(e["args"])))
    # One arrow per bucket: rank 0's push to its receipt, parameters back.
    def first(name):
        return keyed(mine, name, *KEY)
    ev_lane = {}
    for e in mine:
        if e.get("ph") == "i":
            a = e["args"]
            ev_lane[(e["name"],) + tuple(a.get(f) for f in KEY)] = lane_y[(e["pid"], e["tid"])]
    for a_name, b_name, color in (("push", "push received", "#2171b5"),
                                  ("params sent", "params", "#238b45")):
        A, B = first(a_name), first(b_name)
        for k in A:
            if k in B and k[1] == 0:
                ya, yb = ev_lane[(a_name,) + k], ev_lane[(b_name,) + k]
                out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" '
                           'stroke-opacity="0.45"/>' % (x(A[k]), ya + 16, x(B[k]), yb + 16, color))
    ticks = 5
    for i in range(ticks + 1):
        t = t0 + span * i / ticks
        out.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%.2f ms</text>' %
                   (x(t), height - 12, (t - t0) / 1000.0))
    out.append('<text x="%d" y="40" fill="#555">bars: exchange (worker), reduce + update '
               '(server); blue: push sent/received; green: parameters sent/received</text>' % left)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tessel-timeline", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a job's timelines onto one clock")
    m.add_argument("-o", "--out", required=True)
    m.add_argument("files", nargs="+")
    c = sub.add_parser("check", help="check nesting and causality of a merged timeline")
    c.add_argument("file")
    s = sub.add_parser("svg", help="draw one step as SVG")
    s.add_argument("--step", type=int, required=True)
    s.add_argument("-o", "--out", required=True)
    s.add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "merge":
        trace = merge(a.files)
        json.dump(trace, open(a.out, "w"))
        for name, r in sorted(trace["otherData"]["clocks"].items()):
            print("%-12s offset %+10.1f us  bounds %s%s" % (
                name, r["offset_us"], r["bounds_us"],
                "" if r.get("consistent", True) in (True, None) else "  (inconsistent)"))
        print("%d events from %d files -> %s" % (len(trace["traceEvents"]), len(a.files), a.out))
        return 0
    if a.cmd == "check":
        problems, checked = check(json.load(open(a.file)))
        for p in problems[:20]:
            print("problem: " + p)
        print("%d bucket paths checked, %d problems" % (checked, len(problems)))
        return 1 if problems or checked == 0 else 0
    open(a.out, "w").write(svg(json.load(open(a.file)), a.step))
    print("step %d -> %s" % (a.step, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
