#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarise meson testlog.json files: print one last line
'N passed, N failed, N skipped' and exit 1 if anything failed."""
import json
import sys

PASS = {"OK", "EXPECTEDFAIL"}
SKIP = {"SKIP"}


def main(paths):
    passed = failed = skipped = 0
    for path in paths:
        try:
            with open(path) as f:
                lines = [json.loads(l) for l in f if l.strip()]
        except OSError as e:
            print(f"test-summary: {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        for t in lines:
            r = t.get("result")
            if r in PASS:
                passed += 1
            elif r in SKIP:
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {t.get('name')} ({r}) in {path}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed + skipped == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
