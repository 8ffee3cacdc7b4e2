# SPDX-License-Identifier: MIT
"""What jitring costs a Python process at start-up, against plain python
in the same interpreter.

    PYTHONPATH=<dir holding the built jitring package> \\
    python3.13t bench/python/bench_startup.py [--runs N]

Two venvs of the interpreter, made in a scratch folder: "plain", whose
.pth puts the package on sys.path, and "hook", whose .pth holds the line
of the installed package's jitring-autostart.pth as well (as
python/tests/jrtest.py's hook_venv makes them).  Measured, each the wall
time of a whole process from fork to exit, the runs of the two sides of
a row interleaved (A B A B ...) so that a change of the machine's load
falls on both:

  hook      python -c pass in "hook" against "plain", JITRING_PROFILE
            unset: the autostart line's cost when it starts nothing
  runner    python -m jitring --dir DIR empty.py against python empty.py
            (both in "plain"): the writer, its flusher, the trampoline
            stock, the close at exit

Printed per row: the median and the lowest of each side, in ms, and the
difference of the medians.  python/tests/test_autostart.py checks what
the hook costs without timing it: unset, it imports nothing.
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
import jrtest  # noqa: E402  (the tests' venvs, made the same way)


def once(argv, env):
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return 1000.0 * (time.perf_counter() - t0)


def row(name, a, b, env, runs):
    """@a and @b (argv) run @runs times each, interleaved."""
    ta, tb = [], []
    once(a, env)        # the page cache warm for both
    once(b, env)
    for _ in range(runs):
        ta.append(once(a, env))
        tb.append(once(b, env))
    ma, mb = statistics.median(ta), statistics.median(tb)
    print("%-8s %9.2f %9.2f %9.2f %9.2f %+9.2f"
          % (name, ma, min(ta), mb, min(tb), mb - ma))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30,
                    help="runs of each side of a row (default 30)")
    a = ap.parse_args()
    env = dict(os.environ)
    # The package's .pyc files written by the first runs, as an installed
    # package has them (bench/README.md's table is measured so).
    for k in ("PYTHONPATH", "JITRING_PROFILE", "JITRING_DIR",
              "PYTHONDONTWRITEBYTECODE"):
        env.pop(k, None)
    scratch = tempfile.mkdtemp(prefix="jitring-bench-startup.")
    try:
        # The venvs the tests make (jrtest.hook_venv), in the scratch.
        where = types.SimpleNamespace(scratch=scratch)
        plain = jrtest.hook_venv(where, False)
        hook = jrtest.hook_venv(where, True)
        empty = os.path.join(scratch, "empty.py")
        open(empty, "w").close()
        dumps = os.path.join(scratch, "dumps")
        os.mkdir(dumps)
        print("start-up on %s %s, %s, %d CPUs, %d runs a side, "
              "interleaved; load average %.2f"
              % (platform.python_implementation(), platform.python_version(),
                 sys.executable, os.cpu_count(), a.runs, os.getloadavg()[0]))
        print("%-8s %9s %9s %9s %9s %9s" % ("row", "A median", "A least",
                                           "B median", "B least", "B - A"))
        row("hook", [plain, "-c", "pass"], [hook, "-c", "pass"], env,
            a.runs)
        row("runner", [plain, empty],
            [plain, "-m", "jitring", "--dir", dumps, empty], env, a.runs)
        print("ms; hook: A plain, B with the autostart line (JITRING_PROFILE "
              "unset); runner: A python empty.py, B python -m jitring "
              "empty.py")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
