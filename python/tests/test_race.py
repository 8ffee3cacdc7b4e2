# SPDX-License-Identifier: MIT
"""Threads entering the same new code object while its copy is made.

With $JITRING_PY_TEST_COPY_DELAY_US every copy takes 20 ms (the making
thread releases its thread state meanwhile), so the other threads that
enter the same fresh function find its copy in the making: they must not
wait for it without bound, must run the function correctly (unnamed, and
counted in py_pending_races), and the function must still be in the dump
exactly once.  Runs the scenario in a child interpreter with that variable.
"""

import json
import os
import subprocess
import sys
import textwrap

import jrtest

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    import jitring, jrtest
    N = 8
    f = jrtest.make_function("contended", "<race>")
    go = threading.Barrier(N)
    out = [None] * N
    def run(k):
        go.wait()
        t0 = time.monotonic()
        out[k] = (f(k), time.monotonic() - t0)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(N)]
    jitring.start(dir=sys.argv[1])
    for t in ts: t.start()
    for t in ts: t.join()
    jitring.stop()
    st = jitring.stats()
    print(json.dumps({"out": out, "races": st["py_pending_races"],
                      "copies": st["py_copies"],
                      "name": jrtest.tname(f)}))
""")


def test_contended(t):
    env = dict(os.environ, JITRING_PY_TEST_COPY_DELAY_US="20000")
    p = subprocess.run([sys.executable, "-c", CHILD, t.scratch],
                       capture_output=True, text=True, timeout=120, env=env)
    if not t.check(p.returncode == 0, "the child ran", p.stderr[-500:]):
        return
    r = json.loads(p.stdout.strip().splitlines()[-1])
    t.check([v for v, _ in r["out"]] == [k + 1 for k in range(8)],
            "every thread got its result", r["out"])
    t.check(r["races"] >= 1, "threads found the copy in the making and "
            "ran unnamed (py_pending_races %d)" % r["races"])
    slow = [d for _, d in r["out"] if d > 5.0]
    t.check(not slow, "no thread waited without bound", slow)
    files = jrtest.dumps(t.scratch)
    t.check(len(files) == 1, "one dump", files)
    if files:
        ok, out = jrtest.check_dump(files[0])
        t.check(ok, "jitring-dump --check --sorted", out)
        n = jrtest.load_names(files[0]).count(r["name"])
        t.check(n == 1, "the contended function is in the dump once", n)


if __name__ == "__main__":
    jrtest.main(globals())
