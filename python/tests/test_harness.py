# SPDX-License-Identifier: MIT
"""The suite's own harnesses say what happened: jrtest (this folder's
cases), llvm/tests/llvmtest.py and, through the C unit test
test_harness, tests/harness.h.  Each small test file below is written to
the scratch folder and run as meson runs a test; its exit status and
output are checked:
- a failed check then a skip exits 1 and says so, in a case, in the
  fixture and in llvmtest;
- a case's skip skips that case alone: the cases after it run;
- a case that neither checks nor skips fails, and so does a file that
  checks nothing;
- a skip is not swallowed by the case's own "except Exception";
- a file whose checks all pass exits 0; one that only skips exits 77.
"""

import os
import subprocess
import sys

import jrtest

HERE = os.path.dirname(os.path.realpath(__file__))
# The repository's, where this file is run from it (an sdist has none).
LLVM_TESTS = os.path.join(HERE, "..", "..", "llvm", "tests")

JR_HEAD = "import jrtest\n\n"
JR_TAIL = "\n\nif __name__ == '__main__':\n    jrtest.main(globals()%s)\n"


def run_file(t, name, text, path=HERE):
    """(exit status, output) of the test file @text run as meson runs
    one, with @path (jrtest's or llvmtest's folder) on its sys.path."""
    f = os.path.join(t.scratch, name + ".py")
    with open(f, "w") as out:
        out.write(text)
    env = dict(os.environ, PYTHONPATH=path)
    p = subprocess.run([sys.executable, f], env=env, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def jr_file(cases, fixture=""):
    """A jrtest file of @cases, with @fixture's text when given."""
    return JR_HEAD + fixture + "\n\n" + cases + \
        JR_TAIL % (", fixture" if fixture else "")


def expect(t, what, got, status, *lines, absent=()):
    rc, out = got
    t.check(rc == status, "%s: exits %d" % (what, status),
            "%d:\n%s" % (rc, out))
    for line in lines:
        t.check(line in out, "%s: says %r" % (what, line), out)
    for line in absent:
        t.check(line not in out, "%s: does not say %r" % (what, line), out)


def test_fail_then_skip(t):
    got = run_file(t, "fail_skip", jr_file(
        "def test_a(t):\n"
        "    t.check(False, 'a')\n"
        "    t.skip('no tool')\n\n"
        "def test_b(t):\n"
        "    t.check(True, 'b')\n"))
    expect(t, "a failed check then a skip", got, jrtest.FAIL,
           "test_a: skipped after 1 failed check(s): the case fails",
           "ok: b", "1 passed, 1 failed")


def test_skip_one_case(t):
    got = run_file(t, "skip_one", jr_file(
        "def test_a(t):\n"
        "    t.skip('no tool')\n"
        "    t.check(False, 'never reached')\n\n"
        "def test_b(t):\n"
        "    t.check(True, 'b')\n"))
    expect(t, "a case's skip", got, jrtest.PASS, "SKIP: no tool", "ok: b",
           "1 passed, 0 failed", absent=("never reached",))


def test_skip_through_except(t):
    got = run_file(t, "skip_except", jr_file(
        "def test_a(t):\n"
        "    try:\n"
        "        t.skip('no tool')\n"
        "    except Exception:\n"
        "        t.check(True, 'swallowed')\n"))
    expect(t, "a skip inside the case's own 'except Exception'", got,
           jrtest.SKIP, "SKIP: no tool", "0 passed, 0 failed",
           absent=("swallowed",))


def test_case_without_check(t):
    got = run_file(t, "no_check_case", jr_file(
        "def test_a(t):\n"
        "    for x in []:\n"
        "        t.check(x, 'never')\n\n"
        "def test_b(t):\n"
        "    t.check(True, 'b')\n"))
    expect(t, "a case with no check", got, jrtest.FAIL,
           "FAIL: test_a: makes a check or skips", "ok: b")


def test_file_without_check(t):
    got = run_file(t, "no_check_file", JR_HEAD +
                   "t = jrtest.Test()\nt.done()\n")
    expect(t, "a file with no check", got, jrtest.FAIL,
           "FAIL: the test makes a check or skips", "0 passed, 1 failed")
    got = run_file(t, "no_case", jr_file("X = 1\n"))
    expect(t, "a file with no case", got, jrtest.FAIL,
           "0 passed, 1 failed")


def test_all_skip(t):
    got = run_file(t, "all_skip", jr_file(
        "def test_a(t):\n"
        "    t.skip('no tool')\n\n"
        "def test_b(t):\n"
        "    t.skip_part('the tool part', 'no tool')\n"))
    expect(t, "cases that only skip", got, jrtest.SKIP, "SKIP: no tool",
           "SKIP: the tool part: no tool", "0 passed, 0 failed")


def test_fixture(t):
    got = run_file(t, "fixture_skip", jr_file(
        "def test_a(t):\n"
        "    t.check(True, 'a')\n",
        "def fixture(t):\n"
        "    t.skip('no perf')\n"))
    expect(t, "a skip in the fixture", got, jrtest.SKIP, "SKIP: no perf",
           "0 passed, 0 failed", absent=("ok: a",))
    got = run_file(t, "fixture_fail_skip", jr_file(
        "def test_a(t):\n"
        "    t.check(True, 'a')\n",
        "def fixture(t):\n"
        "    t.check(False, 'probe')\n"
        "    t.skip('no perf')\n"))
    expect(t, "a failed check then a skip in the fixture", got,
           jrtest.FAIL, "FAIL: 1 failed check(s) before or beside 1 "
           "skip(s): the test fails", "0 passed, 1 failed")


def test_exception(t):
    got = run_file(t, "exception", jr_file(
        "def test_a(t):\n"
        "    raise ValueError('boom')\n\n"
        "def test_b(t):\n"
        "    t.check(True, 'b')\n"))
    expect(t, "a case's exception", got, jrtest.FAIL,
           "FAIL: test_a: no exception escapes it", "ok: b")


LL_HEAD = "import llvmtest\n\n\ndef main(t):\n"
LL_TAIL = "\n\nllvmtest.guarded('h', main)\n"


def test_llvmtest(t):
    if not os.path.exists(os.path.join(LLVM_TESTS, "llvmtest.py")):
        t.skip("no llvm/tests/llvmtest.py beside python/ (an sdist)")
    cases = [
        ("fail then skip", "    t.check(False, 'a')\n    t.skip('no lli')",
         jrtest.FAIL, "FAIL: skipped after 1 failed check(s)"),
        ("no check", "    pass", jrtest.FAIL,
         "FAIL: the test made no check"),
        ("a skip", "    t.skip('no lli')", jrtest.SKIP, "SKIP: no lli"),
        ("a pass then a skip", "    t.check(True, 'a')\n"
         "    t.skip('no lli')", jrtest.SKIP, "1 passed, 0 failed"),
        ("a pass", "    t.check(True, 'a')", jrtest.PASS,
         "1 passed, 0 failed"),
    ]
    for i, (what, body, status, line) in enumerate(cases):
        got = run_file(t, "llvm_%d" % i, LL_HEAD + body + LL_TAIL,
                       LLVM_TESTS)
        expect(t, "llvmtest: " + what, got, status, line)


if __name__ == "__main__":
    jrtest.main(globals())
