#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarise a bench/run.sh run: ratio table, tables, targets, PNG plots.

usage: report.py RAW_DIR OUT_DIR MODE

RAW_DIR holds machine.json, gbench-rep*.json, callgrind.txt and rss.jsonl.
Writes OUT_DIR/summary-MODE.md, OUT_DIR/summary-MODE.json and
OUT_DIR/{throughput,latency,shapes}-MODE.png, and prints the ratio table.
Every figure is the median over the repetitions.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

ENGINES = ["floor", "rings", "mutex"]
SHAPES = ["cpython", "load", "unw_dbg_load", "code4k"]
SHAPE_DESC = {
    "cpython": "UNWINDING_INFO (30-byte trampoline) + CODE_LOAD (39-byte name)",
    "load": "CODE_LOAD only (30 bytes of code)",
    "unw_dbg_load": "UNWINDING_INFO + DEBUG_INFO (20 lines) + CODE_LOAD (256 bytes of code)",
    "code4k": "CODE_LOAD with 4 KiB of code",
}
NAME_RE = re.compile(r"^(tput|lat)/([a-z0-9_]+)/([a-z]+)/threads:(\d+)")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def load_gbench(raw):
    """{(mode, shape, engine, threads): {counter: [values over reps]}}"""
    runs = {}
    errors = []
    context = None
    for f in sorted(glob.glob(os.path.join(raw, "gbench-rep*.json"))):
        d = json.load(open(f))
        context = context or d.get("context")
        for b in d.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue
            m = NAME_RE.match(b["name"])
            if not m:
                continue
            key = (m.group(1), m.group(2), m.group(3), int(m.group(4)))
            if b.get("error_occurred"):
                errors.append("%s: %s" % (b["name"], b.get("error_message")))
                continue
            slot = runs.setdefault(key, {})
            for k, v in b.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    slot.setdefault(k, []).append(float(v))
    return runs, errors, context


def load_callgrind(raw):
    """{(shape, burst): {engine: instructions per call}}"""
    out = {}
    p = os.path.join(raw, "callgrind.txt")
    if not os.path.exists(p):
        return out
    for line in open(p):
        f = line.split()
        if len(f) != 5 or not f[4].isdigit():
            continue
        engine, shape, burst, n, ir = f[0], f[1], int(f[2]), int(f[3]), int(f[4])
        out.setdefault((shape, burst), {})[engine] = ir / n
    return out


def load_jsonl(raw, name):
    """The JSON lines of raw/NAME, skipping any that do not parse."""
    out = []
    p = os.path.join(raw, name)
    if os.path.exists(p):
        for line in open(p):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def load_rss(raw):
    return load_jsonl(raw, "rss.jsonl")


def load_manycore(raw):
    """The end-to-end runs that wrote a valid dump."""
    return [r for r in load_jsonl(raw, "manycore.jsonl")
            if r.get("error") == 0 and r.get("check_ok")]


def manycore_rows(mc):
    """Per thread count: medians of rate (M/s) per engine, rings/floor,
    rings/mutex, the flusher's and the engine threads' CPU per entry."""
    by = {}
    for r in mc:
        by.setdefault(r["threads"], {}).setdefault(r["engine"], []).append(r)
    rows = []
    for t in sorted(by):
        e = by[t]
        rate = {k: med([x["entries_per_s"] / 1e6 for x in v]) for k, v in e.items()}
        rings = e.get("rings", [])
        rows.append({
            "threads": t, "rate": rate,
            "rings_over_floor": ratio(rate.get("rings"), rate.get("floor")),
            "rings_over_mutex": ratio(rate.get("rings"), rate.get("mutex")),
            "flusher_ns": med([x["flusher_cpu_ns_per_entry"] for x in rings
                               if x.get("flusher_cpu_ns_per_entry") is not None]),
            "engine_ns": med([x["engine_threads_cpu_ns_per_entry"] for x in rings
                              if x.get("engine_threads_cpu_ns_per_entry") is not None]),
            "proc_ns": {k: med([x["proc_cpu_ns_per_entry"] for x in v]) for k, v in e.items()},
        })
    return rows


def fmt(x, nd=2):
    if x is None:
        return "n/a"
    if abs(x) >= 100:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return ("%%.%df" % nd) % x


def fmt_ns(ns):
    if ns is None:
        return "n/a"
    if ns >= 1e6:
        return "%.1f ms" % (ns / 1e6)
    if ns >= 1e3:
        return "%.1f µs" % (ns / 1e3)
    return "%.0f ns" % ns


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def md_table(L, title, head, rows):
    """Append a Markdown table to L: head is [(name, align)], align ':--'
    or '--:'; rows are lists of cells (str() each)."""
    L += [title, ""]
    L.append("| " + " | ".join(n for n, _ in head) + " |")
    L.append("|" + "|".join(a for _, a in head) + "|")
    L += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    L.append("")


def main():
    raw, out, mode = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    machine = json.load(open(os.path.join(raw, "machine.json")))
    runs, errors, context = load_gbench(raw)
    cg = load_callgrind(raw)
    rss = load_rss(raw)
    nreps = len(glob.glob(os.path.join(raw, "gbench-rep*.json")))

    def get(mode_, shape, engine, t, counter):
        r = runs.get((mode_, shape, engine, t))
        if not r or counter not in r:
            return None
        return med(r[counter])

    threads = sorted({k[3] for k in runs})
    cg_cpy = cg.get(("cpython", 0), {})
    instr_ratio = ratio(cg_cpy.get("rings"), cg_cpy.get("floor"))

    # ---- the ratio table (CPython shape) --------------------------------
    rows = []
    for t in threads:
        tp = {e: get("tput", "cpython", e, t, "items_per_second") for e in ENGINES}
        lat = {e: get("lat", "cpython", e, t, "p999_ns") for e in ENGINES}
        rows.append({
            "threads": t,
            "tput": tp,
            "p999_ns": lat,
            "rings_over_mutex_tput": ratio(tp["rings"], tp["mutex"]),
            "mutex_over_rings_p999": ratio(lat["mutex"], lat["rings"]),
            "rings_over_floor_tput": ratio(tp["rings"], tp["floor"]),
            "rings_over_floor_instr": instr_ratio,
        })

    L = []
    L.append("# jitring benchmark summary (%s matrix)" % mode)
    L.append("")
    L.append("Generated by `bench/run.sh %s` on %s. Medians of %d repetition(s); "
             "dumps written to `%s` (%s). See bench/README.md for what each number means."
             % (mode, machine.get("date_utc"), nreps, machine.get("bench_dir"),
                machine.get("bench_dir_fs")))
    L.append("")
    L.append("Machine: %s CPUs, %s (%s), kernel %s, governor %s, clocksource %s, "
             "affinity %s, %s. Compiler: %s; meson buildtype %s, optimization %s, "
             "b_ndebug %s. google-benchmark %s. git %s%s."
             % (machine.get("cpus_online"), machine.get("cpu_model"),
                "hypervisor " + machine.get("hypervisor", "?"), machine.get("kernel"),
                machine.get("governor"), machine.get("clocksource"),
                machine.get("affinity"), machine.get("pinning"), machine.get("cc"),
                machine.get("meson_options", {}).get("buildtype"),
                machine.get("meson_options", {}).get("optimization"),
                machine.get("meson_options", {}).get("b_ndebug"),
                machine.get("google_benchmark"), machine.get("git_commit", "")[:12],
                " (src/ or include/ modified)" if machine.get("git_dirty") else ""))
    L.append("")
    L.append("## Ratios, CPython shape")
    L.append("")
    L.append("rings/mutex throughput (target >= 3 at 8+ threads, >= 1.5 at 1), "
             "mutex/rings p99.9 latency (target >= 10 at 64+ threads), "
             "rings/floor throughput, rings/floor instructions per call "
             "(callgrind, one thread; target <= 1.3).")
    L.append("")
    ratio_tbl = ["| threads | rings/mutex tput | mutex/rings p99.9 | rings/floor tput | rings/floor instr |",
                 "|--:|--:|--:|--:|--:|"]
    for r in rows:
        ratio_tbl.append("| %d | %s | %s | %s | %s |" % (
            r["threads"], fmt(r["rings_over_mutex_tput"]), fmt(r["mutex_over_rings_p999"]),
            fmt(r["rings_over_floor_tput"]), fmt(r["rings_over_floor_instr"])))
    L += ratio_tbl
    L.append("")

    L.append("## Throughput, CPython shape (million entries/s, end to end: clock stops after jitring_flush)")
    L.append("")
    L.append("| threads | floor | rings | mutex | rings MB/s | mutex MB/s | rings ring_full_waits/round |")
    L.append("|--:|--:|--:|--:|--:|--:|--:|")
    for t in threads:
        tp = {e: get("tput", "cpython", e, t, "items_per_second") for e in ENGINES}
        bps = {e: get("tput", "cpython", e, t, "bytes_per_second") for e in ENGINES}
        waits = get("tput", "cpython", "rings", t, "ring_full_waits")
        its = get("tput", "cpython", "rings", t, "iterations")
        L.append("| %d | %s | %s | %s | %s | %s | %s |" % (
            t, *(fmt(tp[e] / 1e6 if tp[e] else None) for e in ENGINES),
            fmt(bps["rings"] / 1e6 if bps["rings"] else None),
            fmt(bps["mutex"] / 1e6 if bps["mutex"] else None),
            fmt(waits / its if waits is not None and its else None)))
    L.append("")

    L.append("## Per-call latency, CPython shape (jitring_write alone, rdtsc; saturating load)")
    L.append("")
    L.append("| threads | engine | p50 | p99 | p99.9 | max | Mentries/s in this run |")
    L.append("|--:|:--|--:|--:|--:|--:|--:|")
    for t in threads:
        for e in ENGINES:
            if ("lat", "cpython", e, t) not in runs:
                continue
            L.append("| %d | %s | %s | %s | %s | %s | %s |" % (
                t, e, *(fmt_ns(get("lat", "cpython", e, t, c))
                        for c in ("p50_ns", "p99_ns", "p999_ns", "max_ns")),
                fmt((get("lat", "cpython", e, t, "items_per_second") or 0) / 1e6)))
    L.append("")

    other = [s for s in SHAPES if s != "cpython" and any(k[1] == s for k in runs)]
    if other:
        L.append("## Other shapes: throughput (million entries/s) and rings/mutex")
        L.append("")
        L.append("| shape | bytes/entry | threads | floor | rings | mutex | rings/mutex | rings/floor | mutex/rings p99.9 |")
        L.append("|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
        for s in other:
            for t in threads:
                tp = {e: get("tput", s, e, t, "items_per_second") for e in ENGINES}
                if not any(tp.values()):
                    continue
                eb = get("tput", s, "rings", t, "entry_bytes")
                lr = ratio(get("lat", s, "mutex", t, "p999_ns"), get("lat", s, "rings", t, "p999_ns"))
                L.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                    s, fmt(eb), t, *(fmt(tp[e] / 1e6 if tp[e] else None) for e in ENGINES),
                    fmt(ratio(tp["rings"], tp["mutex"])), fmt(ratio(tp["rings"], tp["floor"])),
                    fmt(lr)))
        L.append("")

    L.append("## Instructions per call (callgrind, one thread, 10000 calls after 1000 warm-up)")
    L.append("")
    L.append("sustained: calls back to back (includes flusher wake-ups, ring-space waits, "
             "the mutex engine's fflush); burst: 32 calls between jitring_flush() calls "
             "made outside the counted function.")
    L.append("")
    L.append("| shape | mode | floor | rings | mutex | rings/floor | mutex/floor | mutex/rings |")
    L.append("|:--|:--|--:|--:|--:|--:|--:|--:|")
    for (s, b) in sorted(cg, key=lambda k: (SHAPES.index(k[0]) if k[0] in SHAPES else 9, k[1])):
        v = cg[(s, b)]
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            s, "burst" if b else "sustained", *(fmt(v.get(e), 0) for e in ENGINES),
            fmt(ratio(v.get("rings"), v.get("floor"))), fmt(ratio(v.get("mutex"), v.get("floor"))),
            fmt(ratio(v.get("mutex"), v.get("rings")))))
    L.append("")

    L.append("## Resident memory, 4096 threads (one process per engine)")
    L.append("")
    L.append("| engine | peak RSS (ru_maxrss) | RSS of the 4096 started threads | per idle registered thread, right after registration | after 2.5 s idle | errors |")
    L.append("|:--|--:|--:|--:|--:|--:|")
    for e in ENGINES:
        pk = next((x for x in rss if x.get("kind") == "peak" and x.get("engine") == e), {})
        idle = next((x for x in rss if x.get("kind") == "idle" and x.get("engine") == e), {})

        def mib(x):
            return "%.1f MiB" % (x / 1048576.0) if isinstance(x, (int, float)) else "n/a"

        def kib(x):
            return "%.2f KiB" % (x / 1024.0) if isinstance(x, (int, float)) else "n/a"
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            e, mib(pk.get("maxrss_bytes")), mib(pk.get("rss_threads_started_bytes")),
            kib(idle.get("per_thread_registered_bytes")), kib(idle.get("per_thread_idle_bytes")),
            (pk.get("errors", 0) or 0) + (idle.get("errors", 0) or 0)))
    L.append("")
    # rss_driver's registration storm and storm_driver's thread storms
    # both print kind "storm"; only the latter has a mode.
    storms = [x for x in rss if x.get("kind") == "storm" and "mode" not in x]
    if storms:
        md_table(L, "Registration storm (4096 threads whose first jitring_write() is at the same moment, 64 entries each):",
                 [("engine", ":--"), ("seconds", "--:"), ("calls refused", "--:"), ("last error", "--:"),
                  ("refused_nomem", "--:"), ("refills_waited", "--:")],
                 [[x.get("engine"), fmt(x.get("write_seconds")), x.get("errors", "n/a"),
                   x.get("last_error", "exit %s" % x.get("exit")), x.get("refused_nomem", "n/a"),
                   x.get("refills_waited", "n/a")] for x in storms])

    st = [x for x in rss if x.get("kind") == "storm" and "mode" in x]
    def storm_row(x):
        row = [x["mode"], x["threads"], x["ready"] or "default"]
        if "exit" in x:
            return row + ["", "exit %s" % x["exit"]] + [""] * 6
        return row + [
            "%d ms" % x.get("idle_ms", 200),
            "%.1f%%" % (100 * x["own_ring_share"]), "%.1f%%" % (100 * x["arena_caller_share"]),
            "%.1f / %.1f us" % (x["first_p50_ns"] / 1000.0, x["first_p99_ns"] / 1000.0),
            x.get("wakes", "n/a"),
            "%d ns" % x["later_ns"], "%.2f KiB" % x["idle_kib_per_thread"],
            "%.2f%%" % (100 * x["flusher_idle_cpu_share"])]
    if st:
        md_table(L, "Thread storms (`storm_driver MODE THREADS READY`: THREADS threads released at once after the writer sat idle; a first call's cost is min(thread CPU, wall time); READY 0 = defaults, else `ready_rings` = THREADS, `ready_copies` = THREADS x 400):",
                 [("mode", ":--")] + [(h, "--:") for h in (
                     "threads", "ready", "idle", "own ring", "arenas on a caller", "first call p50 / p99", "wakes",
                     "later call", "idle RSS per thread", "flusher CPU (idle)")],
                 [storm_row(x) for x in st])
    for x in rss:
        if x.get("kind") == "futex_wake":
            L.append("Waking the idle flusher (`wake_driver %d`: one FUTEX_WAKE of a thread idle %d ms, %d tries): p50 %.1f us, max %.1f us of the waker's time." % (
                x["idle_ms"], x["idle_ms"], x["tries"], x["p50_ns"] / 1000.0, x["max_ns"] / 1000.0))
            L.append("")

    fc = [x for x in rss if x.get("kind") == "flusher_cpu" and "phase" in x]
    if fc:
        md_table(L, "The flusher's CPU (`stall_driver rings 500 500`: a producer stalled by a page fault after its timestamp; holdback 500 ms):",
                 [("phase", ":--"), ("wall", "--:"), ("flusher CPU", "--:"), ("share of one CPU", "--:")],
                 [[x["phase"], "%.0f ms" % x["wall_ms"], "%.2f ms" % x["flusher_cpu_ms"],
                   "%.3f%%" % (100.0 * x["cpu_share"])] for x in fc])

    mc = manycore_rows(load_manycore(raw))
    if mc:
        md_table(L, "## End to end into the file (`manycore_driver`)\n\n"
                 "The CPython shape (243 bytes per entry), threads started and "
                 "the writer closed inside the clock, the dump checked. The "
                 "floor: each thread encodes into its own 1 MiB buffer and "
                 "`pwrite()`s it at a reserved range (no order). *flusher*: "
                 "the flusher thread's CPU per entry; *engine threads*: the "
                 "flusher's and the write thread's together (bench/README.md, "
                 "Many-core kit). Medians of the repetitions:",
                 [("threads", "--:"), ("rings M/s", "--:"), ("mutex M/s", "--:"),
                  ("floor M/s", "--:"), ("rings/floor", "--:"), ("rings/mutex", "--:"),
                  ("flusher ns/entry", "--:"), ("engine threads ns/entry", "--:"),
                  ("process CPU ns/entry rings / mutex", "--:")],
                 [[r["threads"], fmt(r["rate"].get("rings")), fmt(r["rate"].get("mutex")),
                   fmt(r["rate"].get("floor")), fmt(r["rings_over_floor"]),
                   fmt(r["rings_over_mutex"]), fmt(r["flusher_ns"], 0),
                   fmt(r["engine_ns"], 0),
                   "%s / %s" % (fmt(r["proc_ns"].get("rings"), 0), fmt(r["proc_ns"].get("mutex"), 0))]
                  for r in mc])

    # ---- targets -------------------------------------------------------
    tg = []

    def verdict(ok):
        return "n/a" if ok is None else ("met" if ok else "NOT met")
    r1 = next((r for r in rows if r["threads"] == 1), None)
    v = r1["rings_over_mutex_tput"] if r1 else None
    tg.append(("rings >= 1.5x mutex throughput at 1 thread", fmt(v), verdict(None if v is None else v >= 1.5)))
    hi = [r for r in rows if r["threads"] >= 8 and r["rings_over_mutex_tput"] is not None]
    if hi:
        bad = [r["threads"] for r in hi if r["rings_over_mutex_tput"] < 3]
        tg.append(("rings >= 3x mutex throughput at 8+ threads",
                   ", ".join("%d: %s" % (r["threads"], fmt(r["rings_over_mutex_tput"])) for r in hi),
                   "met" if not bad else "NOT met at %s threads" % ",".join(map(str, bad))))
    hi = [r for r in rows if r["threads"] >= 64 and r["mutex_over_rings_p999"] is not None]
    if hi:
        bad = [r["threads"] for r in hi if r["mutex_over_rings_p999"] < 10]
        tg.append(("rings p99.9 <= 1/10 of mutex at 64+ threads",
                   ", ".join("%d: %s" % (r["threads"], fmt(r["mutex_over_rings_p999"])) for r in hi),
                   "met" if not bad else "NOT met at %s threads" % ",".join(map(str, bad))))
    worst = None
    for (s, b), v in cg.items():
        rr = ratio(v.get("rings"), v.get("floor"))
        if rr is not None and (worst is None or rr > worst[0]):
            worst = (rr, s, b)
    tg.append(("rings instructions <= 1.3x floor (CPython shape)", fmt(instr_ratio),
               verdict(None if instr_ratio is None else instr_ratio <= 1.3)))
    if worst:
        tg.append(("... every shape and mode (worst)", "%s (%s, %s)" % (fmt(worst[0]), worst[1], "burst" if worst[2] else "sustained"),
                   verdict(worst[0] <= 1.3)))
    idle = next((x for x in rss if x.get("kind") == "idle" and x.get("engine") == "rings"), None)
    if idle:
        a, b = idle.get("per_thread_registered_bytes"), idle.get("per_thread_idle_bytes")
        tg.append(("<= 16 KiB resident per idle registered thread (rings, after 2.5 s idle)",
                   "%.2f KiB (right after registration: %.2f KiB)" % (b / 1024, a / 1024),
                   verdict(b <= 16384)))
    if mc:
        worse = [r["threads"] for r in mc
                 if r["proc_ns"].get("rings") is not None and r["proc_ns"].get("mutex") is not None
                 and r["proc_ns"]["rings"] >= r["proc_ns"]["mutex"]]
        tg.append(("rings process CPU per entry < mutex at every thread count (end to end)",
                   ", ".join("%d: %s / %s" % (r["threads"], fmt(r["proc_ns"].get("rings"), 0),
                                                fmt(r["proc_ns"].get("mutex"), 0)) for r in mc),
                   "met" if not worse else "NOT met at %s threads" % ",".join(map(str, worse))))
        fl = [r for r in mc if r["engine_ns"] is not None]
        if fl:
            worst = max(r["engine_ns"] for r in fl)
            tg.append(("flusher (with its write thread) CPU <= 80 ns per entry",
                       ", ".join("%d: %s" % (r["threads"], fmt(r["engine_ns"], 0)) for r in fl),
                       verdict(worst <= 80)))
    L.append("## Targets")
    L.append("")
    L.append("| target | measured | verdict |")
    L.append("|:--|:--|:--|")
    for t in tg:
        L.append("| %s | %s | %s |" % t)
    L.append("")
    if errors:
        L.append("## Benchmarks that reported errors")
        L.append("")
        for e in errors:
            L.append("- " + e)
        L.append("")
    L.append("Plots: throughput-%s.png, latency-%s.png%s%s." % (
        mode, mode, ", shapes-%s.png" % mode if other else "",
        ", endtoend-%s.png" % mode if mc else ""))
    L.append("")

    md = os.path.join(out, "summary-%s.md" % mode)
    open(md, "w").write("\n".join(L))
    json.dump({
        "mode": mode, "machine": machine, "repetitions": nreps,
        "ratios_cpython": rows, "callgrind": {"%s/%s" % (s, "burst" if b else "sustained"): v for (s, b), v in cg.items()},
        "rss": rss, "end_to_end": mc,
        "targets": [{"target": a, "measured": b, "verdict": c} for a, b, c in tg],
        "errors": errors,
        "medians": {"/".join(map(str, k)): {c: med(v) for c, v in r.items()} for k, r in runs.items()},
    }, open(os.path.join(out, "summary-%s.json" % mode), "w"), indent=1)

    plots(raw, out, mode, runs, threads, other, get, mc)

    print("\n".join(["", "Ratio table (CPython shape, %s matrix, dumps in %s):" % (mode, machine.get("bench_dir")), ""] + ratio_tbl))
    print("")
    for t in tg:
        print("%-70s %-40s %s" % t)
    if errors:
        print("\n%d benchmark(s) reported errors; see %s" % (len(errors), md))
    print("\nWrote %s" % md)


def plots(raw, out, mode, runs, threads, other, get, mc):
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no plots", file=sys.stderr)
        return
    d = os.path.join(raw, "plot")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tput.dat"), "w") as f:
        f.write("# threads floor rings mutex (Mentries/s)\n")
        for t in threads:
            v = [get("tput", "cpython", e, t, "items_per_second") for e in ENGINES]
            f.write("%d %s\n" % (t, " ".join("%.4f" % (x / 1e6) if x else "NaN" for x in v)))
    with open(os.path.join(d, "lat.dat"), "w") as f:
        f.write("# threads then for floor rings mutex: p50 p99 p999 max (us)\n")
        for t in threads:
            cols = []
            for e in ENGINES:
                for c in ("p50_ns", "p99_ns", "p999_ns", "max_ns"):
                    x = get("lat", "cpython", e, t, c)
                    cols.append("%.4f" % (x / 1e3) if x else "NaN")
            f.write("%d %s\n" % (t, " ".join(cols)))
    with open(os.path.join(d, "shapes.dat"), "w") as f:
        f.write("# threads then rings/mutex per shape\n")
        for t in threads:
            cols = []
            for s in SHAPES:
                r = ratio(get("tput", s, "rings", t, "items_per_second"),
                          get("tput", s, "mutex", t, "items_per_second"))
                cols.append("%.4f" % r if r else "NaN")
            f.write("%d %s\n" % (t, " ".join(cols)))
    xt = "set xtics (%s)\n" % ", ".join('"%d" %d' % (t, t) for t in threads)
    common = ('set terminal pngcairo size 900,560 font "sans,10" noenhanced\nset logscale x 2\n'
              'set xrange [0.75:5500]\n' + xt +
              'set grid\nset key outside right top\nset xlabel "threads (real, on %s CPUs)"\n'
              'set datafile missing "NaN"\n' % os.cpu_count())
    gp = common + (
        'set output "%s"\nset title "jitring_write throughput, CPython shape (end to end, incl. jitring_flush; %s matrix)"\n'
        'set ylabel "million entries / s"\nset yrange [0:*]\n'
        'plot "%s" u 1:2 w lp lw 2 t "floor (no sharing, no file)", '
        '"" u 1:3 w lp lw 2 t "rings", "" u 1:4 w lp lw 2 t "mutex"\n'
        % (os.path.join(out, "throughput-%s.png" % mode), mode, os.path.join(d, "tput.dat")))
    gp += ('set output "%s"\nset title "jitring_write per-call latency, CPython shape (%s matrix)"\n'
           'set ylabel "microseconds (log)"\nset logscale y\nset yrange [*:*]\n'
           'plot "%s" u 1:6 w lp lw 2 dt 1 lc 1 t "rings p50", "" u 1:7 w lp lw 2 dt 2 lc 1 t "rings p99", '
           '"" u 1:8 w lp lw 2 dt 3 lc 1 t "rings p99.9", "" u 1:9 w lp lw 1 dt 4 lc 1 t "rings max", '
           '"" u 1:10 w lp lw 2 dt 1 lc 2 t "mutex p50", "" u 1:11 w lp lw 2 dt 2 lc 2 t "mutex p99", '
           '"" u 1:12 w lp lw 2 dt 3 lc 2 t "mutex p99.9", "" u 1:13 w lp lw 1 dt 4 lc 2 t "mutex max", '
           '"" u 1:4 w lp lw 1 dt 3 lc 3 t "floor p99.9"\n'
           % (os.path.join(out, "latency-%s.png" % mode), mode, os.path.join(d, "lat.dat")))
    if other:
        gp += ('unset logscale y\nset output "%s"\nset title "rings/mutex throughput by entry shape (%s matrix)"\n'
               'set ylabel "rings / mutex"\nset yrange [0:*]\n'
               'plot "%s" u 1:2 w lp lw 2 t "cpython", "" u 1:3 w lp lw 2 t "load", '
               '"" u 1:4 w lp lw 2 t "unw+dbg+load", "" u 1:5 w lp lw 2 t "code 4 KiB", '
               '3 w l dt 2 lc rgb "gray" t "target 3x"\n'
               % (os.path.join(out, "shapes-%s.png" % mode), mode, os.path.join(d, "shapes.dat")))
    if mc:
        with open(os.path.join(d, "e2e.dat"), "w") as f:
            f.write("# threads floor rings mutex (Mentries/s), rings flusher and engine threads ns/entry\n")
            for r in mc:
                v = [r["rate"].get(e) for e in ENGINES] + [r["flusher_ns"], r["engine_ns"]]
                f.write("%d %s\n" % (r["threads"], " ".join("%.4f" % x if x is not None else "NaN" for x in v)))
        gp += ('unset logscale y\nset output "%s"\n'
               'set title "end to end into the file, CPython shape (manycore_driver, %s)"\n'
               'set ylabel "million entries / s"\nset yrange [0:*]\n'
               'set y2label "rings: CPU ns per entry"\nset y2range [0:*]\nset y2tics\n'
               'plot "%s" u 1:2 w lp lw 2 t "floor (unordered pwrite)", "" u 1:3 w lp lw 2 t "rings", '
               '"" u 1:4 w lp lw 2 t "mutex", "" u 1:5 axes x1y2 w lp dt 2 t "rings flusher CPU", '
               '"" u 1:6 axes x1y2 w lp dt 3 t "rings flusher + write thread CPU"\n'
               'unset y2label\nunset y2tics\n'
               % (os.path.join(out, "endtoend-%s.png" % mode), mode, os.path.join(d, "e2e.dat")))
    with open(os.path.join(d, "plots.gp"), "w") as f:
        f.write(gp)
    subprocess.run(["gnuplot", os.path.join(d, "plots.gp")], check=False)


if __name__ == "__main__":
    main()
