# SPDX-License-Identifier: MIT
"""Shared helpers for the Python module's tests.

Each test is a script that prints its checks, ends with "N passed, N
failed" and exits 0 (pass), 1 (fail) or 77 (skip), like the C tests.
Environment (set by meson): PYTHONPATH finds the built jitring package,
JITRING_DUMP is build/tools/jitring-dump.

A test file's cases are its functions named test_*, each taking the
Test (and what the file's fixture gives); main(globals()) runs them on
unittest, in the order they are written, each on its own: an exception
or a timeout ($JITRING_TEST_CASE_TIMEOUT seconds, 900 by default) fails
that case, and the next one runs.  t.skip(why) in a case skips that case
alone (in the fixture: the whole file); a case that neither checks nor
skips anything fails, and so does a file that made no check and skipped
nothing.  A failed check is never hidden by a skip: the file exits 1
whatever was skipped after it, and says so.  Case names on the command
line (with or without test_) run those alone, a name after "-" leaves
that case out; a file that takes another word there (test_threads.py's
engine) takes it off sys.argv before main().  Each case ends with a line
of its time ("-- test_x: 1.2 s").
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback

PASS, FAIL, SKIP = 0, 1, 77


class Test:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = []
        self.scratch = tempfile.mkdtemp(prefix="jitring-py.")
        self.keep = False
        self.in_case = False

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok: " + what)
        else:
            self.failed += 1
            self.keep = True
            print("FAIL: " + what + (": " + str(detail) if detail else ""))
        sys.stdout.flush()
        return bool(cond)

    def skip_part(self, what, why):
        self.skipped.append(what)
        print("SKIP: %s: %s" % (what, why))
        sys.stdout.flush()

    def skip(self, why):
        """Skips what runs now: the case in main(), else the file.  Never
        hides a failed check (done())."""
        self.skipped.append(why)
        print("SKIP: " + why)
        sys.stdout.flush()
        if self.in_case:
            raise Skipped(why)
        self.done()

    def cleanup(self):
        if self.keep:
            print("scratch directory kept: " + self.scratch)
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def done(self):
        """Exits: 1 after any failed check, whatever was skipped; 77 when
        nothing was checked and something was skipped; 1 when nothing
        was checked or skipped (a test that shows nothing does not
        pass); else 0."""
        if self.failed and self.skipped:
            print("FAIL: %d failed check(s) before or beside %d skip(s): "
                  "the test fails" % (self.failed, len(self.skipped)))
        elif not self.passed and not self.failed and not self.skipped:
            self.check(False, "the test makes a check or skips")
        self.cleanup()
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        if self.failed:
            os._exit(FAIL)
        if not self.passed:
            os._exit(SKIP)
        os._exit(PASS)


class Skipped(BaseException):
    """t.skip() in a case: main() ends that case and runs the next.  Not
    an Exception, so that a case's own "except Exception" lets it by."""


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def cases_of(ns):
    """The test_* functions defined in the module of namespace @ns, in
    the order they are written."""
    fns = [v for k, v in ns.items()
           if k.startswith("test_") and callable(v) and
           getattr(v, "__module__", None) == ns.get("__name__")]
    return sorted(fns, key=lambda f: f.__code__.co_firstlineno)


def main(ns, fixture=None, timeout=None):
    """Run the cases of the test file whose globals() are @ns on
    unittest (see the module's doc); @fixture(t), if given, returns what
    each case takes after t (a tuple), made once before the first case;
    a generator fixture yields that tuple once, and runs on from there
    after the last case (to stop what it started, or to check what the
    cases left), an exception there a failed check.  Exits as
    Test.done() does."""
    import inspect
    import signal
    import unittest
    t = Test()
    every = cases_of(ns)
    want = [w for w in sys.argv[1:] if not w.startswith("-")]
    skip = [w[1:] for w in sys.argv[1:] if w.startswith("-")]
    names = {f.__name__ for f in every} | {f.__name__[5:] for f in every}
    wrong = [w for w in want + skip if w not in names]
    if wrong:
        print("usage: %s [CASE...] [-CASE...]; cases: %s"
              % (os.path.basename(ns.get("__file__", "test")),
                 " ".join(f.__name__[5:] for f in every)))
        t.cleanup()
        sys.exit(2)
    chosen = [f for f in every
              if (not want or f.__name__ in want or f.__name__[5:] in want)
              and f.__name__ not in skip and f.__name__[5:] not in skip]
    limit = timeout or int(os.environ.get("JITRING_TEST_CASE_TIMEOUT",
                                          "900"))
    rest = None
    try:
        # A skip here (perf missing) skips the file: t.done().
        made = fixture(t) if fixture else ()
        if inspect.isgenerator(made):
            rest, made = made, next(made)
        args = tuple(made)
    except Exception:
        traceback.print_exc()
        t.check(False, "the cases' fixture is made")
        t.done()

    class Result(unittest.TestResult):
        """A case's exception or timeout told where it happens, as a
        failed check."""

        def addError(self, test, err):
            traceback.print_exception(*err)
            t.check(False, "%s: %s" % (test.shortDescription(),
                                        "ended within %d s" % limit
                                        if err[0] is CaseTimeout else
                                        "no exception escapes it"))

        addFailure = addError

    result = Result()

    def one(fn):
        def case():
            print("== " + fn.__name__)
            sys.stdout.flush()
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(limit)
            t0 = time.monotonic()
            before = (t.passed, t.failed, len(t.skipped))
            t.in_case = True
            try:
                fn(t, *args)
            except Skipped:
                pass
            finally:
                t.in_case = False
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
                if t.failed > before[1] and len(t.skipped) > before[2]:
                    print("FAIL: %s: skipped after %d failed check(s): "
                          "the case fails" % (fn.__name__,
                                              t.failed - before[1]))
                # Each case's time, for the suite's budget.
                print("-- %s: %.1f s" % (fn.__name__,
                                         time.monotonic() - t0))
                sys.stdout.flush()
            # An exception (addError) is a failed check of its own.
            if (t.passed, t.failed, len(t.skipped)) == before:
                t.check(False, "%s: makes a check or skips" % fn.__name__)
        return unittest.FunctionTestCase(case, description=fn.__name__)

    suite = unittest.TestSuite(one(fn) for fn in chosen)
    suite.run(result)
    if rest is not None:
        try:
            next(rest, None)
        except Exception:
            traceback.print_exc()
            t.check(False, "the cases' fixture is taken down")
    t.done()


def poll(cond, timeout=60, every=0.01):
    """cond()'s value once it is true, or after @timeout s (a hang's
    bound, never a verdict of its own): how a case waits for an event it
    cannot be told of."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got or time.monotonic() >= end:
            return got
        time.sleep(every)


def free_threaded():
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def dump_tool():
    tool = os.environ.get("JITRING_DUMP") or shutil.which("jitring-dump")
    if not tool or not os.access(tool, os.X_OK):
        raise RuntimeError("jitring-dump not found (set JITRING_DUMP)")
    return tool


def dumps(d):
    return sorted(glob.glob(os.path.join(d, "jit-*.dump")))


def check_dump(path):
    """(ok, output) of jitring-dump --check --sorted."""
    p = subprocess.run([dump_tool(), "--check", "--sorted", path],
                       capture_output=True, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def records(path):
    p = subprocess.run([dump_tool(), "--json", path], capture_output=True,
                       text=True, check=True)
    # One record a line: split at "\n" only (a name may hold U+2028,
    # which JSON leaves as it is and splitlines() would break at).
    return [json.loads(line) for line in p.stdout.split("\n") if line]


def load_names(path):
    """The CODE_LOAD names of a dump, in file order."""
    return [r["name"] for r in records(path) if r["type"] == "CODE_LOAD"]


def make_function(name, filename, body="return x + 1"):
    """A fresh function with its own, never-called code object."""
    ns = {}
    src = "def %s(x):\n    %s\n" % (name, body)
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


PTH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                   "jitring-autostart.pth")


def perf_usable():
    """None where perf records cpu-clock here; else why not (a skip's
    reason)."""
    perf = shutil.which("perf")
    if not perf:
        return "perf is not installed"
    p = subprocess.run([perf, "record", "-e", "cpu-clock", "-o",
                        os.devnull, "true"], capture_output=True, text=True)
    if p.returncode != 0:
        return "'perf record -e cpu-clock true' fails: " + \
            p.stderr.strip()[-200:]
    return None


def record_python(t):
    """(python, env) for running `python -m jitring record` as a user
    would: the test skips where perf cannot record; python is this
    interpreter where jitring is installed in it (a wheel, its .pth hook
    active), else a venv of it with the hook (hook_venv); env has HOME in
    the scratch folder, no $JITRING_PROFILE and no $PYTHONPATH (the .pth
    finds the package), and the venv's bin first on $PATH."""
    why = perf_usable()
    if why:
        t.skip(why)
    import jitring
    site = os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))
    if os.path.exists(os.path.join(site, "jitring-autostart.pth")):
        py = sys.executable         # an installed wheel, its .pth active
    else:
        py = hook_venv(t, True)
    env = dict(os.environ, HOME=t.scratch)
    env.pop("JITRING_PROFILE", None)
    env.pop("PYTHONPATH", None)     # the venv's .pth finds the package
    env["PATH"] = os.path.dirname(py) + os.pathsep + env.get("PATH", "")
    return py, env


def hook_venv(t, with_hook=True, name=None):
    """A venv of the interpreter under test whose .pth puts the jitring
    package under test on sys.path and, with_hook, holds the line the
    installed package's jitring-autostart.pth holds: $JITRING_PROFILE
    then reaches every Python process it starts, in the build tree as
    from an installed wheel.  Returns its python."""
    import jitring
    d = os.path.join(t.scratch, name or
                     ("venv-hook" if with_hook else "venv-plain"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", d],
                   check=True)
    py = os.path.join(d, "bin", "python")
    site = subprocess.run([py, "-c", "import sysconfig; "
                           "print(sysconfig.get_path('platlib'))"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    lines = [os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))]
    if with_hook:
        with open(PTH) as f:
            lines.append(f.read().strip())
    with open(os.path.join(site, "jitring-test.pth"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return py


def tname(fn):
    """The name jitring gives fn's code object."""
    co = fn.__code__
    return "py::%s:%s" % (co.co_qualname, co.co_filename)
