# SPDX-License-Identifier: MIT
"""$JITRING_PROFILE: profiling from interpreter start, in a tree of processes.

A venv of the interpreter under test gets a .pth file that puts the
package on sys.path and holds the line the installed package's
jitring-autostart.pth holds (so the test runs against this build).  A
parent started with JITRING_PROFILE=1 starts a child with subprocess and
one with multiprocessing's spawn method: each process writes its own
valid jit-<pid>.dump naming its own function, and only its own.  Unset
(and set to 0), no process writes a dump.  A subinterpreter started
under it prints nothing.  With $JITRING_DIR unset, a starting process
removes the dumps in /tmp of exited processes older than a day (and only
those); a $JITRING_DIR is never pruned.  Unset (or empty), the hook
imports nothing: a process starts with the modules it has without it
(its time: bench/python/bench_startup.py).
"""

import os
import subprocess
import sys
import textwrap
import time

import jrtest

TREE = textwrap.dedent("""
    import multiprocessing as mp, os, subprocess, sys
    def spawned_child_fn():
        return sum(range(1000))
    def parent_fn():
        return 1
    if __name__ == "__main__":
        parent_fn()
        subprocess.run([sys.executable, "-c",
                        "def subprocess_child_fn():\\n    return 2\\n"
                        "subprocess_child_fn()"], check=True)
        ctx = mp.get_context("spawn")
        p = ctx.Process(target=spawned_child_fn)
        p.start()
        p.join()
        print(os.getpid(), p.pid, p.exitcode)
""")


def run_tree(t, py, value, d):
    env = dict(os.environ, JITRING_DIR=d)
    env.pop("PYTHONPATH", None)     # the venv's .pth finds the package
    env.pop("JITRING_PROFILE", None)
    if value is not None:
        env["JITRING_PROFILE"] = value
    script = os.path.join(t.scratch, "tree.py")
    with open(script, "w") as f:
        f.write(TREE)
    return subprocess.run([py, script], capture_output=True, text=True,
                          env=env, timeout=120)


def test_tree(t, py):
    d = os.path.join(t.scratch, "on")
    os.mkdir(d)
    p = run_tree(t, py, "1", d)
    if not t.check(p.returncode == 0, "the tree ran with JITRING_PROFILE=1",
                   p.stderr[-800:]):
        return
    parent, child, code = p.stdout.split()
    t.check(code == "0", "the spawn child exited 0")
    files = jrtest.dumps(d)
    t.check(len(files) >= 3, "a dump per process (parent, subprocess, "
            "spawn child and its resource tracker): %d"
            % len(files), files)
    names = {}
    for f in files:
        ok, out = jrtest.check_dump(f)
        t.check(ok, "%s valid" % os.path.basename(f), out)
        pid = os.path.basename(f)[4:-5]
        names[pid] = [n.split(":")[2] for n in jrtest.load_names(f)
                      if n.startswith("py::")]
    own = {"parent_fn": parent, "spawned_child_fn": child}
    for fn, pid in own.items():
        t.check(fn in names.get(pid, []), "%s is in process %s's dump"
                % (fn, pid))
        others = [q for q, ns in names.items() if q != pid and fn in ns]
        t.check(not others, "%s in no other process's dump" % fn, others)
    sub = [q for q, ns in names.items() if "subprocess_child_fn" in ns]
    t.check(len(sub) == 1 and sub[0] not in (parent, child),
            "the subprocess child's function in its own dump only", sub)


def test_off(t, py):
    for value in (None, "0"):
        off = os.path.join(t.scratch, "off-%s" % value)
        os.mkdir(off)
        p = run_tree(t, py, value, off)
        t.check(p.returncode == 0 and not jrtest.dumps(off),
                "JITRING_PROFILE %s: no dump" %
                ("unset" if value is None else "=" + value),
                p.stderr[-300:] + str(jrtest.dumps(off)))


SUBINTERP = textwrap.dedent("""
    try:
        import _interpreters as I
        run = I.exec
    except ImportError:
        import _xxsubinterpreters as I
        run = I.run_string
    i = I.create()
    run(i, "x = 1")
    I.destroy(i)
    print("subinterpreter ok")
""")


def test_subinterpreter(t, py):
    d = os.path.join(t.scratch, "subinterpreter")
    os.mkdir(d)
    env = dict(os.environ, JITRING_DIR=d, JITRING_PROFILE="1")
    env.pop("PYTHONPATH", None)
    p = subprocess.run([py, "-c", SUBINTERP], capture_output=True,
                       text=True, env=env, timeout=120)
    t.check(p.returncode == 0 and "subinterpreter ok" in p.stdout and
            not p.stderr.strip(),
            "JITRING_PROFILE=1: a subinterpreter starts with nothing on "
            "stderr", p.stderr[-800:])


def test_prune(t, py):
    """Dumps in /tmp: an exited process's older than a day go, the rest
    stay; a $JITRING_DIR is never pruned."""
    from jitring._autostart import prune
    d = os.path.join(t.scratch, "prune")
    os.mkdir(d)
    with open("/proc/sys/kernel/pid_max") as f:
        dead = int(f.read()) + 7        # never a running process
    live = os.getpid()
    now = time.time()
    files = {"jit-%d.dump" % dead: (3 * 86400, False),
             "jitted-%d-12.so" % dead: (3 * 86400, False),
             "jit-%d.dump" % (dead + 1): (3600, True),
             "jit-%d.dump" % live: (3 * 86400, True),
             "jit-x.dump": (3 * 86400, True),
             "notes.txt": (3 * 86400, True)}
    for name, (age, _) in files.items():
        path = os.path.join(d, name)
        open(path, "w").close()
        os.utime(path, (now - age, now - age))
    n = prune(d, now)
    kept = set(os.listdir(d))
    t.check(n == 2 and kept == {k for k, v in files.items() if v[1]},
            "prune: only an exited process's dump and image older than a "
            "day go", (n, sorted(kept)))

    # End to end: JITRING_DIR unset, the first process of the hour prunes
    # /tmp (its stamp file removed so that this one does).
    old = "/tmp/jit-%d.dump" % dead
    mine = "/tmp/jit-%d.dump" % (dead + 1)
    for path, age in ((old, 3 * 86400), (mine, 3 * 86400)):
        open(path, "w").close()
        os.utime(path, (now - age, now - age))
    # A $JITRING_DIR is never pruned: the old dump in it stays.
    keep = os.path.join(d, "jit-%d.dump" % (dead + 2))
    open(keep, "w").close()
    os.utime(keep, (now - 3 * 86400, now - 3 * 86400))
    stamp = "/tmp/.jitring-prune-%d" % os.getuid()
    try:
        os.unlink(stamp)
    except FileNotFoundError:
        pass
    env = dict(os.environ, JITRING_PROFILE="1", JITRING_DIR=d)
    env.pop("PYTHONPATH", None)
    subprocess.run([py, "-c", "pass"], env=env, check=True, timeout=60)
    t.check(os.path.exists(keep) and os.path.exists(old),
            "JITRING_DIR set: nothing pruned")
    env.pop("JITRING_DIR")
    p = subprocess.run([py, "-c", "import os; print(os.getpid())"],
                       env=env, capture_output=True, text=True,
                       timeout=60)
    own = "/tmp/jit-%s.dump" % p.stdout.strip()
    t.check(p.returncode == 0 and not os.path.exists(old) and
            not os.path.exists(mine) and os.path.exists(own),
            "JITRING_DIR unset: a process's start prunes /tmp's old dumps "
            "of exited processes, and writes its own there",
            p.stderr[-300:])
    for path in (own, old, mine):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# What a process has imported once it runs its first line.
MODULES = "import sys; print(' '.join(sorted(sys.modules)))"


def modules(py, env, value):
    """(status, set of sys.modules' names) of `py -c MODULES` with
    JITRING_PROFILE @value (None: unset)."""
    env = dict(env)
    if value is not None:
        env["JITRING_PROFILE"] = value
    p = subprocess.run([py, "-c", MODULES], capture_output=True, text=True,
                       env=env, timeout=120)
    return p.returncode, set(p.stdout.split())


def test_startup(t, py):
    """The hook's cost at start-up where it starts nothing: unset (or
    empty), its line imports nothing, so a process starts with the very
    modules it has without the line (a start-up time would follow the
    machine's load: bench/python/bench_startup.py measures it)."""
    plain = jrtest.hook_venv(t, False)
    env = dict(os.environ, JITRING_DIR=os.path.join(t.scratch, "startup"))
    os.mkdir(env["JITRING_DIR"])
    env.pop("PYTHONPATH", None)
    env.pop("JITRING_PROFILE", None)
    rc, base = modules(plain, env, None)
    t.check(rc == 0 and "site" in base, "start-up: python lists its "
            "modules (%d)" % len(base))
    # The listing sees an import of the hook's: set, jitring's modules.
    rc, on = modules(py, env, "1")
    t.check(rc == 0 and "jitring._autostart" in on - base,
            "start-up: JITRING_PROFILE=1 imports the hook's modules",
            sorted(on - base)[:8])
    for value in (None, ""):
        rc, got = modules(py, env, value)
        t.check(rc == 0 and got == base,
                "start-up: JITRING_PROFILE %s: the hook imports nothing "
                "(the modules of python without it)"
                % ("unset" if value is None else "empty"),
                (sorted(got - base), sorted(base - got)))


def fixture(t):
    if not os.path.exists(jrtest.PTH):
        t.skip("no python/jitring-autostart.pth in this tree")
    return (jrtest.hook_venv(t, True),)


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
