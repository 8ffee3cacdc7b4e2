# SPDX-License-Identifier: MIT
"""Many threads making new functions: each named in the dump exactly once.

test_threads.py [rings|mutex] [CASE...]: the engine (rings by default) is
a word of its own on the command line, taken off before the case names.

Threads started before and after start() each make fresh functions and
call them; all threads also enter the same fresh functions at the same
moment (the race PyUnstable_Code_SetExtra loses under free threading).
Then: jitring-dump --check --sorted is ok, every function's name is in the
dump exactly once, and (free-threaded build) the GIL is still disabled.
"""

import sys
import threading
from collections import Counter

import jrtest

import jitring

ENGINES = ("rings", "mutex")
BEFORE = 32             # threads started before start()
AFTER = 32              # and after
OWN = 200               # fresh functions each thread makes and calls
SHARED = 200            # fresh functions all threads enter at once


def test_fresh_functions(t, engine):
    gil_at_start = sys._is_gil_enabled() if jrtest.free_threaded() else None
    shared = [jrtest.make_function("shared_%d" % i, "<shared>")
              for i in range(SHARED)]
    started = threading.Barrier(BEFORE + 1)     # BEFORE threads + main
    go = threading.Barrier(BEFORE + AFTER)
    names = [None] * (BEFORE + AFTER)
    errors = []

    def worker(k):
        try:
            if k < BEFORE:
                started.wait()
            own = [jrtest.make_function("own_%d_%d" % (k, i),
                                        "<thread-%d>" % k)
                   for i in range(OWN)]
            go.wait()
            for f in shared:        # every thread, the same new code
                f(1)
            for f in own:
                f(1)
            names[k] = [jrtest.tname(f) for f in own]
        except Exception as e:      # reported by the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,))
               for k in range(BEFORE)]
    for th in threads:
        th.start()
    started.wait()              # these threads exist before start()
    jitring.start(dir=t.scratch, engine=engine)
    for k in range(BEFORE, BEFORE + AFTER):
        th = threading.Thread(target=worker, args=(k,))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    t.check(jitring.stop(), "stop() after start()")
    st = jitring.stats()
    t.check(not errors, "no worker raised", errors[:3])

    files = jrtest.dumps(t.scratch)
    t.check(len(files) == 1, "one dump", files)
    if not files:
        return
    ok, out = jrtest.check_dump(files[0])
    t.check(ok, "jitring-dump --check --sorted", out.splitlines()[0])
    counts = Counter(jrtest.load_names(files[0]))
    want = [n for ns in names if ns for n in ns]
    want += [jrtest.tname(f) for f in shared]
    missing = [n for n in want if counts[n] == 0]
    dup = [n for n in want if counts[n] > 1]
    t.check(len(want) == (BEFORE + AFTER) * OWN + SHARED,
            "every worker reported its %d functions" % OWN)
    t.check(not missing, "every function is in the dump (%d)" % len(want),
            "%d missing, e.g. %s" % (len(missing), missing[:3]))
    t.check(not dup, "no function is in the dump twice",
            "%d twice or more, e.g. %s" % (len(dup), dup[:3]))
    before = [n for ns in names[:BEFORE] if ns for n in ns]
    t.check(before and all(counts[n] == 1 for n in before),
            "threads started before start() are profiled")
    made = st["py_copies"] + st["py_copies_reused"]
    t.check(made == st["trampoline_copies"] == sum(counts.values()),
            "py_copies + py_copies_reused == trampoline_copies == "
            "CODE_LOADs (%d)" % made,
            "%d %d %d" % (made, st["trampoline_copies"],
                          sum(counts.values())))
    t.check(st["py_copy_errors"] == 0 and st["refused_invalid"] == 0,
            "no copy refused")
    print("stats: " + ", ".join("%s=%s" % kv for kv in sorted(st.items())
                                if kv[0] in ("py_pending_races",
                                             "py_copy_waits", "py_copy_drops",
                                             "refills_waited",
                                             "trampoline_arenas_waited",
                                             "rings_grown")))
    if jrtest.free_threaded():
        t.check(gil_at_start is False and not sys._is_gil_enabled(),
                "the GIL stays disabled")


if __name__ == "__main__":
    engine = "rings"
    if sys.argv[1:2] and sys.argv[1] in ENGINES:
        engine = sys.argv.pop(1)
    print("engine: " + engine)
    jrtest.main(globals(), lambda t: (engine,))
