# SPDX-License-Identifier: MIT
"""The linked trampolines ($JITRING_FP_LINK=1) against the default ones,
side by side on each interpreter given.

1. Stacks: `python -m jitring record` (its default route: fp where the
   interpreter keeps frame pointers) of deep_prog.py (60 Python frames),
   and of a recursion 500 frames deep through functions, methods,
   generators and lambdas, in each set: the share of samples cut
   ([stack cut: ...] at the root of stacks.folded) and the share whose
   stack holds the program's <module>, of the samples in its functions.
2. Call cost: a call-heavy mix (fib(20), 20,000 method calls, 200
   generators of 50) under a session, every copy made before: callgrind's
   instruction count of the mix in each set (the run with the mix less
   the run without it, PYTHONHASHSEED=0), where valgrind is installed;
   and the process CPU time of the mix (best of 5 in each of 6 runs,
   the sets in turn), with the load average beside it.
Usage: bench_fplink.py [--python PY]... [--quick]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEEP = os.path.normpath(os.path.join(HERE, "..", "..", "python", "tests",
                                     "deep_prog.py"))
CUT = "[stack cut: outer frames not recorded]"

REC500 = """import sys
sys.setrecursionlimit(5000)
class C:
    def m(self, n):
        return sum(g(n - 1))
def g(n):
    yield (lambda k: f(k))(n - 1)
def f(n):
    if n <= 0:
        s = 0
        for i in range(3000):
            s += i
        return s
    return C().m(n - 1)
for _ in range(int(sys.argv[2])):
    f(int(sys.argv[1]) // 4)
"""

COST = """import os, sys, time, jitring
jitring.start(dir=sys.argv[1])
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
class C:
    def m(self, x):
        return x + 1
def gen(n):
    for i in range(n):
        yield i
def work(k):
    fib(k)
    c, s = C(), 0
    for i in range(20000 * (k > 0)):
        s = c.m(s)
    for j in range(200 * (k > 0)):
        for v in gen(50):
            s += v
work(0)
k = int(sys.argv[2])
if sys.argv[3] == "time":
    best = 1e9
    for _ in range(5):
        t0 = time.process_time()
        work(k)
        best = min(best, time.process_time() - t0)
    print(best)
else:
    work(k)
jitring.stop()
"""


def shares(folded, script):
    """(% of the program's samples whose stack holds its <module>, % of
    all samples cut)"""
    mod = n = cut = n_all = 0
    with open(folded) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            frames, c = stack.split(";"), int(c)
            n_all += c
            cut += c if CUT in frames[1:2] else 0
            if any(x.endswith(":" + script) for x in frames):
                n += c
                mod += c if "py::<module>:" + script in frames else 0
    return 100.0 * mod / max(n, 1), 100.0 * cut / max(n_all, 1)


BASE = dict(os.environ)


def env_for(link):
    return dict(BASE, JITRING_FP_LINK="1" if link else "0")


def base_env(py):
    """The environment for @py: without $PYTHONPATH where jitring is
    installed in it (a wheel in a venv), else as given (a build tree)."""
    bare = dict(os.environ)
    bare.pop("PYTHONPATH", None)
    if subprocess.run([py, "-c", "import jitring._jitring"], env=bare,
                      capture_output=True).returncode == 0:
        return bare
    return dict(os.environ)


def stacks(py, scratch, quick):
    rec500 = os.path.join(scratch, "rec500.py")
    with open(rec500, "w") as f:
        f.write(REC500)
    progs = [("deep-60", [DEEP, "20", "300" if quick else "3000"], DEEP),
             ("rec-500", [rec500, "500", "300" if quick else "3000"],
              rec500)]
    print("%-9s %-8s %8s %8s %6s" % ("program", "set", "module%", "cut%",
                                     "load"))
    for name, argv, script in progs:
        for link in (False, True):
            out = os.path.join(scratch, "%s-%d" % (name, link))
            p = subprocess.run([py, "-m", "jitring", "record", "-o", out,
                                "--"] + argv, capture_output=True,
                               text=True, env=env_for(link))
            what = "linked" if link else "default"
            if p.returncode:
                print("%-9s %-8s record failed: %s" % (name, what,
                                                       p.stderr[-300:]))
                continue
            mod, cut = shares(os.path.join(out, "stacks.folded"),
                              os.path.abspath(script))
            print("%-9s %-8s %7.1f%% %7.1f%% %6.2f" % (
                name, what, mod, cut, os.getloadavg()[0]))


def instructions(py, prog, scratch, link, k):
    """callgrind's instruction count of the whole run."""
    out = os.path.join(scratch, "cg.out")
    p = subprocess.run(["valgrind", "--tool=callgrind",
                        "--callgrind-out-file=" + out, py, prog, scratch,
                        str(k), "count"], capture_output=True, text=True,
                       env=dict(env_for(link), PYTHONHASHSEED="0"))
    for line in p.stderr.splitlines():
        if "refs:" in line:
            return int(line.split("refs:")[1].replace(",", ""))
    return None


def cost(py, scratch, quick):
    prog = os.path.join(scratch, "cost.py")
    with open(prog, "w") as f:
        f.write(COST)
    # The interpreter itself, not a wrapper script, under valgrind.
    with open(py, "rb") as f:
        elf = f.read(4) == b"\x7fELF"
    if shutil.which("valgrind") and elf:
        mix = []
        for link in (False, True):
            a = instructions(py, prog, scratch, link, 0)
            b = instructions(py, prog, scratch, link, 20)
            mix.append(b - a if a and b else None)
        if None not in mix:
            print("call cost, instructions of the mix: default %d, "
                  "linked %d (%+.2f%%)" % (mix[0], mix[1],
                                           100.0 * (mix[1] / mix[0] - 1)))
    else:
        print("call cost, instructions: skipped (no valgrind, or %s is "
              "a script)" % py)
    best = {False: [], True: []}
    for _ in range(3 if quick else 6):
        for link in (False, True):
            p = subprocess.run([py, prog, scratch, "25", "time"],
                               capture_output=True, text=True,
                               env=env_for(link))
            if p.returncode == 0:
                best[link].append(float(p.stdout.split()[-1]))
    if best[False] and best[True]:
        print("call cost, CPU time of the mix (best of the runs, in turn): "
              "default %.4f s, linked %.4f s (%+.1f%%), load %.2f" % (
                  min(best[False]), min(best[True]),
                  100.0 * (min(best[True]) / min(best[False]) - 1),
                  os.getloadavg()[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if os.uname().machine != "x86_64":
        print("bench_fplink: the linked trampoline is x86_64 only")
        return
    for py in a.python or [sys.executable]:
        scratch = tempfile.mkdtemp(prefix="jitring-fplink.")
        BASE.clear()
        BASE.update(base_env(py))
        try:
            v = subprocess.run([py, "-c", "import sys; print(sys.version."
                                "split()[0])"], capture_output=True,
                               text=True).stdout.strip()
            print("== %s (%s)" % (py, v))
            stacks(py, scratch, a.quick)
            cost(py, scratch, a.quick)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
