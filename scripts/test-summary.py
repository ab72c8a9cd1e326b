#!/usr/bin/env python3
"""Prints meson test's result as the plain line 'N passed, N failed, N skipped'.

Before it, every test that did not pass or skip gets a 'FAILED TEST:' line (name, result,
seconds) and the last lines of its output, so that a failure is named where a log's tail is all
that is read (.ci/run gathers these lines from every stage and prints them again at its end).
"""
import json
import sys

TAIL = 30  # last output lines shown per failed test
ASSERTS = 24  # lines of gtest assertion reports shown before them (they may lie further back)

passed = failed = skipped = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            r = t.get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED TEST: {t.get('name', '?')} ({r}, {t.get('duration', 0):.1f} s, "
                      f"exit {t.get('returncode')})")
                out = (t.get("stdout") or "").rstrip("\n").splitlines()
                shown = []
                for i, l in enumerate(out[:-TAIL]):
                    if l.endswith(": Failure") and len(shown) < ASSERTS:
                        shown += out[i:min(i + 6, len(out) - TAIL)]
                for l in shown[:ASSERTS] + (["..."] if shown else []) + out[-TAIL:]:
                    print("  | " + l)
except FileNotFoundError:
    print("no test log found", file=sys.stderr)
    failed = 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
