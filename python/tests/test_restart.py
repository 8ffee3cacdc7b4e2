# SPDX-License-Identifier: MIT
"""start, stop, start again in one process.

Each session describes the functions it runs in its own dump: a function
described in the first session is described again in the second.  Code
indexes stay unique in the process.  In the same directory the second
session continues jit-<pid>.dump (jitring_open() after jitring_close()),
with code indexes unique across both sessions, since perf inject names its
ELFs jitted-<pid>-<code_index>.so next to the dump.
"""

import os

import jrtest

import jitring


def first(x):
    return x + 1


def second(x):
    return x + 2


def session(d):
    jitring.start(dir=d)
    first(1)
    second(1)
    jitring.stop()


def check_sessions(t, files, what):
    """Dumps valid, each session's functions in; the code indexes."""
    idx = []
    names = []
    for f in files:
        ok, out = jrtest.check_dump(f)
        t.check(ok, "%s: %s valid" % (what, os.path.basename(f)), out)
        recs = [r for r in jrtest.records(f) if r["type"] == "CODE_LOAD"]
        mine = [r["code_index"] for r in recs]
        t.check(len(mine) == len(set(mine)), "%s: code_index unique in %s"
                % (what, os.path.basename(f)))
        idx += mine
        names += [r["name"] for r in recs]
    t.check(names.count(jrtest.tname(first)) == 2 and
            names.count(jrtest.tname(second)) == 2,
            "%s: each session describes the functions it runs" % what,
            (names.count(jrtest.tname(first)),
             names.count(jrtest.tname(second))))
    return idx


def test_two_dirs(t):
    d1 = os.path.join(t.scratch, "a")
    d2 = os.path.join(t.scratch, "b")
    os.mkdir(d1)
    os.mkdir(d2)
    session(d1)
    session(d2)
    check_sessions(t, jrtest.dumps(d1) + jrtest.dumps(d2),
                   "two directories")
    t.check(not jitring.is_active(), "inactive after the second stop()")


def test_one_dir(t):
    d3 = os.path.join(t.scratch, "c")
    os.mkdir(d3)
    session(d3)
    session(d3)
    idx = check_sessions(t, jrtest.dumps(d3), "one directory")
    # perf inject names each ELF jitted-<pid>-<code_index>.so next to the
    # dump: a code_index reused in one directory overwrites an ELF.
    t.check(len(idx) == len(set(idx)), "one directory: code_index unique "
            "across both sessions (%d loads)" % len(idx))


if __name__ == "__main__":
    jrtest.main(globals())
