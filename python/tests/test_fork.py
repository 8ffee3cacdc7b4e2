# SPDX-License-Identifier: MIT
"""fork under jitring.

- os.fork(): the child writes its own jit-<childpid>.dump, describing the
  functions it runs (also those the parent had described before the fork);
  the parent's dump stays valid and holds none of the child's functions;
- a child that ends with os._exit() keeps its entries (jitring wraps
  os._exit while active to flush first), also a multiprocessing 'fork'
  child, which always ends that way;
- a single-threaded script that forks under python -m jitring gets no
  "This process ... is multi-threaded" DeprecationWarning (the module
  pauses the flusher thread before the fork), twice in a row (the flusher
  came back for the writes in between), while one that has started a
  thread does get it (the check can fail).
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
    import os, sys, threading
    def before():
        return 1
    def between():
        return 2
    def child():
        return 3
    def fork_once():
        pid = os.fork()
        if pid == 0:
            child()
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        print("child", pid, "status", st)
    def main():
        stop = threading.Event()
        if sys.argv[1] == "thread":
            threading.Thread(target=stop.wait).start()
        before()
        fork_once()
        between()        # a write: the flusher is needed again
        fork_once()
        stop.set()
    main()
""")


def run_forker(t, d, mode):
    script = os.path.join(d, "forker.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    p = subprocess.run([sys.executable, "-W", "always::DeprecationWarning",
                        "-m", "jitring", "--dir", d, script, mode],
                       capture_output=True, text=True, timeout=120)
    t.check(p.returncode == 0 and p.stdout.count("status 0") == 2,
            "%s: the script forks twice under python -m jitring" % mode,
            p.stdout + p.stderr)
    files = jrtest.dumps(d)
    t.check(len(files) == 3 and all(jrtest.check_dump(f)[0] for f in files),
            "%s: the parent's and the two children's dumps, all valid" % mode,
            files)
    parent = dump_of(d, _parent_pid(files, p.stdout))
    names = jrtest.load_names(parent) if os.path.exists(parent) else []
    t.check(any(n.startswith("py::between:") for n in names),
            "%s: the function run between the forks is in the parent's "
            "dump" % mode, names)
    return p.stderr


def _parent_pid(files, out):
    kids = {int(l.split()[1]) for l in out.splitlines()
            if l.startswith("child ")}
    pids = [int(os.path.basename(f)[4:-5]) for f in files]
    rest = [x for x in pids if x not in kids]
    return rest[0] if len(rest) == 1 else -1


def test_warning(t):
    d = os.path.join(t.scratch, "warn")
    os.mkdir(d)
    err = run_forker(t, d, "alone")
    t.check("multi-threaded" not in err, "a single-threaded script: no "
            "'multi-threaded' DeprecationWarning on either os.fork()", err)
    d = os.path.join(t.scratch, "warn-thread")
    os.mkdir(d)
    err = run_forker(t, d, "thread")
    t.check(err.count("multi-threaded") == 2, "with a second Python thread: "
            "CPython's warning on both forks (the check above can fail)",
            err)


if __name__ == "__main__":
    jrtest.main(globals())
