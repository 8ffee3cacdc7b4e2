# SPDX-License-Identifier: MIT
"""make bench-record (its second part): what `record --wait` costs, beside
the program alone and plain `record`, each in turn in one run.

Programs (python/tests/wait_prog.py KIND N 8: eight threads started
together; python/tests/switch_prog.py: two threads passing a byte through
pipes):
  dict, list, counter, queue  contended free-threaded programs (a shared
                              dict, a shared list, a Counter behind a
                              Lock, a queue.Queue pipeline)
  yield                       os.sched_yield() in a loop: the fastest a
                              Python program switches (hundreds of
                              thousands a second)
  pipes                       switch_prog.py 30000 1000

Routes: alone (the interpreter, no record), cpu (`record`), wait
(`record --wait`, its defaults).

Printed per run: the load average before it, the program's own time (its
contended phase, by its own clock), its switches a second, the command's
wall time, the finishing (the command less the program's life in
jitring-record.json), the folder (its blocks on the disk) and what the
wait tables say perf lost; then per program the medians, the ratios
against the targets: --wait's program time at most 1.5x alone, its folder
at most 1 GB and 10x cpu's, its finishing at most 25 % of the program's
life + 3 s, and every loss counted in a note.

Usage: bench_wait.py [--python PY] [--runs N] [--programs a,b,...]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "python", "tests")
PROGRAMS = {
    "dict": ["wait_prog.py", "dict", "1000000", "8"],
    "list": ["wait_prog.py", "list", "1000000", "8"],
    "counter": ["wait_prog.py", "counter", "500000", "8"],
    "queue": ["wait_prog.py", "queue", "20000", "8"],
    "yield": ["wait_prog.py", "yield", "40000", "8"],
    "pipes": ["switch_prog.py", "30000", "1000"],
}
ROUTES = (("alone", None), ("cpu", []), ("wait", ["--wait"]))
# "KIND: T s, S switches/s" (wait_prog.py) or "N round trips in T s: S
# switches/s" (switch_prog.py) on the program's stderr.
OWN = re.compile(r"(?:^\w+: ([\d.]+) s, |round trips in ([\d.]+) s: )"
                 r"(\d+) switches/s", re.M)


def folder_mb(path):
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return n / 1e6


def one(py, route, prog, out, env):
    load = os.getloadavg()[0]
    argv = [os.path.join(TESTS, prog[0])] + prog[1:]
    if route is None:
        cmd = [py] + argv
    else:
        cmd = [py, "-m", "jitring", "record", "-o", out] + route + \
            ["--"] + argv
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit("%s failed (exit %d): %s"
                         % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    m = OWN.search(p.stderr)
    r = dict(load=load, cmd=wall, own=float(m.group(1) or m.group(2)),
             rate=int(m.group(3)), finish=0.0, mb=0.0, lost="",
             life=wall)
    if route is not None:
        with open(os.path.join(out, "jitring-record.json")) as f:
            r["life"] = json.load(f)["seconds"]
        r["finish"] = wall - r["life"]
        r["mb"] = folder_mb(out)
        lost = [l for l in p.stdout.splitlines()
                if l.startswith("(perf lost ")]
        r["lost"] = "; ".join(re.sub(r" \(its buffers.*", "", l)[1:]
                              for l in lost)
        # What perf warned of is in the wait tables' notes too.
        r["noted"] = bool(lost) or "perf warned" not in p.stdout
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("JITRING_PROFILE", None)
    scratch = tempfile.mkdtemp(prefix="jitring-bench-wait.")
    names = [n for n in a.programs.split(",") if n]
    try:
        print("record --wait's cost on %s, %d CPUs"
              % (a.python, os.cpu_count()))
        print("%-8s %-6s %3s %5s %8s %8s %8s %8s %8s  %s"
              % ("program", "route", "run", "load", "own s", "sw/s",
                 "cmd s", "finish", "MB", "lost"))
        for name in names:
            got = {r: [] for r, _ in ROUTES}
            for i in range(a.runs):
                for route, opts in ROUTES:
                    out = os.path.join(scratch, route)
                    shutil.rmtree(out, ignore_errors=True)
                    r = one(a.python, opts, PROGRAMS[name], out, env)
                    got[route].append(r)
                    print("%-8s %-6s %3d %5.2f %8.2f %8d %8.2f %8.2f %8.0f"
                          "  %s" % (name, route, i + 1, r["load"], r["own"],
                                    r["rate"], r["cmd"], r["finish"],
                                    r["mb"], r["lost"] or "-"))
                    sys.stdout.flush()
                    shutil.rmtree(out, ignore_errors=True)
            verdict(name, got)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def verdict(name, got):
    med = {route: {f: statistics.median(r[f] for r in rs)
                   for f in ("own", "mb", "finish", "life", "load")}
           for route, rs in got.items()}
    w, c, al = med["wait"], med["cpu"], med["alone"]
    bound = 0.25 * w["life"] + 3
    print("%-8s medians: alone %.2f s, cpu %.2f s (%.2fx), wait %.2f s "
          "(%.2fx, target 1.5x); folder cpu %.0f MB, wait %.0f MB (%.1fx, "
          "target 10x and 1000 MB); finishing wait %.2f s (target %.2f "
          "s); losses noted: %s; load %.1f"
          % (name, al["own"], c["own"], c["own"] / al["own"], w["own"],
             w["own"] / al["own"], c["mb"], w["mb"],
             w["mb"] / c["mb"] if c["mb"] else 0, w["finish"], bound,
             all(r["noted"] for r in got["wait"]), w["load"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
