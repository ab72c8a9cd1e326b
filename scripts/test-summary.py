#!/usr/bin/env python3
"""Prints meson test's result as the plain line 'N passed, N failed, N skipped'."""
import json
import sys

passed = failed = skipped = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line).get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
except FileNotFoundError:
    print("no test log found", file=sys.stderr)
    failed = 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
