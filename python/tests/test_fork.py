# SPDX-License-Identifier: MIT
"""fork under jitring.

- os.fork(): the child writes its own jit-<childpid>.dump, describing the
  functions it runs (also those the parent had described before the fork);
  the parent's dump stays valid and holds none of the child's functions;
- a child that ends with os._exit() keeps its entries (jitring wraps
  os._exit while active to flush first), also a multiprocessing 'fork'
  child, which always ends that way;
- a single-threaded script that forks under python -m jitring gets no
  "This process ... is multi-threaded" DeprecationWarning (needs
  jitring_pause() in the library: without it that part is skipped).
"""

import multiprocessing
import os
import subprocess
import sys
import textwrap

import jrtest

import jitring


def pre_fork(x):
    return x + 1


def in_child(x):
    return x * 2


def parent_after(x):
    return x - 1


def mp_target(x):
    return in_child(x)


def dump_of(d, pid):
    return os.path.join(d, "jit-%d.dump" % pid)


def check_valid(t, path, what):
    if not t.check(os.path.exists(path), what + ": dump exists", path):
        return []
    ok, out = jrtest.check_dump(path)
    t.check(ok, what + ": jitring-dump --check --sorted", out)
    return jrtest.load_names(path)


def test_fork(t):
    d = os.path.join(t.scratch, "fork")
    os.mkdir(d)
    jitring.start(dir=d)
    pre_fork(1)
    jitring.flush()
    pid = os.fork()
    if pid == 0:
        pre_fork(2)
        in_child(3)
        os._exit(0)        # jitring's wrapper flushes first
    _, status = os.waitpid(pid, 0)
    t.check(status == 0, "the child exited 0")
    parent_after(1)
    jitring.stop()

    me = jrtest.tname
    names = check_valid(t, dump_of(d, os.getpid()), "parent")
    t.check(names.count(me(pre_fork)) == 1 and me(parent_after) in names,
            "parent: its functions once each")
    t.check(me(in_child) not in names, "parent: none of the child's")
    names = check_valid(t, dump_of(d, pid), "child after os._exit")
    t.check(me(in_child) in names, "child: its own function")
    t.check(names.count(me(pre_fork)) == 1,
            "child: a function the parent described, described again")

    d = os.path.join(t.scratch, "mp")
    os.mkdir(d)
    jitring.start(dir=d)
    p = multiprocessing.get_context("fork").Process(target=mp_target,
                                                     args=(1,))
    p.start()
    p.join()
    jitring.stop()
    t.check(p.exitcode == 0, "multiprocessing fork child exited 0")
    names = check_valid(t, dump_of(d, p.pid), "multiprocessing child")
    t.check(me(mp_target) in names and me(in_child) in names,
            "multiprocessing child: its functions are in its dump")


SCRIPT = textwrap.dedent("""
    import os
    def before():
        return 1
    def child():
        return 2
    def main():
        before()
        pid = os.fork()
        if pid == 0:
            child()
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        print("child", pid, "status", st)
    main()
""")


def test_warning(t):
    d = os.path.join(t.scratch, "warn")
    os.mkdir(d)
    script = os.path.join(d, "forker.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    p = subprocess.run([sys.executable, "-W", "always::DeprecationWarning",
                        "-m", "jitring", "--dir", d, script],
                       capture_output=True, text=True, timeout=120)
    t.check(p.returncode == 0 and "status 0" in p.stdout,
            "a single-threaded script forks under python -m jitring",
            p.stdout + p.stderr)
    files = jrtest.dumps(d)
    t.check(len(files) == 2 and all(jrtest.check_dump(f)[0] for f in files),
            "parent's and child's dumps, both valid", files)
    warned = "multi-threaded" in p.stderr
    if not jitring._jitring._features()["pause"]:
        t.skip_part("no 'multi-threaded' DeprecationWarning on os.fork()",
                    "needs jitring_pause() in libjitring (stop the flusher "
                    "thread until next needed); warned: %s" % warned)
        return
    t.check(not warned, "no 'multi-threaded' DeprecationWarning on "
            "os.fork()", p.stderr)


def main(t):
    test_fork(t)
    test_warning(t)


if __name__ == "__main__":
    jrtest.Test().run(main)
