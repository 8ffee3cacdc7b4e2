# SPDX-License-Identifier: MIT
"""make bench-record (its second part): what `record --wait` costs on a
program that switches often, beside plain `record`, each route in turn
in one run.

The program is python/tests/switch_prog.py: two threads pass a byte
through two pipes with a loop of K additions between round trips (about
15,000-25,000 context switches a second on a 2-CPU machine).

Routes (python -m jitring record options):
  cpu      record's defaults (no --wait): the yardstick
  wait     --wait: every switch sampled with its stack
  sampled  --wait --wait-freq 999: the switches' stacks sampled

Printed per run: the load average before it, the command's wall time, the
finishing (the command less the program's life in jitring-record.json),
the program's own round trips (its own clock) and the folder; then the
medians and their ratios to cpu.

Usage: bench_wait.py [--python PY] [--runs N] [--trips N] [--k K]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "..", "..", "python", "tests", "switch_prog.py")
ROUTES = (("cpu", []), ("wait", ["--wait"]),
          ("sampled", ["--wait", "--wait-freq", "999"]))


def folder_mb(path):
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return n / 1e6


def one(py, opts, out, trips, k, env):
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    p = subprocess.run([py, "-m", "jitring", "record", "-o", out] + opts +
                       ["--", PROG, str(trips), str(k)],
                       capture_output=True, text=True, env=env)
    cmd = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit("record %s failed (exit %d): %s"
                         % (" ".join(opts), p.returncode, p.stderr[-2000:]))
    with open(os.path.join(out, "jitring-record.json")) as f:
        life = json.load(f)["seconds"]
    # "N round trips in S s: R switches/s" on the program's stderr.
    trip = next(float(l.split()[4]) for l in p.stderr.splitlines()
                if " round trips in " in l)
    return dict(load=load, cmd=cmd, finish=cmd - life, trips=trip,
                mb=folder_mb(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trips", type=int, default=30000)
    ap.add_argument("--k", type=int, default=1000)
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("JITRING_PROFILE", None)
    scratch = tempfile.mkdtemp(prefix="jitring-bench-wait.")
    got = {name: [] for name, _ in ROUTES}
    try:
        print("record --wait's cost: switch_prog.py %d %d on %s, %d CPUs"
              % (a.trips, a.k, a.python, os.cpu_count()))
        print("%-8s %3s %5s %8s %8s %8s %8s"
              % ("route", "run", "load", "cmd s", "finish", "trips s",
                 "MB"))
        for i in range(a.runs):
            for name, opts in ROUTES:
                out = os.path.join(scratch, name)
                shutil.rmtree(out, ignore_errors=True)
                r = one(a.python, opts, out, a.trips, a.k, env)
                got[name].append(r)
                print("%-8s %3d %5.2f %8.2f %8.2f %8.2f %8.0f"
                      % (name, i + 1, r["load"], r["cmd"], r["finish"],
                         r["trips"], r["mb"]))
                sys.stdout.flush()
                shutil.rmtree(out, ignore_errors=True)
        print("medians (ratio to cpu):")
        base = {f: statistics.median(r[f] for r in got["cpu"])
                for f in ("cmd", "finish", "trips", "mb")}
        for name, _ in ROUTES:
            m = {f: statistics.median(r[f] for r in got[name])
                 for f in base}
            print("%-8s cmd %.2f s (%.1fx)  finish %.2f s (%.1fx)  "
                  "trips %.2f s (%.2fx)  folder %.0f MB (%.1fx)"
                  % (name, m["cmd"], m["cmd"] / base["cmd"], m["finish"],
                     m["finish"] / base["finish"], m["trips"],
                     m["trips"] / base["trips"], m["mb"],
                     m["mb"] / base["mb"]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
