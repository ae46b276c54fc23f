"""Every binary's command line: --help lists the binary's own flags with
their help text and defaults (not Abseil's, not "No flags matched") and exits
0; --helpfull adds Abseil's; --version prints the version; a bad --log_format
or --log_level is a usage error (exit 2); and logs are RFC 3339 UTC lines in
text, one JSON object per line with --log_format=json.

Usage: cli_flags_test.py NAME=PATH... (each binary under its installed name)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, cleanup, failures, log, spawn  # noqa: E402

# Flags each binary must list under --help (its own, and ones it gets from the
# libraries it links), beside --log_format and --log_level, which all have.
OWN_FLAGS = {
    "tessel-registry": ["listen", "backend", "lease_ttl_ms", "config", "tls_ca"],
    "tessel-server": ["listen", "registry", "shard", "config", "checkpoint_dir"],
    "tessel-train": ["job", "world", "strategy", "registry", "config"],
    "tessel-demo": ["steps", "verbose", "workers"],
    "tessel-launch": ["nproc_per_node", "servers", "registry", "config"],
    "tessel-replay": ["partition_strategy", "workers", "strategy"],
    "tessel-hybrid-train": ["dp", "tp", "pp"],
    "tessel-health-probe": ["address", "service"],
}

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def run(args, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def listed(text):
    return set(re.findall(r"(?m)^    --([A-Za-z0-9_]+) \(", text))


def check_help(name, path):
    r = run([path, "--help"])
    flags = listed(r.stdout)
    check(r.returncode == 0, "%s --help exits 0 (got %d)" % (name, r.returncode))
    # The first line names the program (Abseil's usage line is "<program>:
    # <usage message>"; "UNKNOWN: " when the program name was never set).
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(first.startswith(name + ": ") and "UNKNOWN" not in first,
          "%s --help opens with '%s: ' (got %r)" % (name, name, first[:80]))
    check("No flags matched" not in r.stdout + r.stderr, "%s --help lists flags" % name)
    want = OWN_FLAGS[name] + ["log_format", "log_level"]
    missing = [f for f in want if f not in flags]
    check(not missing, "%s --help lists %s%s" % (name, ", ".join(want),
                                                 " (missing %s)" % missing if missing else ""))
    check("default:" in r.stdout, "%s --help shows defaults" % name)
    check("flagfile" not in flags, "%s --help leaves out Abseil's own flags" % name)
    check(run([path, "-h"]).stdout == r.stdout, "%s -h is --help" % name)
    full = run([path, "--helpfull"])
    check(full.returncode == 0 and "flagfile" in listed(full.stdout),
          "%s --helpfull adds Abseil's flags, exits 0" % name)
    v = run([path, "--version"])
    check(v.returncode == 0 and v.stdout.startswith("tessel "),
          "%s --version: %r" % (name, v.stdout.strip()))
    for bad in ("--log_format=xml", "--log_level=loud"):
        # tessel-launch wants its worker command first ("missing '--'").
        b = run([path, bad] + (["--", "true"] if name == "tessel-launch" else []))
        check(b.returncode == 2 and ("not one of" in b.stderr),
              "%s %s is a usage error: exit %d, %r" % (name, bad, b.returncode,
                                                       b.stderr.strip()[:120]))


def first_log_lines(args, d, name, want=2, timeout=15):
    out = os.path.join(d, name + ".log")
    p = spawn(args, out)
    deadline = time.time() + timeout
    lines = []
    while time.time() < deadline:
        lines = [l for l in open(out).read().splitlines() if l.strip()]
        if len(lines) >= want:
            break
        time.sleep(0.05)
    p.terminate()
    p.wait(timeout=10)
    return lines


def check_logs(paths, d):
    # With a credential, so that the only WARNING a registry logs at start
    # (--insecure's) stays out of the INFO-only checks below.
    token = os.path.join(d, "admin.token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("cli-flags-test-admin-token-0123456789\n")
    reg = [paths["tessel-registry"], "--admin_token_file=" + token]
    text = first_log_lines(reg + ["--listen=127.0.0.1:0"], d, "text")
    m = [re.match(r"^([DIWE]) (\S+) registry (\S+:\d+)\] (.*)$", l) for l in text]
    check(text and all(m), "text lines: level, time, process, source, message: %r" %
          (text[:1],))
    check(all(x and RFC3339.match(x.group(2)) for x in m),
          "text timestamps are RFC 3339 UTC with milliseconds")
    js = first_log_lines(reg + ["--listen=127.0.0.1:0", "--log_format=json"], d, "json")
    try:
        objs = [json.loads(l) for l in js]
    except ValueError as e:
        objs = []
        log("not json: %s: %r" % (e, js[:2]))
    check(objs and all(set(("time", "level", "process", "source", "msg")) <= set(o)
                       for o in objs),
          "--log_format=json: one object per line with time, level, process, source, msg")
    check(all(RFC3339.match(o["time"]) and o["level"] == "info" and o["process"] == "registry"
              for o in objs), "json fields: %r" % (objs[:1],))
    quiet = first_log_lines(reg + ["--listen=127.0.0.1:0", "--log_level=warning",
                             "--port_file=" + os.path.join(d, "port")], d, "quiet", want=1,
                            timeout=3)
    check(not quiet, "--log_level=warning leaves out the registry's INFO lines")


def main():
    paths = dict(a.split("=", 1) for a in sys.argv[1:])
    try:
        for name in sorted(OWN_FLAGS):
            check_help(name, paths[name])
        with tempfile.TemporaryDirectory() as d:
            check_logs(paths, d)
    finally:
        cleanup()
    log("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
