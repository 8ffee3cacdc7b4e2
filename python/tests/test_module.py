# SPDX-License-Identifier: MIT
"""The module's API, its import, and the python -m jitring runner.

- importing jitring leaves the GIL of a free-threaded build disabled
  (Py_mod_gil = Py_MOD_GIL_NOT_USED), checked in a fresh interpreter;
- start/stop/is_active/flush/stats, errors for bad arguments;
- names are py::<qualname>:<filename>, a function called through its
  copy returns, raises and is re-entered as usual (generators too);
- names as the library gets them in pieces: non-ASCII UTF-8, a file name
  with a lone surrogate (backslashreplace), a NUL in a qualified name
  (\\x00, as every control character is escaped),
  a name longer than NAME_MAX (cut, never inside a UTF-8 sequence), and a
  first entry with an exception pending (throw() into a fresh generator);
- python -m jitring script.py args and python -m jitring -m module args.
"""

import errno
import os
import subprocess
import sys
import textwrap

import jrtest

import jitring

STAT_KEYS = ("engine", "entries_written", "refills_waited",
             "trampoline_arenas_waited", "rings_grown", "trampoline_copies",
             "py_copies", "py_copy_drops", "py_pending_races")


def run_py(args, **kw):
    return subprocess.run([sys.executable] + args, capture_output=True,
                          text=True, timeout=120, **kw)


def test_gil(t):
    if not jrtest.free_threaded():
        t.skip_part("GIL stays disabled", "not a free-threaded build")
        return
    p = run_py(["-c", "import sys, jitring; "
                "print(sys._is_gil_enabled())"])
    t.check(p.returncode == 0 and p.stdout.strip() == "False"
            and "GIL" not in p.stderr,
            "importing jitring leaves the GIL disabled",
            p.stdout + p.stderr)
    p = run_py(["-W", "error", "-c", "import jitring, sys; jitring.start("
                "dir=%r); jitring.stop(); print(sys._is_gil_enabled())"
                % jrtest.tempfile.mkdtemp(dir=t.scratch)])
    t.check(p.returncode == 0 and p.stdout.strip() == "False",
            "start() and stop() leave it disabled", p.stdout + p.stderr)


def gen(n):
    for i in range(n):
        yield i


class Boom(Exception):
    pass


def raiser():
    raise Boom("x")


def recurse(n):
    return 0 if n == 0 else 1 + recurse(n - 1)


def test_api(t):
    d = os.path.join(t.scratch, "api")
    os.mkdir(d)
    t.check(not jitring.is_active(), "inactive before start()")
    t.check(jitring.stop() is False, "stop() when inactive returns False")
    try:
        jitring.start(dir=d, engine="bogus")
        t.check(False, "engine='bogus' raises ValueError")
    except ValueError:
        t.check(True, "engine='bogus' raises ValueError")
    try:
        jitring.start(dir=os.path.join(d, "missing"))
        t.check(False, "a missing dir raises OSError(ENOENT)")
    except OSError as e:
        t.check(e.errno == errno.ENOENT,
                "a missing dir raises OSError(ENOENT)", e)
    for bad in ({"ready_rings": -1}, {"ready_copies": 1 << 32},
                {"ready_rings": 1 << 64}, {"ready_copies": True}):
        try:
            jitring.start(dir=d, **bad)
            t.check(False, "%r raises ValueError" % bad)
        except ValueError:
            t.check(True, "%r raises ValueError" % bad)
    t.check(not jitring.is_active(), "still inactive after failed starts")
    t.check(jrtest.dumps(d) == [], "failed starts left no dump",
            jrtest.dumps(d))

    jitring.start(dir=d)
    t.check(jitring.is_active(), "active after start()")
    try:
        jitring.start(dir=d)
        t.check(False, "a second start() raises RuntimeError")
    except RuntimeError:
        t.check(True, "a second start() raises RuntimeError")
    f = jrtest.make_function("api_func", "/some/file.py")
    t.check(f(41) == 42, "a function returns through its copy")
    t.check(list(gen(4)) == [0, 1, 2, 3], "a generator resumes through it")
    try:
        raiser()
        t.check(False, "an exception propagates through the copy")
    except Boom:
        t.check(True, "an exception propagates through the copy")
    t.check(recurse(500) == 500, "recursion 500 deep")
    jitring.flush()
    st = jitring.stats()
    t.check(all(k in st for k in STAT_KEYS), "stats() has the counters",
            [k for k in STAT_KEYS if k not in st])
    t.check(st["engine"] == "rings", "the default engine is rings")
    t.check(st["entries_written"] >= 4,
            "flush() wrote the entries (%d)" % st["entries_written"])
    t.check(jitring.stop() is True, "stop() returns True")
    t.check(not jitring.is_active(), "inactive after stop()")
    t.check(f(1) == 2, "functions run after stop()")

    files = jrtest.dumps(d)
    t.check(len(files) == 1, "one dump in dir", files)
    if not files:
        return
    ok, out = jrtest.check_dump(files[0])
    t.check(ok, "jitring-dump --check --sorted", out)
    names = jrtest.load_names(files[0])
    for want in ("py::api_func:/some/file.py",
                 "py::gen:" + __file__, "py::raiser:" + __file__,
                 "py::recurse:" + __file__):
        t.check(names.count(want) == 1, "%s once in the dump" % want,
                names.count(want))
    t.check(os.path.basename(files[0]) == "jit-%d.dump" % os.getpid(),
            "the dump is jit-<pid>.dump")
    os.unlink(files[0])

    # A program that says how many threads start at once: the rings are
    # made before start() returns, the arenas (174,080 copies each for
    # the built-in template) by the flusher's next rounds.  The defaults
    # make 64 rings (spares count once taken) and 11 arenas.
    jitring.start(dir=d, ready_rings=2000, ready_copies=3000000)
    st = jitring.stats()
    jitring.flush()
    jitring.flush()
    st2 = jitring.stats()
    jitring.stop()
    t.check(st["refills_ahead"] >= 2000,
            "ready_rings=2000: 2000 rings ready at start (%d)"
            % st["refills_ahead"])
    t.check(st2["trampoline_arenas_ahead"] >= 19,
            "ready_copies=3000000: at least 19 arenas ready (%d)"
            % st2["trampoline_arenas_ahead"])


def fresh(qualname, filename, body="return x + 1"):
    f = jrtest.make_function("f", filename, body)
    f.__code__ = f.__code__.replace(co_qualname=qualname)
    return f


def test_names(t):
    d = os.path.join(t.scratch, "names")
    os.mkdir(d)
    jitring.start(dir=d)
    cases = []
    f = fresh("f\u00fcnf.\u4e2d", "/tmp/\u00fc.py")
    cases.append((f, "py::f\u00fcnf.\u4e2d:/tmp/\u00fc.py", "non-ASCII"))
    f = fresh("sur", "/x/\udcff.py")
    cases.append((f, "py::sur:/x/\\udcff.py", "a lone surrogate"))
    f = fresh("a\0b", "<nul>")
    cases.append((f, "py::a\\x00b:<nul>", "a NUL byte"))
    long_file = "/" + "\u00e9" * 5000
    f = fresh("long", long_file)
    cases.append((f, None, "a name over NAME_MAX"))
    for f, _, _ in cases:
        f(1)

    # The first entry of a code object with an exception pending: a
    # generator made before start() (g() itself runs the code, up to
    # RETURN_GENERATOR) and entered by throw() after it.
    jitring.stop()
    g = jrtest.make_function("g", "/y/\udcfe.py", "yield x")
    g.__code__ = g.__code__.replace(co_qualname="thrown")
    gen = g(1)
    jitring.start(dir=d)
    try:
        gen.throw(Boom("thrown in"))
        t.check(False, "throw() into a fresh generator raises the "
                "exception thrown")
    except Boom as e:
        t.check(str(e) == "thrown in", "throw() into a fresh generator "
                "raises the exception thrown", e)
    jitring.stop()
    files = jrtest.dumps(d)
    ok, out = jrtest.check_dump(files[0])
    t.check(ok, "names: jitring-dump --check --sorted", out)
    names = jrtest.load_names(files[0])
    for f, want, what in cases:
        if want is not None:
            t.check(names.count(want) == 1, "%s: %s" % (what, ascii(want)),
                    [ascii(n) for n in names if "py::f" not in n][:8])
    cut = [n for n in names if n.startswith("py::long:/")]
    t.check(len(cut) == 1 and len(cut[0].encode()) <= jitring._jitring.NAME_MAX and
            len(cut[0].encode()) > jitring._jitring.NAME_MAX - 2 and
            set(cut[0][len("py::long:/"):]) == {"\u00e9"},
            "a name over NAME_MAX: cut to whole characters at NAME_MAX",
            [len(n.encode()) for n in cut])
    t.check(names.count("py::thrown:/y/\\udcfe.py") == 1,
            "a generator entered by throw(): named, exception kept")


def test_mutex(t):
    d = os.path.join(t.scratch, "mutex")
    os.mkdir(d)
    jitring.start(dir=d, engine="mutex")
    f = jrtest.make_function("mutex_func", "<mutex>")
    f(1)
    st = jitring.stats()
    jitring.stop()
    t.check(st["engine"] == "mutex", "engine='mutex' selects it")
    names = jrtest.load_names(jrtest.dumps(d)[0])
    t.check("py::mutex_func:<mutex>" in names, "the mutex engine's dump")


SCRIPT = textwrap.dedent("""
    import sys, threading
    def work(n):
        return sum(range(n))
    def main():
        ts = [threading.Thread(target=work, args=(1000,)) for _ in range(4)]
        for th in ts: th.start()
        for th in ts: th.join()
        import jitring
        print("argv", sys.argv[1:], "active", jitring.is_active(),
              "name", __name__)
    main()
""")


def test_runner(t):
    d = os.path.join(t.scratch, "runner")
    os.mkdir(d)
    script = os.path.join(d, "prog.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    stock = os.path.join(d, "stock.py")
    with open(stock, "w") as f:
        f.write("import jitring\n"
                "print('ready', jitring.stats()['refills_ahead'] >= 2000)\n")
    p = run_py(["-m", "jitring", "--dir", d, "--ready-rings", "2000",
                "--ready-copies=1000", stock])
    t.check(p.returncode == 0 and "ready True" in p.stdout,
            "python -m jitring --ready-rings 2000", p.stdout + p.stderr)
    for f_ in jrtest.dumps(d):
        os.unlink(f_)
    for bad in ("many", "-1"):
        p = run_py(["-m", "jitring", "--ready-rings", bad, stock])
        t.check(p.returncode != 0 and "needs a number" in p.stderr
                and "Traceback" not in p.stderr,
                "--ready-rings %s is refused" % bad, p.stdout + p.stderr)
    p = run_py(["-m", "jitring", "--dir", d, script, "a", "--dir", "b"])
    t.check(p.returncode == 0 and
            "argv ['a', '--dir', 'b'] active True name __main__" in p.stdout,
            "python -m jitring script.py args", p.stdout + p.stderr)
    files = jrtest.dumps(d)
    t.check(len(files) == 1, "the runner leaves one dump", files)
    if files:
        ok, out = jrtest.check_dump(files[0])
        t.check(ok, "its dump passes --check --sorted", out)
        names = jrtest.load_names(files[0])
        t.check("py::work:" + script in names and
                "py::main:" + script in names,
                "the script's functions are in it")

    d2 = os.path.join(t.scratch, "runner-m")
    os.mkdir(d2)
    p = run_py(["-m", "jitring", "--engine", "mutex", "--dir", d2,
                "-m", "prog", "x"], cwd=d)
    t.check(p.returncode == 0 and
            "argv ['x'] active True name __main__" in p.stdout,
            "python -m jitring -m module args", p.stdout + p.stderr)
    files = jrtest.dumps(d2)
    t.check(len(files) == 1 and
            "py::work:" + script in jrtest.load_names(files[0]),
            "the module's functions are in its dump")
    p = run_py(["-m", "jitring"])
    t.check(p.returncode != 0 and "usage" in p.stderr,
            "no script: usage and a non-zero exit")


if __name__ == "__main__":
    jrtest.main(globals())
