"""Turns `bazel test` runs into "N passed, N failed" counting test cases.

Usage: count_tests.py LABEL LOG TESTLOGS [LABEL LOG TESTLOGS ...]
One triple per run (e.g. "plain", "asan+ubsan", "tsan"): the log Bazel
printed and that configuration's bazel-testlogs folder. Reads the summary
lines (one per test target) and, for targets that ran, their test.xml
(GoogleTest cases; a shell test counts as one). A target that failed to
build, timed out or has no result counts as one failure. Prints a line per
run, then one total line last. Exits 1 if anything failed.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

line_re = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|"
                     r"FAILED TO BUILD|SKIPPED|INCOMPLETE)\b")
def count(log_path, testlogs):
    passed = failed = skipped = 0
    failures = []
    for line in open(log_path, errors="replace"):
        m = line_re.match(line.strip())
        if not m:
            continue
        target, status = m.groups()
        xml = os.path.join(testlogs, target[2:].replace(":", "/"), "test.xml")
        counted = False
        if status in ("PASSED", "FAILED", "FLAKY") and os.path.exists(xml):
            try:
                root = ET.parse(xml).getroot()
                for case in root.iter("testcase"):
                    counted = True
                    if case.find("failure") is not None or case.find("error") is not None:
                        failed += 1
                        failures.append(f"{target} {case.get('classname', '')}.{case.get('name')}")
                    elif case.find("skipped") is not None or case.get("status") == "notrun":
                        skipped += 1
                    else:
                        passed += 1
            except ET.ParseError:
                counted = False
        if not counted:
            if status == "PASSED":
                passed += 1
            elif status == "SKIPPED":
                skipped += 1
            else:
                failed += 1
                failures.append(f"{target} {status}")
        elif status not in ("PASSED", "FLAKY") and not any(f.startswith(target) for f in failures):
            failed += 1
            failures.append(f"{target} {status}")
    return passed, failed, skipped, failures


args = sys.argv[1:]
if len(args) == 2:  # the older form: LOG TESTLOGS
    args = ["tests"] + args
if len(args) % 3 != 0:
    sys.exit("usage: count_tests.py LABEL LOG TESTLOGS [LABEL LOG TESTLOGS ...]")
total = [0, 0, 0]
all_failures = []
runs = len(args) // 3
for i in range(0, len(args), 3):
    label, log_path, testlogs = args[i:i + 3]
    p, f, s_, fails = count(log_path, testlogs)
    total[0] += p
    total[1] += f
    total[2] += s_
    all_failures += [f"[{label}] {x}" for x in fails]
    if runs > 1:
        print(f"{label}: {p} passed, {f} failed" + (f", {s_} skipped" if s_ else ""))
for f in all_failures:
    print(f"FAILED: {f}")
passed, failed, skipped = total
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed or passed == 0 else 0)
