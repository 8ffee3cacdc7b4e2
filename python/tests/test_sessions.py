# SPDX-License-Identifier: MIT
"""Profiling switched on and off while the program goes on: safe to leave on.

Each case runs in a child interpreter and checks what the host sees:
 1. start()/stop() hundreds of times while other threads compile, call
    and free code objects (CPython's code watcher registry is read
    without a lock: a watcher cleared under a thread that fires it calls
    address 0); also `python -m jitring` exiting while daemon threads
    still compile.  The child must exit 0.
 2. sessions keep resources flat: with a thread calling all the time
    and one born and ended in each session, VmSize, the mapping count
    and the open descriptors stay where they were after the first tenth
    of the sessions (the trampoline set and the copies carry over), every
    dump valid and naming the functions its session ran; with threads
    compiling and freeing code too, copies of destroyed code are reused
    ($JITRING_TEST_SESSIONS sets the count: 300 by default, 10,000 in
    the soak of `make stress`; case 1 runs as many, 400 at most);
 3. a reference to os._exit saved during a session still exits with its
    status after stop(), from the main thread and from another one;
 5. the C stack of one profiled call: every Python call becomes a C call
    under any eval-frame hook; jitring's share of it is its trampoline's
    frame (jr_eval() tail-calls), no more than -X perf's, and deep recursion
    in a thread with the default 8 MiB stack ends in RecursionError at
    CPython's C recursion limit, not in a crash;
 4. another PEP 523 tool that chained to jitring's eval function and puts
    it back after stop(): later calls run uninstrumented again and a
    later start() works;
 6. `python -m jitring bin/tool`, bin/tool a symlink to real/tool.py,
    imports the modules next to real/tool.py, as python does;
 7. a dump directory that does not exist is named in the error; dir=""
    is a ValueError, not /tmp.
"""

import json
import os
import subprocess
import sys
import textwrap

import jrtest

SESSIONS = int(os.environ.get("JITRING_TEST_SESSIONS", "300"))


def run(cmd, env=None, timeout=120):
    """subprocess.run(); a hang is a failure (returncode -9)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, -9, "",
                                           "timed out after %d s" % timeout)


def child(code, args=(), env=None, timeout=120, flags=()):
    """Run @code in a child interpreter."""
    return run([sys.executable] + list(flags) +
               ["-c", textwrap.dedent(code)] + list(args), env, timeout)


STOP_RACE = """
    import sys, threading
    import jitring
    stop = False
    def work(k):
        i = 0
        while not stop:
            ns = {}
            exec(compile("def f(x):\\n    return x + %d\\nr = f(1)" % i,
                         "<w%d>" % k, "exec"), ns)
            i += 1
    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for th in ts: th.start()
    for i in range(int(sys.argv[2])):
        jitring.start(dir=sys.argv[1])
        jitring.stop()
    stop = True
    for th in ts: th.join()
    print("done")
"""

DAEMONS = """
import threading
def work(k):
    i = 0
    while True:
        exec(compile("def f(x):\\n    return x + %d\\nf(1)" % i, "<d>", "exec"),
             {})
        i += 1
for k in range(3):
    threading.Thread(target=work, args=(k,), daemon=True).start()
sum(range(100000))
"""


def test_stop_race(t):
    d = os.path.join(t.scratch, "race")
    os.mkdir(d)
    for k in range(3):
        p = child(STOP_RACE, [d, str(min(400, SESSIONS))])
        if not t.check(p.returncode == 0 and p.stdout.strip() == "done",
                       "stop() under threads that compile and free code "
                       "(run %d): exit %d" % (k + 1, p.returncode),
                       p.stderr[-800:]):
            return
    script = os.path.join(t.scratch, "daemons.py")
    with open(script, "w") as f:
        f.write(DAEMONS)
    dd = os.path.join(t.scratch, "daemons")
    os.mkdir(dd)
    for k in range(5):
        p = run([sys.executable, "-m", "jitring", "--dir", dd, script])
        if not t.check(p.returncode == 0, "python -m jitring exits while "
                       "daemon threads compile (run %d): exit %d"
                       % (k + 1, p.returncode), p.stderr[-800:]):
            return


SOAK = """
    import json, os, sys, threading
    import jitring
    def usage():
        with open("/proc/self/status") as f:
            vm = [int(l.split()[1]) for l in f if l.startswith("VmSize:")][0]
        with open("/proc/self/maps") as f:
            maps = sum(1 for _ in f)
        return {"vm_kib": vm, "maps": maps,
                "fds": len(os.listdir("/proc/self/fd"))}
    def keep(x):
        return x * 2
    def gen(n):
        for i in range(n):
            yield keep(i)
    stop = False
    def caller(k):
        while not stop:
            sum(gen(50))
    def compiler(k):
        i = 0
        while not stop:
            ns = {}
            exec(compile("def g(x):\\n    return x + %d\\nr = g(1)" % i,
                         "<c%d>" % k, "exec"), ns)
            ns.clear()
            i += 1
    def short(n):
        sum(gen(n % 7 + 1))
    base, sessions, sample, mode = (sys.argv[1], int(sys.argv[2]),
                                    sys.argv[3], sys.argv[4])
    ts = [threading.Thread(target=caller, args=(0,))]
    if mode == "churn":
        ts += [threading.Thread(target=compiler, args=(k,)) for k in range(2)]
    for th in ts: th.start()
    marks = {}
    for i in range(sessions):
        d = sample if i == sessions - 1 else base
        jitring.start(dir=d)
        keep(i)
        s = threading.Thread(target=short, args=(i,))
        s.start(); s.join()
        jitring.stop()
        if i in (sessions // 10, sessions - 1):
            marks[i] = usage()
    stop = True
    for th in ts: th.join()
    st = jitring.stats()
    print(json.dumps({"marks": marks, "reused": st["py_copies_reused"],
                      "freed": st["py_copies_freed"],
                      "copies": st["py_copies"]}))
"""


def soak(t, mode, sessions):
    """Run SOAK; its result, or None."""
    base = os.path.join(t.scratch, mode)
    sample = os.path.join(t.scratch, mode + "-last")
    os.mkdir(base)
    os.mkdir(sample)
    p = child(SOAK, [base, str(sessions), sample, mode], timeout=3000)
    if not t.check(p.returncode == 0, "%s: %d sessions" % (mode, sessions),
                   p.stderr[-800:]):
        return None
    r = json.loads(p.stdout.strip().splitlines()[-1])
    marks = sorted(r["marks"].items(), key=lambda kv: int(kv[0]))
    (i0, a), (i1, b) = marks
    print("%s: session %s: %s; session %s: %s; copies made %d, described "
          "again %d, of destroyed code kept %d" %
          (mode, i0, a, i1, b, r["copies"], r["reused"], r["freed"]))
    for d in (base, sample):
        files = jrtest.dumps(d)
        t.check(len(files) == 1, "%s: one dump in %s"
                % (mode, os.path.basename(d)), files)
        if files:
            ok, out = jrtest.check_dump(files[0])
            t.check(ok, "%s: jitring-dump --check --sorted"
                    % os.path.basename(d), out)
    files = jrtest.dumps(sample)
    if files:
        names = jrtest.load_names(files[0])
        t.check(any(n.startswith("py::keep:") for n in names) and
                any(n.startswith("py::short:") for n in names),
                "%s: the last session's dump names the functions it ran"
                % mode, names[:10])
    r["first"], r["last"] = (i0, a), (i1, b)
    return r


def test_flat(t):
    """Sessions with a thread calling, and one born and ended in each."""
    r = soak(t, "flat", SESSIONS)
    if not r:
        return
    (i0, a), (i1, b) = r["first"], r["last"]
    # libjitring keeps each closed writer's handle (about 0.8 KiB) for
    # the life of the process, so that a late call on it is refused, not
    # a use after free: the only growth allowed per session.
    allow = 8 * 1024 + (int(i1) - int(i0))
    t.check(b["vm_kib"] - a["vm_kib"] <= allow,
            "VmSize flat from session %s to %s (%+d KiB, at most %d: 8 MiB "
            "and 1 KiB per session for closed writers' handles)"
            % (i0, i1, b["vm_kib"] - a["vm_kib"], allow))
    t.check(b["maps"] - a["maps"] <= 12, "mappings flat (%d -> %d)"
            % (a["maps"], b["maps"]))
    t.check(b["fds"] - a["fds"] <= 1, "descriptors flat (%d -> %d)"
            % (a["fds"], b["fds"]))
    t.check(r["reused"] >= SESSIONS, "each session describes the copies "
            "of earlier ones again (%d)" % r["reused"])


def test_churn(t):
    """Sessions while two threads compile, call and free code objects.

    The copies in use follow the code objects CPython keeps alive, and
    free-threaded 3.13 keeps part of what this loop compiles even after
    gc.collect() (its own memory grows with the loop without jitring
    too): no bound on memory here, but copies of destroyed code are
    reused and every dump is valid.
    """
    r = soak(t, "churn", max(SESSIONS // 3, 10))
    if r:
        t.check(r["freed"] > 0 and r["reused"] > r["freed"] // 2,
                "copies of destroyed code are reused (%d kept, %d "
                "described again)" % (r["freed"], r["reused"]))


EXIT = """
    import sys, threading
    import jitring
    jitring.start(dir=sys.argv[1])
    from os import _exit
    jitring.stop()
    if sys.argv[2] == "thread":
        threading.Thread(target=_exit, args=(7,)).start()
        threading.Event().wait(30)
    else:
        _exit(7)
    print("after _exit")
"""


def test_saved_exit(t):
    for where in ("main", "thread"):
        p = child(EXIT, [t.scratch, where])
        t.check(p.returncode == 7 and "after _exit" not in p.stdout,
                "os._exit saved during a session exits after stop() "
                "(%s thread): status %d" % (where, p.returncode),
                p.stderr[-500:])


CHAIN = """
    import ctypes, json, sys
    import jitring
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    get = api._PyInterpreterState_GetEvalFrameFunc
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.c_void_p]
    put = api._PyInterpreterState_SetEvalFrameFunc
    put.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    interp = api.PyInterpreterState_Get()
    default = ctypes.cast(api._PyEval_EvalFrameDefault, ctypes.c_void_p).value
    def f(x):
        return x + 1
    jitring.start(dir=sys.argv[1])
    ours = get(interp)
    # Another tool: saves what is installed (jitring's), installs its own
    # (here the default stands in for it), and after jitring's stop()
    # puts back what it saved.
    saved = ours
    put(interp, default)
    jitring.stop()
    put(interp, saved)
    back = get(interp) == ours
    f(1)
    after_call = get(interp)
    err = ""
    try:
        jitring.start(dir=sys.argv[1])
        again = jitring.is_active()
        jitring.stop()
    except RuntimeError as e:
        again, err = False, str(e)
    print(json.dumps([back, ours != default, after_call == default, again,
                      err]))
"""


def test_chained_hook(t):
    try:
        import ctypes  # noqa: F401
    except ImportError:
        t.skip_part("chained eval hook", "no ctypes in this interpreter")
        return
    p = child(CHAIN, [t.scratch])
    if not t.check(p.returncode == 0, "the chained-hook child ran",
                   p.stderr[-800:]):
        return
    back, installed, uninstalled, again, err = json.loads(
        p.stdout.strip().splitlines()[-1])
    t.check(back and installed,
            "the other tool put jitring's function back")
    t.check(uninstalled, "the next call uninstalls it: calls run "
            "uninstrumented again")
    t.check(again, "a later start() works", err)


STACK = """
    import sys, threading
    from jitring import _jitring
    sys.setrecursionlimit(1000000)
    if sys.argv[1] == "jitring":
        import jitring
        jitring.start(dir=sys.argv[2])
    marks, depth = {}, [0]
    def f(n):
        if n in (100, 1100):
            marks[n] = _jitring._stack_address()
        if n < 1100:
            return f(n + 1)
    def deep(n):
        depth[0] = n
        return deep(n + 1)
    def run():
        f(0)
        try:
            deep(0)
        except RecursionError:
            pass
    threading.stack_size(8 << 20)
    th = threading.Thread(target=run)
    th.start()
    th.join()
    print((marks[100] - marks[1100]) / 1000, depth[0])
"""


def test_stack(t):
    per = {}
    for mode, flags in (("jitring", []), ("perf", ["-X", "perf"])):
        p = child(STACK, [mode, t.scratch], flags=flags)
        if not t.check(p.returncode == 0, "%s: deep recursion in an 8 MiB "
                       "thread ends in RecursionError (exit %d)"
                       % (mode, p.returncode), p.stderr[-500:]):
            return
        b, depth = p.stdout.split()
        per[mode] = float(b)
        print("%s: %s bytes of C stack per Python call, RecursionError "
              "at depth %s" % (mode, b, depth))
    # 3.13: 480 against 560 bytes; 3.14 and 3.15 (Debian sid's): equal.
    t.check(0 < per["jitring"] <= per["perf"], "a profiled call takes no "
            "more C stack under jitring than under -X perf (%.0f <= %.0f "
            "bytes)" % (per["jitring"], per["perf"]))


def test_symlinked_script(t):
    real = os.path.join(t.scratch, "real")
    binl = os.path.join(t.scratch, "bin")
    os.mkdir(real)
    os.mkdir(binl)
    with open(os.path.join(real, "helper.py"), "w") as f:
        f.write("VALUE = 41\n")
    with open(os.path.join(real, "tool.py"), "w") as f:
        f.write("import helper\nprint(helper.VALUE + 1)\n")
    os.symlink(os.path.join("..", "real", "tool.py"),
               os.path.join(binl, "tool"))
    p = run([sys.executable, "-m", "jitring", "--dir", t.scratch,
             os.path.join(binl, "tool")])
    t.check(p.returncode == 0 and p.stdout.strip() == "42",
            "a symlinked script imports the modules next to its target",
            p.stderr[-500:])


MISSING = """
    import jitring
    try:
        jitring.start()
    except OSError as e:
        print(e.errno, e.filename, "|", e)
    try:
        jitring.start(dir="")
    except ValueError as e:
        print("ValueError", e)
"""


def test_dir_errors(t):
    env = dict(os.environ, JITRING_DIR="/nonexistent/jitring-dir")
    p = child(MISSING, env=env)
    lines = p.stdout.strip().splitlines()
    t.check(len(lines) == 2 and lines[0].startswith(
        "2 /nonexistent/jitring-dir |") and "/nonexistent/jitring-dir" in
        lines[0].split("|", 1)[1],
        "$JITRING_DIR that does not exist: ENOENT naming the directory",
        p.stdout + p.stderr[-300:])
    t.check(len(lines) == 2 and lines[1].startswith("ValueError"),
            "dir='' is a ValueError", p.stdout)


if __name__ == "__main__":
    jrtest.main(globals())
