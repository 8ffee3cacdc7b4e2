# SPDX-License-Identifier: MIT
"""What a jitring session costs the profiled program's Python code, per
interpreter, against plain python and CPython's own -X perf / -X perf_jit.

    PYTHONPATH=<dir holding the built jitring package> \\
    python3 bench/python/bench_session.py --python PY [--python PY2 ...]
        [--rounds N] [--no-callgrind] [--no-wall]

Each --python is an interpreter in which jitring imports: with $PYTHONPATH
(a build tree's package; the first, usually) or without it (a venv with
the wheel installed: a build tree's extension is another ABI's).  This
script itself runs on any of them; the work runs in a fresh process of
each interpreter.

Work (call-heavy code, nothing else; this file run as --work-all or
--work-marked in the measured interpreter):
  fib      recursive fib(N): a unit is a call
  method   N calls of a bound method in a for loop: a unit is a call
  gen      a for loop over a generator of N values: a unit is a resume
  newcode  N new code objects (code.replace of one function's code, a new
           function of it), each called once: a unit is a code object
           made and called; under a hook its first call is where the
           trampoline (jitring: the trampoline copy) is made

Modes, the same work in a fresh process each:
  plain     python FILE
  jitring   python -m jitring --dir DIR --engine rings FILE, with
            JITRING_TRAMPOLINE_ELF=1 where record's default (dwarf) mode
            sets it (not where the interpreter keeps frame pointers: fp
            mode): the session record's program runs under
  perf      python -X perf FILE (CPython's perf trampolines, perf map in /tmp)
  perf_jit  python -X perf_jit FILE (dump in /tmp)

Measured:
  callgrind  instructions per unit: one process per mode under
             `valgrind --tool=callgrind` runs each work warm, then at two
             sizes, a callgrind dump after each (a client request from a
             small library built here, called through ctypes); the
             difference of the two sizes' counts divided by the difference
             in units, so the marks, start-up, the session's start and stop
             and each code object's first call cancel out (but for newcode,
             whose units are first calls).  Every thread's instructions
             (jitring's flusher writing the dump among them); the last
             column, a second jitring run with --separate-threads=yes, the
             calling thread's alone.  Repeatable on a loaded machine;
             instructions, not time: a write(2) (-X perf's map line per
             code object) counts its user-space side only.
  wall       the work timed inside the process (time.perf_counter: the
             best of 3 runs after an untimed one; newcode once), the modes'
             processes run in turn (plain jitring perf perf_jit, plain ...)
             for --rounds rounds; printed: the median per mode in ms and
             in ns per unit, its ratio to plain's median, the 1-minute
             load average (os.getloadavg) when the row's runs began and
             ended
"""

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("plain", "jitring", "perf", "perf_jit")
# Sizes: callgrind's two, and the wall-clock one (fib's N is the argument).
SIZES = {
    "fib": ((16, 19), 25),
    "method": ((10000, 30000), 300000),
    "gen": ((10000, 30000), 300000),
    "newcode": ((1000, 3000), 20000),
}
WORKS = ("fib", "method", "gen", "newcode")


# --- the work (run in the measured interpreter) ---------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    """Calls fib(n) makes, itself included."""
    a, b = 1, 1                 # calls of fib(0), fib(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n >= 1 else 1


class Acc:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total


def method(n):
    acc = Acc()
    add = acc.add
    for i in range(n):
        add(i)
    return acc.total


def gen_values(n):
    for i in range(n):
        yield i


def gen(n):
    total = 0
    for v in gen_values(n):
        total += v
    return total


def template(x):
    return x + 1


def newcode(n):
    code = template.__code__
    g = globals()
    FT = type(template)
    total = 0
    for i in range(n):
        f = FT(code.replace(co_name="f%d" % i), g)
        total += f(i)
    return total


def units(name, n):
    return fib_calls(n) if name == "fib" else n


def work(name, n):
    fn = globals()[name]
    best = None
    for i in range(1 if name == "newcode" else 4):
        t0 = time.perf_counter()
        fn(n)
        t = time.perf_counter() - t0
        if i or name == "newcode":      # not the warm-up run
            best = t if best is None else min(best, t)
    print("%.9f" % best)


# --- the driver -----------------------------------------------------------

def probe(py, env, code):
    r = subprocess.run([py, "-c", code], env=env, capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else None


class Interp:
    """@py, the environment in which jitring imports there, what it has."""

    def __init__(self, py, env):
        self.py = py
        self.env = dict(env)
        if probe(py, self.env, "import jitring._jitring") is None:
            self.env.pop("PYTHONPATH", None)
        self.ok = probe(py, self.env, "import jitring._jitring") is not None
        self.version = probe(py, self.env, "import sys, sysconfig; print("
                             "sys.version.split()[0] + ('t' if sysconfig."
                             "get_config_var('Py_GIL_DISABLED') else ''))")
        self.fp = probe(py, self.env, "import sysconfig; print(int("
                        "'-fno-omit-frame-pointer' in ' '.join(sysconfig."
                        "get_config_var(v) or '' for v in ('CFLAGS', "
                        "'PY_CFLAGS', 'CONFIGURE_CFLAGS')).split()))") == "1"
        self.modes = [m for m in MODES if m != "perf_jit" or probe(
            py, self.env, "import sys; sys.exit(0 if sys.version_info >= "
            "(3, 13) else 1)") is not None]
        if not self.ok:
            self.modes = [m for m in self.modes if m != "jitring"]

    def argv(self, mode, scratch, args):
        env = dict(self.env)
        for k in ("JITRING_PROFILE", "JITRING_TRAMPOLINE_ELF",
                  "PYTHONPERFSUPPORT", "PYTHON_PERF_JIT_SUPPORT"):
            env.pop(k, None)
        pre = [self.py]
        if mode == "jitring":
            pre += ["-m", "jitring", "--dir", scratch, "--engine", "rings"]
            if not self.fp:
                env["JITRING_TRAMPOLINE_ELF"] = "1"
        elif mode in ("perf", "perf_jit"):
            pre += ["-X", mode]
        return pre + [os.path.abspath(__file__)] + args, env


def cleanup(pid, scratch):
    """What a run leaves: its jitring dump and ELF files, -X perf's map,
    -X perf_jit's dump (in /tmp: by pid)."""
    for p in glob.glob(os.path.join(scratch, "*")):
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)
    for p in ("/tmp/perf-%d.map" % pid, "/tmp/jit-%d.dump" % pid):
        try:
            os.unlink(p)
        except OSError:
            pass


MARK_C = """#include <valgrind/callgrind.h>
void bench_mark(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
"""


def mark_lib(scratch):
    """A library whose bench_mark(what) makes callgrind write the counts
    since the last mark (a client request: nothing outside valgrind)."""
    c = os.path.join(scratch, "mark.c")
    so = os.path.join(scratch, "mark.so")
    with open(c, "w") as f:
        f.write(MARK_C)
    r = subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared",
                        "-fPIC", "-o", so, c], capture_output=True, text=True)
    if r.returncode != 0:
        print("callgrind: skipped (cannot build the marker: %s)"
              % r.stderr.strip()[-300:])
        return None
    return so


def work_marked(so):
    """In the measured process: each work warm, then at its two sizes,
    a callgrind dump after each."""
    import ctypes
    mark = ctypes.CDLL(so).bench_mark
    mark.argtypes = [ctypes.c_char_p]
    for name in WORKS:
        n1, n2 = SIZES[name][0]
        globals()[name](n1)             # specialised, every copy made
        mark(b"warm")
        for n in (n1, n2):
            globals()[name](n)
            mark(("%s %d" % (name, n)).encode())


TRIGGER = "desc: Trigger: Client Request: "


def callgrind_counts(ip, mode, so, scratch, separate=False):
    """{(work, n): instructions} of one process of @mode: every thread's,
    or with @separate the calling thread's alone (a mark dumps its own
    thread's counts then).  valgrind follows the sid wrapper's exec."""
    out = os.path.join(scratch, "cg")
    d = os.path.join(scratch, "d")
    for p in (out, d):
        os.makedirs(p, exist_ok=True)
    argv, env = ip.argv(mode, d, ["--work-marked", so])
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           "--smc-check=all-non-file",
           "--separate-threads=" + ("yes" if separate else "no"),
           "--callgrind-out-file=" + os.path.join(out, "cg.%p")] + argv
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    got, pids = {}, set()
    for f in glob.glob(os.path.join(out, "cg.*")):
        what = None
        with open(f) as fh:
            for line in fh:
                if line.startswith(TRIGGER):
                    what = line[len(TRIGGER):].split()
                elif line.startswith(("summary:", "totals:")) and what:
                    if len(what) == 2:
                        got[(what[0], int(what[1]))] = int(line.split()[1])
                        pids.add(int(os.path.basename(f).split(".")[1]))
                    break
        os.unlink(f)
    for pid in pids:
        cleanup(pid, d)
    if r.returncode != 0 or not got:
        sys.stderr.write("callgrind %s %s: exit %d: %s\n" % (
            ip.py, mode, r.returncode, r.stderr[-600:]))
        return None
    return got


def run_callgrind(ips, scratch):
    so = mark_lib(scratch)
    if not so:
        return
    print("\n## Instructions per unit (callgrind; the difference of two "
          "sizes)\n")
    print("| interpreter | work | " + " | ".join(MODES) +
          " | jitring - plain | jitring - perf | jitring, calling thread |")
    print("|:--|:--|" + "--:|" * (len(MODES) + 3))
    for ip in ips:
        counts = {m: callgrind_counts(ip, m, so, scratch) for m in ip.modes}
        if "jitring" in ip.modes:
            counts["own"] = callgrind_counts(ip, "jitring", so, scratch,
                                             separate=True)
        for name in WORKS:
            n1, n2 = SIZES[name][0]
            du = units(name, n2) - units(name, n1)
            per = {}
            for m, c in counts.items():
                if c and (name, n1) in c and (name, n2) in c:
                    per[m] = (c[(name, n2)] - c[(name, n1)]) / du
            cells = ["%.0f" % per[m] if m in per else "-"
                     for m in MODES + ("own",)]
            d1 = ("%+.0f" % (per["jitring"] - per["plain"])
                  if "jitring" in per and "plain" in per else "-")
            d2 = ("%+.0f" % (per["jitring"] - per["perf"])
                  if "jitring" in per and "perf" in per else "-")
            print("| %s | %s | %s | %s | %s | %s |" % (
                ip.version, name, " | ".join(cells[:-1]), d1, d2,
                cells[-1]))
        sys.stdout.flush()


def wall_once(ip, mode, scratch):
    """One process of @mode running every work; {work: seconds}."""
    d = os.path.join(scratch, "d")
    os.makedirs(d, exist_ok=True)
    argv, env = ip.argv(mode, d, ["--work-all"])
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    res = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition(" ")
        if k in WORKS and v:
            res[k] = float(v)
        elif k == "pid":
            cleanup(int(v), d)
    if p.returncode != 0:
        sys.stderr.write("%s %s: exit %d: %s\n" % (
            ip.py, mode, p.returncode, p.stderr[-600:]))
        return None
    return res


def run_wall(ips, scratch, rounds):
    print("\n## Wall clock (median of %d rounds, the modes in turn; "
          "ms, ns per unit, ratio to plain)\n" % rounds)
    print("| interpreter | work | " + " | ".join(MODES) +
          " | load (start-end) |")
    print("|:--|:--|" + "--:|" * len(MODES) + ":--|")
    for ip in ips:
        got = {m: {w: [] for w in WORKS} for m in ip.modes}
        l0 = os.getloadavg()[0]
        for _ in range(rounds):
            for mode in ip.modes:
                r = wall_once(ip, mode, scratch)
                for w, s in (r or {}).items():
                    got[mode][w].append(s)
        l1 = os.getloadavg()[0]
        for name in WORKS:
            u = units(name, SIZES[name][1])
            med = {m: statistics.median(got[m][name])
                   for m in ip.modes if got[m][name]}
            cells = []
            for m in MODES:
                if m not in med:
                    cells.append("-")
                    continue
                c = "%.1f ms, %.0f ns" % (1e3 * med[m], 1e9 * med[m] / u)
                if m != "plain" and "plain" in med:
                    c += ", %.2fx" % (med[m] / med["plain"])
                cells.append(c)
            print("| %s | %s(%d) | %s | %.2f-%.2f |" % (
                ip.version, name, SIZES[name][1], " | ".join(cells), l0, l1))
        sys.stdout.flush()


def main():
    if sys.argv[1:2] == ["--work-marked"]:
        work_marked(sys.argv[2])
        return
    if sys.argv[1:2] == ["--work-all"]:
        print("pid %d" % os.getpid())
        for name in WORKS:
            print(name, end=" ")
            sys.stdout.flush()
            work(name, SIZES[name][1])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", action="append", required=True,
                    help="an interpreter in which jitring imports "
                    "(repeatable)")
    ap.add_argument("--rounds", type=int, default=11,
                    help="wall-clock rounds (default 11)")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-wall", action="store_true")
    a = ap.parse_args()
    ips = []
    for py in a.python:
        ip = Interp(py, os.environ)
        if ip.version is None:
            print("skipped: %s does not run" % py)
            continue
        print("python: %s (%s; jitring %s; record's mode there: %s)" % (
            py, ip.version, "imports" if ip.ok else "DOES NOT IMPORT",
            "fp" if ip.fp else "dwarf, JITRING_TRAMPOLINE_ELF=1"))
        ips.append(ip)
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f
                          if ln.startswith("model name")), "")
    except OSError:
        pass
    print("machine: %s, %d CPUs, %s; load average at start: %.2f" % (
        model, os.cpu_count(), platform.platform(), os.getloadavg()[0]))
    sys.stdout.flush()
    scratch = tempfile.mkdtemp(prefix="jitring-bench-session.")
    try:
        if not a.no_wall:
            run_wall(ips, scratch, a.rounds)
        if not a.no_callgrind and shutil.which("valgrind"):
            run_callgrind(ips, scratch)
        elif not a.no_callgrind:
            print("\ncallgrind: skipped (no valgrind)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
