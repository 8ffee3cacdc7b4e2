#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarise meson testlog.json files: print one last line
'N passed, N failed, N skipped' and exit 1 if anything failed.  Each
failed test is named, with its failed checks (or its last lines); before
the last line, the ten slowest tests with their times, so that a suite's
growth shows when it happens.

--expect-suite S (repeatable): a suite that must have run; none of its
tests in the logs counts as one failure (e.g. the Python module's suite,
which vanishes when its subproject fails to configure)."""
import json
import sys

PASS = {"OK", "EXPECTEDFAIL"}
SKIP = {"SKIP"}


def why(t, most=6):
    """A failed test's own words, short: its failed checks (the lines a
    harness marks so), else the last lines it printed; a CI log shows
    only its ends, and this summary is at the end."""
    out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
    # A wheel test indents the logs of the suites it runs.
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    marked = [l for l in lines
              if l.startswith("FAIL:") or "check failed" in l or
              "ThreadSanitizer" in l or "AddressSanitizer" in l or
              "runtime error" in l]
    return [l[:240] for l in (marked or lines)[-most:]]


def main(args):
    expect, paths = set(), []
    while args:
        a = args.pop(0)
        if a == "--expect-suite" and args:
            expect.add(args.pop(0))
        else:
            paths.append(a)
    seen = set()
    times = []
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
            # meson names a test "project:suite / name".
            seen.add(t.get("name", "").split(" / ")[0].split(":")[-1])
            r = t.get("result")
            times.append((t.get("duration") or 0.0, t.get("name", "?")))
            if r in PASS:
                passed += 1
            elif r in SKIP:
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {t.get('name')} ({r}) in {path}")
                for line in why(t):
                    print("    " + line)
    for s in sorted(expect - seen):
        failed += 1
        print(f"FAILED: no test of suite '{s}' ran (did it configure?)")
    if times:
        times.sort(reverse=True)
        total = sum(d for d, _ in times)
        print(f"slowest of {len(times)} tests ({total:.0f} s in all):")
        for d, name in times[:10]:
            print(f"  {d:7.1f} s  {name}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed + skipped == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
