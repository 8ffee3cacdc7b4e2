# SPDX-License-Identifier: MIT
"""make bench-record: what `python -m jitring record` costs at the size of
real programs, each route side by side in one run.

Programs:
  fresh-20k   20,000 fresh functions, each defined by exec and called once
  threads-8   8 threads, CPU-bound, 10 s
  fresh-100k  100,000 fresh functions

Routes (python -m jitring record options):
  full        --inject full --keep-perf-data --perf-script --inline:
              the old route (perf inject on the whole dump,
              every file, inlined frames)
  dwarf       the default: perf inject given the reached functions only
  fp          --call-graph fp: no stack copies, no inject (where the
              interpreter keeps frame pointers; else skipped)

Printed per program and route: the program alone, record's post-processing
(record's wall time less the program's, perf included), the folder's size
(hard links counted once), its size beyond perf.data / perf.jit.data, and
its file count.

Then real programs, each recorded with record's defaults (dwarf, or fp
where the interpreter keeps frame pointers):
  hello        a no-import script: one function's loop, then print
  deep-60      a stdlib recursive-descent parser 60 Python frames deep
  rst2html     docutils on a generated 1 MB reST document (where docutils
               imports: Debian's python3-docutils)
  compileall   python -m compileall -j 2 over a copy of five stdlib
               packages (a process pool)
  pools        a thread pool and a spawn process pool
  regrtest     python -m test -j 2 over ten stdlib test files (a worker
               process each, 20 processes in all): the interpreter's own
               test package, else Lib/test of the CPython source tarball
               of its version in jitring's cache (scripts/build-python.sh
               keeps 3.13.5's there); skipped where neither is
Printed: the program alone and under record, the finish (record's wall
less the program's under it) and its ratio to the program alone, the
share of samples whose Python stack reaches a root (a module body or a
thread's bootstrap: the stack is whole) against CPython 3.15's own
sampler (profiling.sampling --mode cpu -a, where the interpreter has it),
the share cut, the share with Python frames but none of the program's
(start-up, and any of jitring's own work), each of the samples with a
Python frame (what the sampler sees), the folder beyond perf's data file,
and flame.html.
Usage: bench_record.py [--quick] [--routes a,b] [--python PY] [--real LIST]
                       [--record-args "OPTIONS"]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

FRESH = """import sys
n = int(sys.argv[1])
for i in range(n):
    ns = {}
    exec("def f%d(x):\\n    return x + %d\\n" % (i, i), ns)
    ns["f%d" % i](i)
"""

# The 8-thread CPU-bound job: the tests' perf_prog.py.
PERF_PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "..", "python", "tests", "perf_prog.py")

ROUTES = {
    "full": ["--call-graph", "dwarf", "--inject", "full", "--keep-perf-data",
             "--perf-script", "--inline"],
    "dwarf": ["--call-graph", "dwarf"],
    "fp": ["--call-graph", "fp"],
}


def folder(path):
    """(bytes, perf.data's bytes, files): a file hard-linked from outside
    the folder (perf's build-id cache links the interpreter) adds
    nothing; one linked twice inside it counts once."""
    seen, size, files, base = {}, 0, 0, 0
    for d, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(d, n))
            files += 1
            k = (st.st_dev, st.st_ino)
            seen[k] = (seen.get(k, (0, st))[0] + 1, st)
            if d == path and n in ("perf.data", "perf.jit.data") and \
                    not base:
                base = st.st_blocks * 512
    for n, st in seen.values():
        if n >= st.st_nlink:
            size += st.st_blocks * 512
    return size, base, files


# ---- real programs --------------------------------------------------------

HELLO = """def work():
    s = 0
    for i in range(N):
        s += i
    return s


N = 6_000_000
work()
print("hello")
"""

# The parser 60 Python frames deep that test_record.py's deep case runs.
DEEP = os.path.join(os.path.dirname(PERF_PROG), "deep_prog.py")

RST2HTML = """import sys
from docutils.core import publish_file
publish_file(source_path=sys.argv[1], destination_path="/dev/null",
             writer_name="html",
             settings_overrides={"report_level": 5, "halt_level": 5})
"""

POOLS = """import concurrent.futures as cf, multiprocessing as mp, sys


def crunch(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


if __name__ == "__main__":
    n = int(sys.argv[1])
    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(crunch, [n] * 8))
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) \
            as ex:
        list(ex.map(crunch, [n] * 4))
"""


def rst_document(path, sections):
    """A reST document of nested sections, lists, tables and inline
    markup: docutils' parser recurses through all of them."""
    marks = "=-~^"
    with open(path, "w") as f:
        for i in range(sections):
            for depth in range(4):
                title = "Section %d.%d" % (i, depth)
                f.write("%s\n%s\n\n" % (title, marks[depth] * len(title)))
                f.write("Some *emphasis*, **strong** and ``literal`` text "
                        "with a `link <https://example.org/%d>`_.\n\n" % i)
                for item in range(3):
                    f.write("- item %d\n\n  - nested *%d*\n\n"
                            "    1. deeper ``%d``\n\n" % (item, item, item))
                f.write("+-----+-----+\n| a%d  | b   |\n+=====+=====+\n"
                        "| c   | d   |\n+-----+-----+\n\n" % (i % 10))


def real_programs(a, scratch, py):
    """{name: (argv after the interpreter, cwd, env additions)}"""
    def script(name, text):
        path = os.path.join(scratch, name + ".py")
        with open(path, "w") as f:
            f.write(text)
        return path
    progs = {"hello": ([script("hello", HELLO)], {}),
             "deep-60": ([DEEP, "20", "300" if a.quick else "3000"], {}),
             "pools": ([script("pools", POOLS),
                        "300000" if a.quick else "3000000"], {})}
    doc = os.path.join(scratch, "doc.rst")
    rst_document(doc, 70 if a.quick else 700)     # 100 KB / 1 MB
    dist = "/usr/lib/python3/dist-packages"
    progs["rst2html"] = ([script("rst2html", RST2HTML), doc],
                         {"PYTHONPATH": dist})
    lib = subprocess.run([py, "-c", "import sysconfig; "
                          "print(sysconfig.get_path('stdlib'))"],
                         capture_output=True, text=True).stdout.strip()
    tree = os.path.join(scratch, "compile-tree-" +
                        os.path.basename(py).replace("/", "_"))
    if not os.path.isdir(tree):
        for pkg in (["json", "email"] if a.quick else
                    ["json", "email", "asyncio", "xml", "unittest"]):
            shutil.copytree(os.path.join(lib, pkg), os.path.join(tree, pkg),
                            ignore=shutil.ignore_patterns("__pycache__"))
    progs["compileall"] = (["-m", "compileall", "-j", "2", "-f", "-q",
                            tree], {})
    tests = regrtest_path(py, scratch)
    if tests is not None:
        progs["regrtest"] = (["-m", "test", "-j", "2"] + REGRTESTS,
                             {"PYTHONPATH": tests} if tests else {})
    return progs


# The regrtest subset: pure-Python stdlib work, a few seconds in all.
REGRTESTS = ["test_json", "test_textwrap", "test_difflib", "test_string",
             "test_csv", "test_statistics", "test_fractions", "test_heapq",
             "test_bisect", "test_base64"]


def regrtest_path(py, scratch):
    """What the regrtest subset's $PYTHONPATH adds for @py: "" where it
    has its own test package, else a folder holding Lib/test of its
    version's source tarball in jitring's cache; None where neither."""
    if subprocess.run([py, "-c", "import test.test_json"],
                      capture_output=True).returncode == 0:
        return ""
    ver = subprocess.run([py, "-c", "import platform; "
                          "print(platform.python_version())"],
                         capture_output=True, text=True).stdout.strip()
    cache = os.environ.get("JITRING_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "jitring")
    tarball = os.path.join(cache, "src", "python%s_%s.orig.tar.xz"
                           % (ver.rsplit(".", 1)[0], ver))
    dest = os.path.join(scratch, "regrtest-" + ver)
    if os.path.isdir(os.path.join(dest, "test")):
        return dest
    if not os.path.exists(tarball):
        return None
    os.makedirs(dest)
    if subprocess.run(["tar", "-C", dest, "-xJf", tarball,
                       "--strip-components=2", "--wildcards",
                       "Python-%s/Lib/test/*" % ver]).returncode != 0:
        return None
    return dest


ROOT_FRAMES = ("py::<module>:", "py::Thread._bootstrap")
CUT = "[stack cut: outer frames not recorded]"


def folded_shares(path, program):
    """(rooted, cut, outside) shares in % of the samples of a
    recording's stacks.folded that have a Python frame or a cut stack
    (what a sampler of Python frames sees: the interpreter's start-up and
    finalization are not in it): stacks whose Python frames reach a module
    body or a thread's bootstrap; stacks under the cut frame; whole stacks
    with Python frames none of which is in @program's file (a path suffix;
    None: any file counts as the program's)."""
    n = rooted = cut = outside = 0
    with open(path) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            c = int(c)
            frames = stack.split(";")[1:]
            py = [x for x in frames if x.startswith("py::")]
            if frames[:1] == [CUT]:
                n += c
                cut += c
                continue        # whose program frames may be cut off
            if not py:
                continue
            n += c
            if any(x.startswith(ROOT_FRAMES) for x in frames):
                rooted += c
            if program and py and not any(
                    x.endswith(program) for x in py):
                outside += c
    if not n:
        return 0, 0, 0
    return 100.0 * rooted / n, 100.0 * cut / n, 100.0 * outside / n


def sampler_rooted(py, argv, env, cwd, scratch):
    """The share of CPython 3.15's own sampler's samples (all threads of
    the top process, CPU time) whose stack reaches <module> or a thread's
    bootstrap, or None where the interpreter has no sampler."""
    out = os.path.join(scratch, "sampler.txt")
    p = subprocess.run([py, "-m", "profiling.sampling", "run", "--collapsed",
                        "-o", out, "-a", "--subprocesses", "--mode", "cpu"] +
                       argv, env=env,
                       cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(out):
        return None
    n = rooted = 0
    # The sampler reads names out of the running process, and a torn read
    # leaves bytes that are not UTF-8 (seen once in a name of rst2html's).
    with open(out, errors="replace") as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            try:
                c = int(c)
            except ValueError:
                continue
            n += c
            if ":<module>:" in stack or "Thread._bootstrap" in stack:
                rooted += c
    os.unlink(out)
    return 100.0 * rooted / n if n else None


PTH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                   "python", "jitring-autostart.pth")


def hook_python(py, scratch, env):
    """(interpreter, env) that profile every Python process the program
    starts, as an installed wheel does: @py as it is where jitring is
    installed in it without $PYTHONPATH (its .pth hook on); else a venv of
    @py whose .pth puts the package $PYTHONPATH finds on sys.path and
    holds the hook's line (a build tree)."""
    bare = dict(env)
    bare.pop("PYTHONPATH", None)
    if subprocess.run([py, "-c", "import jitring._jitring"], env=bare,
                      capture_output=True).returncode == 0:
        return py, bare
    pkg = subprocess.run([py, "-c", "import jitring, os; print(os.path."
                          "dirname(os.path.dirname(jitring.__file__)))"],
                         env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    d = os.path.join(scratch, "venv-" + os.path.basename(py))
    subprocess.run([py, "-m", "venv", "--without-pip", d], check=True)
    vpy = os.path.join(d, "bin", "python")
    site = subprocess.run([vpy, "-c", "import sysconfig; "
                           "print(sysconfig.get_path('platlib'))"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    with open(PTH) as f:
        hook = f.read().strip()
    with open(os.path.join(site, "jitring-bench.pth"), "w") as f:
        f.write(pkg + "\n" + hook + "\n")
    return vpy, bare


def run_real(a, py, scratch, env):
    py, env = hook_python(py, scratch, env)
    progs = real_programs(a, scratch, py)
    print("\nreal programs on %s, record's defaults (%s):"
          % (os.path.basename(py), "fp" if keeps_fp(py) else "dwarf"))
    print("%-10s %7s %7s %7s %6s %7s %7s %5s %5s %9s %8s" % (
        "program", "alone s", "rec s", "finish", "ratio", "rooted%",
        "sampler", "cut%", "out%", "beyond MB", "flame KB"))
    for name in a.real.split(","):
        if name not in progs:
            print("%-10s  (skipped: no test package for %s, nor its "
                  "version's source tarball)" % (name, os.path.basename(py)))
            continue
        argv, extra = progs[name]
        penv = dict(env, **extra)
        if extra.get("PYTHONPATH") and env.get("PYTHONPATH"):
            penv["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + \
                extra["PYTHONPATH"]
        if name == "rst2html" and subprocess.run(
                [py, "-c", "import docutils"], env=penv,
                capture_output=True).returncode != 0:
            print("%-10s  (skipped: no docutils for %s; Debian: "
                  "python3-docutils)" % (name, os.path.basename(py)))
            continue
        t0 = time.monotonic()
        subprocess.run([py] + argv, check=True, env=penv, cwd=scratch,
                       stdout=subprocess.DEVNULL)
        alone = time.monotonic() - t0
        out = os.path.join(scratch, "real-" + name)
        t0 = time.monotonic()
        p = subprocess.run([py, "-m", "jitring", "record", "-o", out] +
                           a.record_args.split() + ["--"] + argv,
                           env=penv, cwd=scratch,
                           capture_output=True, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            print("%-10s  FAILED (%d): %s" % (name, p.returncode,
                                              p.stderr[-400:]))
            continue
        with open(os.path.join(out, "jitring-record.json")) as f:
            meta = json.load(f)
        prog = None if argv[0] == "-m" else os.path.basename(argv[0])
        rooted, cut, outside = folded_shares(
            os.path.join(out, "stacks.folded"), prog)
        samp = sampler_rooted(py, argv, penv, scratch, scratch)
        size, base, files = folder(out)
        finish = wall - meta["seconds"]
        row = {"python": py, "program": name, "alone_s": alone,
               "record_s": wall, "finish_s": finish, "rooted": rooted,
               "sampler_rooted": samp, "cut": cut, "outside": outside,
               "beyond": size - base,
               "flame": os.path.getsize(os.path.join(out, "flame.html"))}
        print("%-10s %7.1f %7.1f %7.1f %5.0f%% %6.1f%% %7s %4.1f%% %4.1f%% "
              "%9.1f %8.0f" % (
                  name, alone, wall, finish, 100.0 * finish / alone, rooted,
                  "%.1f%%" % samp if samp is not None else "-", cut,
                  outside, (size - base) / 1e6, row["flame"] / 1e3))
        sys.stdout.flush()
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(row) + "\n")
        shutil.rmtree(out, ignore_errors=True)


def keeps_fp(py):
    out = subprocess.run([py, "-c", "import sysconfig as s; print("
                          "(s.get_config_var('CFLAGS') or '') + ' ' + "
                          "(s.get_config_var('PY_CFLAGS') or ''))"],
                         capture_output=True, text=True).stdout
    return "-fno-omit-frame-pointer" in out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="2,000 / 2 s / 10,000 instead (a smoke run)")
    ap.add_argument("--routes", default="full,dwarf,fp")
    ap.add_argument("--programs", default="fresh-20k,threads-8,fresh-100k")
    ap.add_argument("--python", action="append",
                    help="an interpreter with jitring importable (again "
                    "for more; default this one); fp runs only on those "
                    "that keep frame pointers")
    ap.add_argument("--json", help="append one JSON line per row here")
    ap.add_argument("--real", default="hello,deep-60,rst2html,compileall,"
                    "pools,regrtest",
                    help="the real programs to run ('' for none)")
    ap.add_argument("--record-args", default="",
                    help="more record options for the real programs "
                    "(e.g. --memfd-trampolines: dwarf mode's perf inject "
                    "route, to compare)")
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="bench-record-")
    env = dict(os.environ, HOME=scratch)
    env.pop("JITRING_PROFILE", None)
    with open(PERF_PROG) as f:
        threads = f.read()
    progs = {"fresh-20k": (FRESH, ["2000" if a.quick else "20000"]),
             "threads-8": (threads, ["8", "2" if a.quick else "10"]),
             "fresh-100k": (FRESH, ["10000" if a.quick else "100000"])}
    print("perf: %s; %d CPUs" % (subprocess.run(
        ["perf", "--version"], capture_output=True,
        text=True).stdout.strip(), os.cpu_count()))
    for py in a.python or [sys.executable]:
        if a.programs:
            run_python(a, py, progs, scratch, env)
        if a.real:
            run_real(a, py, scratch, env)
    shutil.rmtree(scratch, ignore_errors=True)


def run_python(a, py, progs, scratch, env):
    """The programs and routes on @py: with $PYTHONPATH where jitring
    imports through it (a build tree), else without (a venv with the
    wheel installed; a build tree's extension is another ABI's)."""
    ok = subprocess.run([py, "-c", "import jitring._jitring"], env=env,
                        capture_output=True).returncode == 0
    if not ok:
        env = dict(env)
        env.pop("PYTHONPATH", None)
    fp_ok = keeps_fp(py)
    print("\npython: %s (%s; frame pointers: %s)" % (
        py, subprocess.run([py, "-c", "import sys; print(sys.version.split("
                            ")[0])"], capture_output=True,
                           text=True).stdout.strip(),
        "yes" if fp_ok else "no"))
    print("%-11s %-6s %8s %8s %8s %9s %9s %7s" % (
        "program", "route", "alone s", "record s", "post s", "folder MB",
        "beyond MB", "files"))
    for name in a.programs.split(","):
        text, args = progs[name]
        script = os.path.join(scratch, name + ".py")
        with open(script, "w") as f:
            f.write(text)
        t0 = time.monotonic()
        subprocess.run([py, script] + args, check=True, env=env)
        alone = time.monotonic() - t0
        for route in a.routes.split(","):
            if route == "fp" and not fp_ok:
                print("%-11s %-6s  (skipped: %s keeps no frame pointers)"
                      % (name, route, os.path.basename(py)))
                continue
            out = os.path.join(scratch, "%s-%s" % (name, route))
            t0 = time.monotonic()
            p = subprocess.run([py, "-m", "jitring", "record", "-o", out] +
                               ROUTES[route] + ["--", script] + args,
                               env=env, cwd=scratch, capture_output=True,
                               text=True)
            wall = time.monotonic() - t0
            if p.returncode != 0:
                print("%-11s %-6s  FAILED (%d): %s" % (
                    name, route, p.returncode, p.stderr[-400:]))
                continue
            with open(os.path.join(out, "jitring-record.json")) as f:
                meta = json.load(f)
            size, base, files = folder(out)
            row = {"python": py, "program": name, "route": route,
                   "alone_s": alone,
                   "record_s": wall, "post_s": wall - meta["seconds"],
                   "program_s": meta["seconds"], "folder": size,
                   "perf_data": base, "files": files}
            print("%-11s %-6s %8.1f %8.1f %8.1f %9.1f %9.1f %7d" % (
                name, route, alone, wall, row["post_s"], size / 1e6,
                (size - base) / 1e6, files))
            sys.stdout.flush()
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
