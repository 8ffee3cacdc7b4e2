# SPDX-License-Identifier: MIT
"""make bench-record (its contended part): what `record` costs a
free-threaded program whose threads contend, beside the program alone,
in turn in one run.

Programs (8 threads each, the phase between the threads' start and the
last join timed by the program's own clock):
  dict     each thread stores into one shared dict (the dict's
           per-object critical section; no Python lock)
  list     each thread appends to and pops from one shared list
  counter  each thread adds to one collections.Counter under one
           threading.Lock
  queue    4 producers put into one queue.Queue, 4 consumers get from it

Routes: alone (the interpreter, no jitring) and record (python -m jitring
record with its defaults: CPU mode).  Printed per run: the load average
before it and the phase's wall time; then per program the medians and
the ratio record/alone.

Usage: bench_contend.py [--python PY] [--runs N] [--n N] [PROGRAM...]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

PROG = textwrap.dedent("""
    import collections, queue, sys, threading, time

    KIND, N = sys.argv[1], int(sys.argv[2])
    shared_d, shared_l = {}, []
    counter, lock = collections.Counter(), threading.Lock()
    q = queue.Queue(maxsize=64)

    def dict_w(k):
        for i in range(N):
            shared_d[i & 1023] = k

    def list_w(k):
        for i in range(N):
            shared_l.append(k)
            if len(shared_l) > 64:
                try:
                    shared_l.pop()
                except IndexError:
                    pass

    def counter_w(k):
        for i in range(N):
            with lock:
                counter[i & 63] += 1

    def put_w(k):
        for i in range(N // 8):
            q.put(i)
        q.put(None)

    def get_w(k):
        while q.get() is not None:
            pass

    if KIND == "queue":
        fns = [put_w] * 4 + [get_w] * 4
    else:
        fns = [globals()[KIND + "_w"]] * 8
    ts = [threading.Thread(target=f, args=(k,)) for k, f in enumerate(fns)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("phase %.4f" % (time.perf_counter() - t0), file=sys.stderr)
""")

KINDS = ("dict", "list", "counter", "queue")
# About 0.5-1 s alone each on a 2-CPU machine.
SIZES = {"dict": 400000, "list": 200000, "counter": 100000, "queue": 100000}


def phase(stderr):
    return float(next(l.split()[1] for l in stderr.splitlines()
                      if l.startswith("phase ")))


def one(py, prog, kind, n, out, env):
    load = os.getloadavg()[0]
    cmd = [py, prog, kind, str(n)]
    if out:
        cmd = [py, "-m", "jitring", "record", "-o", out, "--"] + cmd[1:]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit("%s failed (exit %d): %s"
                         % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return load, phase(p.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, help="iterations (each program's "
                    "own size by default)")
    ap.add_argument("kinds", nargs="*", metavar="PROGRAM",
                    help="of %s (all by default)" % ", ".join(KINDS))
    a = ap.parse_args()
    bad = set(a.kinds) - set(KINDS)
    if bad:
        ap.error("no program %s (of %s)" % (", ".join(sorted(bad)),
                                            ", ".join(KINDS)))
    a.kinds = a.kinds or KINDS
    env = dict(os.environ)
    env.pop("JITRING_PROFILE", None)
    scratch = tempfile.mkdtemp(prefix="jitring-bench-contend.")
    prog = os.path.join(scratch, "contend.py")
    with open(prog, "w") as f:
        f.write(PROG)
    out = os.path.join(scratch, "rec")
    try:
        print("record's cost on contended threads: 8 threads, %s, %d "
              "CPUs" % (a.python, os.cpu_count()))
        print("%-8s %-7s %3s %5s %8s" % ("program", "route", "run", "load",
                                         "phase s"))
        summary = []
        for kind in a.kinds:
            n = a.n or SIZES[kind]
            got = {"alone": [], "record": []}
            for i in range(a.runs):
                for route in got:
                    shutil.rmtree(out, ignore_errors=True)
                    load, s = one(a.python, prog, kind, n,
                                  out if route == "record" else None, env)
                    got[route].append((load, s))
                    print("%-8s %-7s %3d %5.2f %8.3f"
                          % (kind, route, i + 1, load, s))
                    sys.stdout.flush()
            m = {r: statistics.median(s for _, s in v)
                 for r, v in got.items()}
            loads = [l for v in got.values() for l, _ in v]
            summary.append("%-8s alone %.3f s  record %.3f s  %.2fx  "
                           "(load %.1f-%.1f)"
                           % (kind, m["alone"], m["record"],
                              m["record"] / m["alone"], min(loads),
                              max(loads)))
        print("medians (record/alone):")
        print("\n".join(summary))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
