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
its file count.  Usage: bench_record.py [--quick] [--routes a,b] [--python PY]
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
        run_python(a, py, progs, scratch, env)
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
