# SPDX-License-Identifier: MIT
"""Threads entering the same new code object while its copy is made.

With $JITRING_PY_TEST_COPY_DELAY_US every copy takes 300 ms (the making
thread releases its thread state meanwhile), so the other threads that
enter the same fresh function find its copy in the making: they must not
wait for it without bound, must run the function correctly (unnamed, and
counted in py_pending_races), and the function must still be in the dump
exactly once.  Runs the scenario in a child interpreter with that variable.

The threads wait for their start in a read of a pipe, and between it and
the function run no code of their own (none to copy once jitring is on):
they come to the function within milliseconds of one another, and find
the copy in the making for as long as a thread that finds it spins and
yields (256 spins, 64 sched_yield()s: up to 90 ms seen beside two busy
processes on 2 CPUs, where 20 ms copies and a barrier gave no race), so
300 ms copies make the race whatever the load.  jitring's own first calls
after start() and in stop() take as long: about 2 s in all.
"""

import json
import os
import subprocess
import sys
import textwrap

import jrtest

CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    import jitring, jrtest
    N = 8
    f = jrtest.make_function("contended", "<race>")
    ready, go, done, end = os.pipe(), os.pipe(), os.pipe(), os.pipe()
    out = [None] * N
    def take(p, n):
        got = 0
        while got < n:
            got += len(os.read(p[0], n - got))
    def run(k):
        os.write(ready[1], b"x")
        os.read(go[0], 1)
        t0 = time.monotonic()
        out[k] = (f(k), time.monotonic() - t0)
        os.write(done[1], b"x")
        os.read(end[0], 1)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(N)]
    for t in ts: t.start()
    take(ready, N)
    jitring.start(dir=sys.argv[1])
    os.write(go[1], b"x" * N)
    take(done, N)
    jitring.stop()
    os.write(end[1], b"x" * N)
    for t in ts: t.join()
    st = jitring.stats()
    print(json.dumps({"out": out, "races": st["py_pending_races"],
                      "copies": st["py_copies"],
                      "name": jrtest.tname(f)}))
""")


def test_contended(t):
    env = dict(os.environ, JITRING_PY_TEST_COPY_DELAY_US="300000")
    # A thread that waited without bound would hang the child: its end
    # is the check, and each call's time against a minute, a hang's bound
    # (a call takes milliseconds; a loaded machine's few more are no
    # failure).
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, t.scratch],
                           capture_output=True, text=True, timeout=100,
                           env=env)
    except subprocess.TimeoutExpired as e:
        t.check(False, "no thread waited without bound: the child ended "
                "within %d s" % e.timeout, (e.stderr or b"")[-500:])
        return
    if not t.check(p.returncode == 0, "no thread waited without bound: "
                   "the child ran to its end", p.stderr[-500:]):
        return
    r = json.loads(p.stdout.strip().splitlines()[-1])
    t.check([v for v, _ in r["out"]] == [k + 1 for k in range(8)],
            "every thread got its result", r["out"])
    t.check(r["races"] >= 1, "threads found the copy in the making and "
            "ran unnamed (py_pending_races %d)" % r["races"])
    slow = [d for _, d in r["out"] if d > 60.0]
    t.check(not slow, "no thread waited without bound (the calls took "
            "%s s)" % ", ".join("%.3f" % d for _, d in r["out"]), slow)
    files = jrtest.dumps(t.scratch)
    t.check(len(files) == 1, "one dump", files)
    if files:
        ok, out = jrtest.check_dump(files[0])
        t.check(ok, "jitring-dump --check --sorted", out)
        n = jrtest.load_names(files[0]).count(r["name"])
        t.check(n == 1, "the contended function is in the dump once", n)


if __name__ == "__main__":
    jrtest.main(globals())
