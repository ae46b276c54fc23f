"""Turns a `bazel test` run into "N passed, N failed" counting test cases.

Reads the summary lines Bazel printed (one per test target) and, for targets
that ran, their test.xml (GoogleTest cases; a shell test counts as one). A
target that failed to build, timed out or has no result counts as one failure.
Exits 1 if anything failed.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

log_path, testlogs = sys.argv[1], sys.argv[2]
passed = failed = skipped = 0
failures = []
line_re = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|"
                     r"FAILED TO BUILD|SKIPPED|INCOMPLETE)\b")
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

for f in failures:
    print(f"FAILED: {f}")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed or passed == 0 else 0)
