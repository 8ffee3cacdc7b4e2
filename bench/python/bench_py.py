# SPDX-License-Identifier: MIT
"""Profiling cost per new Python code object: jitring (rings and mutex
engines) against CPython's own -X perf_jit, in the same interpreter.

    PYTHONPATH=<dir holding the built jitring package> \\
    JITRING_DUMP=build-release/tools/jitring-dump \\
    python3.13t bench/python/bench_py.py [--quick|--full] [--out FILE.json]

One run is one fresh interpreter: T threads each compile their share of N
fresh functions (not timed), wait at a barrier, then call each of their
functions once.  The clock runs from the barrier's release until every
thread has finished and (jitring) jitring.flush() has put every entry in
the file.  CPU is the process's user + system time over the same span
(every thread, the flusher included).  Modes:

  base      no profiling: what a first call costs anyway
  rings     jitring.start(engine="rings")
  mutex     jitring.start(engine="mutex"): the mutex yardstick, ONE
            process-wide lock around each copy's allocation and write
            (CPython's perf trampoline path, compile_trampoline() then
            write_state(), made thread-safe the simple way)
  perf_jit  python -X perf_jit (CPython's own; dump in /tmp)

One repetition runs every mode at every thread count once, interleaved,
so a mode's run and the base run it is compared with are minutes apart at
most.  cost per object = (wall of a mode - wall of base) / N in the same
repetition; the tables give the median over repetitions and the spread
(lowest..highest), and the same for CPU and for mutex/rings.  CPU is the whole process's;
"callers' CPU" only that of the threads calling the functions (the
flusher excluded).  Every dump
is checked with jitring-dump --check (perf's rules) and jitring's also
with --sorted (time order, which jitring promises and CPython does not);
-X perf_jit runs that crash or leave a dump perf cannot use are counted
and reported as results.  Dumps are
deleted after the check.
"""

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MODES = ("base", "rings", "mutex", "perf_jit")
THREADS = (1, 2, 8, 64, 512)
COUNTERS = ("refills_waited", "trampoline_arenas_waited", "trampoline_arenas_ahead",
            "rings_grown", "ring_full_waits", "py_copy_waits",
            "py_copy_drops", "py_pending_races", "refused_dropped",
            "py_map_bytes")


# --- one run (a fresh interpreter) ------------------------------------------

def worker(mode, nthreads, n, d):
    per = n // nthreads
    srcs = []
    for k in range(nthreads):
        srcs.append(compile("".join("def f_%d_%d(x):\n    return x\n" % (k, i)
                                    for i in range(per)),
                            "<bench-%d>" % k, "exec"))
    jr = None
    if mode in ("rings", "mutex"):
        import jitring as jr
        jr.start(dir=d, engine=mode)
    fns = []
    for code in srcs:
        ns = {}
        exec(code, ns)
        fns.append([v for k, v in ns.items() if k.startswith("f_")])
    del srcs
    go = threading.Barrier(nthreads + 1)
    thr_cpu = []

    def run(fs):
        go.wait()
        c0 = time.thread_time_ns()
        for f in fs:
            f(0)
        thr_cpu.append(time.thread_time_ns() - c0)

    threads = [threading.Thread(target=run, args=(fs,)) for fs in fns]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter_ns()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for t in threads:
        t.join()
    if jr:
        jr.flush()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    t1 = time.perf_counter_ns()
    out = {"mode": mode, "threads": nthreads, "n": per * nthreads,
           "wall_ns": t1 - t0,
           "cpu_ns": int(((r1.ru_utime + r1.ru_stime) -
                          (r0.ru_utime + r0.ru_stime)) * 1e9),
           "thr_cpu_ns": sum(thr_cpu)}
    if jr:
        jr.stop()
        st = jr.stats()
        out["stats"] = {k: st.get(k, 0) for k in COUNTERS}
    print(json.dumps(out), flush=True)


# --- the driver ---------------------------------------------------------------

def check_dump(path, sort=True):
    """jitring-dump --check (perf's rules: whole records, contiguous groups,
    unique code_index), with --sorted also time order (jitring's promise,
    which only streaming readers such as samply need)."""
    tool = os.environ.get("JITRING_DUMP", "jitring-dump")
    p = subprocess.run([tool, "--check"] + (["--sorted"] if sort else []) +
                       [path], capture_output=True, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip().splitlines()[:1]


def take_result(res, rc, out, err):
    """A worker's last JSON line into @res, or how it ended (a crash is a
    result: -X perf_jit crashes)."""
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc == 0 and lines:
        res.update(json.loads(lines[-1]))
    else:
        res["crash"] = rc if isinstance(rc, str) else (
            "signal %d" % -rc if rc < 0 else "exit %d" % rc)
        res["stderr"] = str(err)[-400:]


def one(mode, nthreads, n):
    """A base, rings or mutex run; jitring's dump goes to a fresh dir."""
    d = tempfile.mkdtemp(prefix="jitring-pybench.", dir="/tmp")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode,
           str(nthreads), str(n), d]
    res = {"mode": mode, "threads": nthreads, "n": n}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
    take_result(res, rc, out, err)
    dumps = [os.path.join(d, f) for f in os.listdir(d)
             if f.startswith("jit-") and f.endswith(".dump")]
    if mode != "base":
        res["dump_ok"] = len(dumps) == 1
        if len(dumps) != 1:
            res["dump_error"] = ["%d dumps" % len(dumps)]
    for path in dumps:
        ok, msg = check_dump(path)
        if not ok:
            res["dump_ok"] = False
            res["dump_error"] = msg
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)
    return res


def one_perf_jit(nthreads, n):
    """-X perf_jit writes /tmp/jit-<pid>.dump: find it by the child's pid."""
    cmd = [sys.executable, "-X", "perf_jit", os.path.abspath(__file__),
           "--worker", "perf_jit", str(nthreads), str(n), "/tmp"]
    res = {"mode": "perf_jit", "threads": nthreads, "n": n}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        out, err = p.communicate(timeout=600)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = "timeout"
    take_result(res, rc, out, err)
    path = "/tmp/jit-%d.dump" % p.pid
    if os.path.exists(path):
        # CPython does not promise time order: judged by perf's rules, and
        # an out-of-order file only noted.
        ok, msg = check_dump(path, sort=False)
        res["dump_ok"] = ok
        if not ok:
            res["dump_error"] = msg
        elif not check_dump(path, sort=True)[0]:
            res["unsorted"] = True
        os.unlink(path)
    else:
        res["dump_ok"] = False
        res["dump_error"] = ["no dump"]
    return res


def med(xs):
    return statistics.median(xs) if xs else None


def paired(runs, m, t, key):
    """Per repetition: (run of mode m - base run) / n, in us, for key
    wall_ns or cpu_ns; only repetitions where both finished."""
    out = {}
    for r in runs:
        if r["mode"] == m and r["threads"] == t and key in r:
            out[r["rep"]] = r[key] / r["n"] / 1000
    base = {r["rep"]: r[key] / r["n"] / 1000 for r in runs
            if r["mode"] == "base" and r["threads"] == t and key in r}
    return {k: v - base[k] for k, v in out.items() if k in base}


def summarise(runs, threads):
    rows = []
    for t in threads:
        row = {"threads": t}
        for m in MODES:
            rs = [r for r in runs if r["mode"] == m and r["threads"] == t]
            ok = [r for r in rs if "wall_ns" in r]
            row[m] = {
                "runs": len(rs),
                "crashes": len(rs) - len(ok),
                "invalid_dumps": sum(1 for r in rs
                                     if m != "base" and not r.get("dump_ok")),
                "unsorted": sum(1 for r in rs if r.get("unsorted")),
                "wall_per_obj_us": med([r["wall_ns"] / r["n"] / 1000
                                        for r in ok]),
                "cpu_per_obj_us": med([r["cpu_ns"] / r["n"] / 1000
                                       for r in ok]),
            }
            if m in ("rings", "mutex"):
                row[m]["stats"] = {k: med([r["stats"][k] for r in ok])
                                   for k in COUNTERS} if ok else {}
        wall = {}
        for m in MODES[1:]:
            x = row[m]
            for k in ("wall", "cpu", "thr_cpu"):
                c = paired(runs, m, t, k + "_ns")
                x[k + "_costs_us"] = sorted(c.values())
                x[k + "_cost_us"] = med(list(c.values()))
                if k == "wall":
                    wall[m] = c
        rw, mw = wall["rings"], wall["mutex"]
        row["ratios"] = sorted(mw[k] / rw[k] for k in rw
                               if k in mw and rw[k] > 0)
        rows.append(row)
    return rows


def fmt(v, digits=2):
    return "-" if v is None else ("%.*f" % (digits, v))


def spread(xs, digits=2):
    return "-" if not xs else "%s..%s" % (fmt(xs[0], digits),
                                          fmt(xs[-1], digits))


def table(rows):
    out = []
    out.append("| threads | base first call | rings cost | mutex cost | "
               "perf_jit cost | mutex/rings | rings CPU | mutex CPU | "
               "perf_jit CPU | perf_jit crashed / invalid dump (unsorted) |")
    out.append("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        ratio = med(r["ratios"])
        pj = r["perf_jit"]
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d "
                   "of %d (%d) |" % (
                       r["threads"], fmt(r["base"]["wall_per_obj_us"]),
                       fmt(r["rings"]["wall_cost_us"]),
                       fmt(r["mutex"]["wall_cost_us"]),
                       fmt(pj["wall_cost_us"]),
                       fmt(ratio, 1),
                       fmt(r["rings"]["cpu_cost_us"]),
                       fmt(r["mutex"]["cpu_cost_us"]),
                       fmt(pj["cpu_cost_us"]),
                       pj["crashes"], pj["invalid_dumps"], pj["runs"],
                       pj["unsorted"]))
    out.append("")
    out.append("Spread over repetitions (lowest..highest); callers' CPU: "
               "median (spread):")
    out.append("")
    out.append("| threads | rings cost | mutex cost | perf_jit cost | "
               "mutex/rings | rings CPU | mutex CPU | rings callers' CPU "
               "| mutex callers' CPU |")
    out.append("|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s (%s) | %s (%s) |" % (
            r["threads"], spread(r["rings"]["wall_costs_us"]),
            spread(r["mutex"]["wall_costs_us"]),
            spread(r["perf_jit"]["wall_costs_us"]),
            spread(r["ratios"], 1),
            spread(r["rings"]["cpu_costs_us"]),
            spread(r["mutex"]["cpu_costs_us"]),
            fmt(r["rings"]["thr_cpu_cost_us"]),
            spread(r["rings"]["thr_cpu_costs_us"]),
            fmt(r["mutex"]["thr_cpu_cost_us"]),
            spread(r["mutex"]["thr_cpu_costs_us"])))
    out.append("")
    out.append("| threads | engine | refills_waited | trampoline_arenas_waited "
               "| trampoline_arenas_ahead | rings_grown | py_copy_waits | "
               "py_copy_drops | py_pending_races | invalid dumps |")
    out.append("|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        for m in ("rings", "mutex"):
            s = r[m].get("stats", {})
            out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |"
                       % ((r["threads"], m) + tuple(
                           fmt(s.get(k), 0) for k in (
                               "refills_waited", "trampoline_arenas_waited",
                               "trampoline_arenas_ahead", "rings_grown",
                               "py_copy_waits", "py_copy_drops",
                               "py_pending_races")) +
                          (r[m]["invalid_dumps"],)))
    return "\n".join(out)


def targets(rows):
    msgs = []
    for r in rows:
        rc = r["rings"]["wall_cost_us"]
        msgs.append(("rings <= 0.3 us/object at %d threads" % r["threads"],
                     rc is not None and rc <= 0.3, fmt(rc)))
        a, b = r["rings"]["cpu_cost_us"], r["mutex"]["cpu_cost_us"]
        msgs.append(("rings CPU < mutex CPU at %d threads" % r["threads"],
                     a is not None and b is not None and a < b,
                     "%s vs %s" % (fmt(a), fmt(b))))
    last = [r for r in rows if r["threads"] == 512]
    if last:
        ratio = med(last[0]["ratios"])
        msgs.append(("mutex/rings >= 25 at 512 threads",
                     ratio is not None and ratio >= 25, fmt(ratio, 1)))
    return msgs


def plot(rows, info, out_png):
    """Cost per object against threads, one line a mode (gnuplot, if
    there); crashed-out points are missing."""
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no plot", file=sys.stderr)
        return
    dat = out_png[:-4] + ".dat"
    with open(dat, "w") as f:
        f.write("# threads, cost per object (us): rings mutex perf_jit\n")
        for r in rows:
            f.write("%d %s\n" % (r["threads"], " ".join(
                "NaN" if r[m]["wall_cost_us"] is None else
                "%.4f" % r[m]["wall_cost_us"] for m in MODES[1:])))
    xt = ", ".join('"%d" %d' % (r["threads"], r["threads"]) for r in rows)
    gp = ('set terminal pngcairo size 900,520 font "sans,10" noenhanced\n'
          'set output "%s"\nset logscale x 2\nset xrange [0.75:700]\n'
          'set xtics (%s)\nset grid\nset key outside right top\n'
          'set datafile missing "NaN"\nset yrange [0:*]\n'
          'set title "Profiling cost per new Python code object, '
          'free-threaded CPython %s (%d CPUs)"\n'
          'set xlabel "threads"\nset ylabel "us per code object (wall)"\n'
          'plot "%s" u 1:2 w lp lw 2 t "jitring rings", '
          '"" u 1:3 w lp lw 2 t "mutex design", '
          '"" u 1:4 w p pt 7 ps 1.5 t "-X perf_jit (missing: crashed)", '
          '0.3 w l dt 2 lc rgb "gray" t "target 0.3"\n'
          % (out_png, xt, info["python"], info["cpus"], dat))
    subprocess.run(["gnuplot"], input=gp, text=True, check=False)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--worker"]:
        worker(args[1], int(args[2]), int(args[3]), args[4])
        return
    reps, n = 3, 204800
    out = None
    threads = THREADS
    while args:
        a = args.pop(0)
        if a == "--quick":
            reps, n = 3, 204800
        elif a == "--full":
            reps, n = 5, 409600
        elif a == "--reps":
            reps = int(args.pop(0))
        elif a == "--n":
            n = int(args.pop(0))
        elif a == "--threads":
            threads = tuple(int(x) for x in args.pop(0).split(","))
        elif a == "--out":
            out = args.pop(0)
        else:
            sys.exit(__doc__)
    import sysconfig
    info = {"python": sys.version.split()[0],
            "free_threaded": bool(sysconfig.get_config_var(
                "Py_GIL_DISABLED")),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "kernel": platform.release(), "n": n, "reps": reps,
            "threads": threads}
    print("# %s" % json.dumps(info), flush=True)
    runs = []
    start = time.time()
    for rep in range(reps):             # interleaved: the whole matrix, again
        for t in threads:
            for m in MODES:
                r = one_perf_jit(t, n) if m == "perf_jit" else one(m, t, n)
                r["rep"] = rep
                runs.append(r)
                print("[%5.0fs] rep %d %-8s %3d threads: %s" % (
                    time.time() - start, rep, m, t,
                    r.get("crash") or "%.3f us/obj wall, %.3f CPU%s" % (
                        r["wall_ns"] / r["n"] / 1000,
                        r["cpu_ns"] / r["n"] / 1000,
                        "" if r.get("dump_ok", True) else
                        ", INVALID DUMP %s" % r.get("dump_error"))),
                    flush=True)
    rows = summarise(runs, threads)
    print()
    print(table(rows))
    print()
    for what, ok, val in targets(rows):
        print("%s %s (%s)" % ("met:   " if ok else "MISSED:", what, val))
    if out:
        plot(rows, info, os.path.splitext(out)[0] + ".png")
        with open(out, "w") as f:
            json.dump({"info": info, "runs": runs, "rows": rows,
                       "targets": targets(rows)}, f, indent=1)


if __name__ == "__main__":
    main()
