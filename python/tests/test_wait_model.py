# SPDX-License-Identifier: MIT
"""record --wait's model and writers without perf: jitring.wait.waits.Waits
built on synthetic switches (a Threads filled as perf.data's records
would fill it) and switch samples (Sample, as script() gives them), then
each of its writers run on it.

The recording: process 100 ("python3 prog.py") lives 1 s; its main
thread (tid 100) blocks 800 ms in Thread.join; its worker (tid 101, 50
to 850 ms) blocks three times (100, 50 and 50 ms) in a threading.Lock,
the third switch's sample standing for the three (sampled at a
frequency: its period 3), is preempted once (20 ms, sampled), blocks
30 ms with a cut stack (sampled), then 40 ms blocked and 10 ms
preempted with no sample of theirs ("no sampled stack"); one sample has
no switch record near it, one is of jitring's own thread.

 1. model: each thread's time by reason, the functions' waits (total,
    self, preempted), the thread time, the switches, what is unsampled,
    cut, unmatched and jitring's own;
 2. folded: stacks-wait.folded's lines, in microseconds, the reason's
    frame under the innermost Python frame, the process named by its
    command;
 3. page: flame-wait.html's title, subtitle and embedded tree;
 4. tables: the header, the reasons, the tables and --wall's lines and
    the notes, as a user reads them;
 5. notes: what perf lost and what the budget did, one note each;
 6. empty: switches with no sample say so; no blocked thread says so;
 7. table: the wait outputs are in the one table of writers (WRITERS),
    and apply only where the recording has waits.
reason() itself is test_wait_reasons.py's.
"""

import contextlib
import io
import json
import os
import re
import types

import jrtest
from jitring.output import WRITERS
from jitring.output.tables import Tables
from jitring.output.waits import WaitFlame, WaitFolded, WaitTables
from jitring.profile.model import Sample
from jitring.wait.setup import NAME, UNSAMPLED
from jitring.wait.threads import Threads
from jitring.wait.waits import Waits


MS = 1000000
PY = "/usr/bin/python3.13t"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
KERNEL = "[kernel.kallsyms]"
LIB = "/usr/lib/python3.13t/"
PROG = "/work/app/prog.py"
META = {"command": ["prog.py"], "cwd": "/work/app", "wall": True,
        "wait_freq": 250}
PROCS = {100: {"argv": ["/usr/bin/python3", "prog.py"]}}

# The Python frames of each thread (leaf first), as jitring names them.
MAIN_PY = [("py::Thread.join:" + LIB + "threading.py", ""),
           ("py::main:" + PROG, ""), ("py::<module>:" + PROG, "")]
WORKER_PY = [("py::work:" + PROG, ""),
             ("py::Thread.run:" + LIB + "threading.py", ""),
             ("py::Thread._bootstrap_inner:" + LIB + "threading.py", ""),
             ("py::Thread._bootstrap:" + LIB + "threading.py", "")]
# A wait on a futex: the kernel's and libc's part, leaf first.
FUTEX = [("schedule", KERNEL), ("__x64_sys_futex", KERNEL),
         ("__futex_abstimed_wait_common", LIBC)]
PREEMPT = [("preempt_schedule_irq", KERNEL),
           ("asm_sysvec_apic_timer_interrupt", KERNEL)]

JOIN = tuple(FUTEX + [("ThreadHandle_join", PY)] + MAIN_PY +
             [("Py_BytesMain", PY), ("__libc_start_main", LIBC)])
THREAD_START = [("thread_run", PY), ("start_thread", LIBC),
                ("clone3", LIBC)]
LOCK = tuple(FUTEX + [("lock_PyThread_acquire_lock", PY)] + WORKER_PY +
             THREAD_START)
PREEMPTED = tuple(PREEMPT + WORKER_PY + THREAD_START)
# dwarf mode's stack copy ran out at the worker's function.
CUT_LOCK = tuple(FUTEX + [("lock_PyThread_acquire_lock", PY)] +
                 WORKER_PY[:1])


def recording(outs=True):
    """(Threads, [Sample]) of the module doc's recording (no switch
    record at all without @outs)."""
    th = Threads()
    if outs:
        th.outs = {100: [(100 * MS, False)],
                   101: [(100 * MS, False), (250 * MS, False),
                         (350 * MS, False), (450 * MS, True),
                         (500 * MS, False), (600 * MS, False),
                         (700 * MS, True)],
                   102: [(300 * MS, False)]}
        th.ins = {100: [900 * MS], 101: [200 * MS, 300 * MS, 400 * MS,
                                         470 * MS, 530 * MS, 640 * MS,
                                         710 * MS],
                  102: [310 * MS]}
    th.pid = {100: 100, 101: 100, 102: 100}
    th.comm = {100: (0, "python3"), 101: (0, "Thread-1 (work)"),
               102: (0, "jitring-flush")}
    th.start = {100: 0, 101: 50 * MS, 102: 0}
    th.end = {100: 1000 * MS, 101: 850 * MS, 102: 1000 * MS}
    th.period = {(101, 350 * MS - 2000): 3}
    th.sort()

    def sample(comm, frames, tid, t):
        # perf takes the sample as the thread leaves its CPU, its OUT
        # record a few microseconds after.
        return Sample(100, comm, frames, tid, t - 2000, NAME)
    samples = [sample("python3", JOIN, 100, 100 * MS),
               sample("Thread-1 (work)", LOCK, 101, 350 * MS),
               sample("jitring-flush", LOCK, 102, 300 * MS),
               sample("Thread-1 (work)", PREEMPTED, 101, 450 * MS),
               sample("Thread-1 (work)", CUT_LOCK, 101, 500 * MS),
               sample("Thread-1 (work)", LOCK, 101, 800 * MS)]
    return th, samples


def model(t, budget=None, outs=True, samples=None):
    th, got = recording(outs)
    return Waits.of(t.scratch, dict(META), got if samples is None
                    else samples, PROCS, None, th, budget or {})


def profile(t, waits, top=12):
    """What the writers read of a Profile."""
    return types.SimpleNamespace(out=t.scratch, waits=waits, top=top)


def printed(writer, prof):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        writer.write(prof)
    return buf.getvalue()


def test_model(t):
    w = model(t)
    join = "py::Thread.join:" + LIB + "threading.py"
    work = "py::work:" + PROG
    t.check(w.tids == [100, 101], "model: the program's threads, "
            "jitring's own left out", w.tids)
    t.check(w.thread_ns == 1800 * MS, "model: thread time is the two "
            "lives, 1000 + 800 ms", w.thread_ns)
    t.check(w.switches == 8, "model: every switch of the program's "
            "threads (1 + 7)", w.switches)
    t.check(w.per_thread == {100: {"Thread.join": 800 * MS},
                             101: {"threading.Lock": 230 * MS,
                                   "preempted": 20 * MS,
                                   UNSAMPLED: 50 * MS}},
            "model: each thread's time by reason: the lock's sample weighs "
            "its three switches (200 ms) and the cut one 30 ms; 40 + 10 ms "
            "have no sample of their kind", w.per_thread)
    t.check(w.self_ == {(join, "Thread.join"): 800 * MS,
                        (work, "threading.Lock"): 230 * MS},
            "model: blocked time by the innermost function and reason",
            w.self_)
    k = next(iter(w.self_))
    t.check((k.function, k.reason) == (join, "Thread.join"),
            "model: a self key names its function and reason", k)
    t.check(w.pre_self == {work: 20 * MS}, "model: preempted time by the "
            "innermost function", w.pre_self)
    want = {"py::<module>:" + PROG: {"Thread.join": 800 * MS},
            "py::main:" + PROG: {"Thread.join": 800 * MS},
            join: {"Thread.join": 800 * MS},
            work: {"threading.Lock": 230 * MS}}
    for fn in ("Thread.run", "Thread._bootstrap_inner",
               "Thread._bootstrap"):
        want["py::%s:%sthreading.py" % (fn, LIB)] = \
            {"threading.Lock": 200 * MS}
    t.check(w.total == want, "model: blocked time of each function and "
            "all it calls (the cut stack has the worker's function only)",
            w.total)
    t.check(w.entry == {100: {"py::<module>:" + PROG: 800 * MS},
                        101: {work: 250 * MS}},
            "model: each thread's first frame of the program, threading's "
            "bootstrap skipped", w.entry)
    t.check((w.unsampled_ns, w.cut_ns, w.unmatched, w.own, w.samples,
             w.sampled) == (50 * MS, 30 * MS, 1, 1, 6, True),
            "model: 50 ms unsampled, 30 ms cut, one sample unmatched, one "
            "of jitring's own, 6 samples, sampled (a period of 3)",
            (w.unsampled_ns, w.cut_ns, w.unmatched, w.own, w.samples,
             w.sampled))
    t.check(w.comm == {100: "python3", 101: "Thread-1 (work)"},
            "model: each thread's name in its samples", w.comm)


def folded_lines(t):
    name = "python3 prog.py [100]"
    py = ";".join(s for s, _ in reversed(MAIN_PY))
    worker = ";".join(s for s, _ in reversed(WORKER_PY))
    futex = ("__futex_abstimed_wait_common [libc.so.6];"
             "__x64_sys_futex [kernel];schedule [kernel]")
    return sorted([
        "%s;%s;[wait: Thread.join];ThreadHandle_join [python3.13t];%s "
        "800000" % (name, py, futex),
        "%s;%s;[wait: threading.Lock];lock_PyThread_acquire_lock "
        "[python3.13t];%s 200000" % (name, worker, futex),
        "%s;%s;[wait: preempted];asm_sysvec_apic_timer_interrupt "
        "[kernel];preempt_schedule_irq [kernel] 20000" % (name, worker),
        "%s;[stack cut: outer frames not recorded];py::work:%s;"
        "[wait: threading.Lock];lock_PyThread_acquire_lock [python3.13t];"
        "%s 30000" % (name, PROG, futex)])


def test_folded(t):
    w = model(t)
    WaitFolded().write(profile(t, w))
    with open(os.path.join(t.scratch, "stacks-wait.folded")) as f:
        got = f.read().splitlines()
    want = folded_lines(t)
    t.check(got == want, "folded: one line a stack, root first, in "
            "microseconds, [wait: REASON] under the innermost Python "
            "frame, the roots below the program's first frame dropped",
            "\n".join(got))


def test_page(t):
    w = model(t)
    WaitFlame().write(profile(t, w))
    with open(os.path.join(t.scratch, "flame-wait.html"),
              encoding="utf-8") as f:
        html = f.read()
    t.check("jitring waits: prog.py" in html,
            "page: titled with the program's command")
    t.check("8 context switches, 6 sampled with their stack" in html,
            "page: the subtitle counts the switches and the samples")
    m = re.search(r'<script type="application/json" id="jitring-data">'
                  r'(.*?)</script>', html, re.S)
    tree = json.loads(m.group(1)) if m else {}
    names = tree.get("t", [])
    t.check(tree.get("v") == 1050000, "page: the tree holds the folded "
            "microseconds (800,000 + 200,000 + 20,000 + 30,000)",
            tree.get("v"))
    t.check("[wait: Thread.join]" in names and
            "[wait: threading.Lock]" in names and
            "python3 prog.py [100]" in names,
            "page: the process and the reasons' frames are in the tree",
            names)


def test_tables(t):
    w = model(t)
    out = printed(WaitTables(), profile(t, w))
    lines = out.splitlines()
    t.check(lines[:1] == [""] and lines[1] ==
            "8 context switches of 2 threads over 1.800 s of thread time: "
            "1.100 s off CPU (61.1%): 1.030 s blocked (57.2%), 0.020 s "
            "preempted (1.1%), 0.050 s with no sampled stack (2.8%)",
            "tables: the header adds the threads' times up", lines[:2])
    t.check(lines[2].startswith("(6 of them sampled with their stack, "
                                "about 250 a second a thread"),
            "tables: sampled stacks said, with --wait-freq", lines[2])
    t.check("Blocked, by reason: Thread.join 0.800 s (44.4%), "
            "threading.Lock 0.230 s (12.8%)" in lines,
            "tables: blocked time by reason, largest first")
    cell = "%7.3fs %5.1f%%  %-24s  %s"
    total = [cell % (0.8, 44.4, "Thread.join", "<module>:prog.py"),
             cell % (0.8, 44.4, "Thread.join", "Thread.join:threading.py"),
             cell % (0.8, 44.4, "Thread.join", "main:prog.py"),
             cell % (0.23, 12.8, "threading.Lock", "work:prog.py"),
             cell % (0.2, 11.1, "threading.Lock",
                     "Thread._bootstrap:threading.py"),
             cell % (0.2, 11.1, "threading.Lock",
                     "Thread._bootstrap_inner:threading.py"),
             cell % (0.2, 11.1, "threading.Lock", "Thread.run:threading.py")]
    i = lines.index("          total  reason                    function") \
        if "          total  reason                    function" in lines \
        else -1
    t.check(i > 0 and lines[i + 1:i + 8] == total and not lines[i + 8],
            "tables: by total, largest first, ties by name, files short",
            lines[i:i + 9])
    i = lines.index("By self (the innermost Python function, by reason):")
    t.check(lines[i + 2:i + 4] ==
            [cell % (0.8, 44.4, "Thread.join", "Thread.join:threading.py"),
             cell % (0.23, 12.8, "threading.Lock", "work:prog.py")],
            "tables: by self", lines[i:i + 5])
    i = lines.index("%15s  %s" % ("self", "function"))
    t.check(lines[i + 1] == "%7.3fs %5.1f%%  %s" % (0.02, 1.1,
                                                    "work:prog.py"),
            "tables: preempted by the innermost function", lines[i:i + 2])
    i = lines.index("Each thread's time (--wall): CPU, then off CPU by "
                    "reason:")
    t.check(lines[i + 2:i + 4] == [
        "     100   1.000s   0.200s   0.800s  python3 (<module>): "
        "Thread.join 0.800 s",
        "     101   0.800s   0.500s   0.300s  Thread-1 (work): "
        "threading.Lock 0.230 s, no sampled stack 0.050 s, preempted "
        "0.020 s"],
        "tables: --wall's lines, longest life first, CPU and waits "
        "making the life", lines[i:i + 4])
    notes = [l for l in lines if l.startswith("(") and l.endswith(")")]
    t.check(notes[1:] == [
        "(1 switch without the time the thread ran again (perf lost its "
        "record, or the recording ended first) left out)",
        "(1 switch of jitring's own work left out)",
        "(0.050 s off CPU (2.8% of thread time) has no sampled stack (a "
        "thread with no sample of its kind of switch, or switches after "
        "the stacks stopped): in no table but --wall's lines)",
        "(1.7% of thread time waits with a cut stack (outer frames not "
        "recorded); record with --wait-stack-size 32768 for deeper ones)"],
        "tables: the notes", notes)
    short = printed(WaitTables(), profile(t, w, top=2))
    t.check(short.count("threading.Lock  ") == 1 and
            "main:prog.py" not in short and "work:prog.py" in short,
            "tables: profile.top rows each (2: the lock in self only, "
            "main:prog.py in neither)", short)


def test_notes(t):
    budget = {"budget": 64 << 20, "fast": 1.5, "sampled_s": 2.0,
              "sampled_n": 20000, "freq": 250, "stacks_off": 3.0,
              "perf_off": 4.5}
    w = model(t, budget)
    w.threads.lost = {"switch": 5, "records": 7}
    notes = WaitTables().lost_notes(w)
    t.check(len(notes) == 5, "notes: one line each for the lost samples, "
            "the lost records, the sampled stacks, the stacks stopped and "
            "perf stopped", notes)
    t.check(notes and notes[0].startswith("perf lost 5 samples of the "
                                          "switches") and
            notes[1].startswith("perf lost 7 of its records") and
            "for 2.0 s of the program, switching 10000 times a second "
            "(more than 5000)" in notes[2] and
            "the first 3.0 s only" in notes[3] and
            "--wait-budget 64 MB" in notes[3] and
            notes[4].startswith("perf stopped recording 4.5 s in"),
            "notes: the counts, rates and times", notes)
    w.threads.lost = {"any": 3}
    t.check(WaitTables().lost_notes(model(t))
            == [] and WaitTables().lost_notes(w)[0].startswith(
                "perf lost 3 records (its buffers were full; this kernel "
                "does not say of which event)"),
            "notes: none where nothing was lost; LOST records alone said "
            "as such")


def test_empty(t):
    w = model(t, samples=[])
    out = printed(WaitTables(), profile(t, w))
    t.check(out == "\nperf recorded the threads' context switches but no "
            "sample of them (its samples of the kernel were withheld?): no "
            "table of waits\n", "empty: switches without samples say so",
            out)
    th, samples = recording()
    # Only the preempted switch sampled: no thread blocked.
    w = Waits.of(t.scratch, dict(META, wall=False), samples[3:4], PROCS,
                 None, th, {})
    out = printed(WaitTables(), profile(t, w))
    t.check("\nno thread of the program blocked\n" in out and
            "Where threads were preempted" in out and
            "Each thread's time" not in out,
            "empty: no thread blocked, preempted still shown, no --wall "
            "lines without --wall", out)


def test_table(t):
    w = model(t)
    kinds = [type(x) for x in WRITERS]
    t.check([k for k in kinds if k in (WaitFolded, WaitFlame, WaitTables)]
            == [WaitFolded, WaitFlame, WaitTables] and
            kinds.index(WaitTables) == kinds.index(Tables) + 1,
            "table: the wait outputs are in WRITERS, their tables right "
            "after the CPU's", kinds)
    t.check([x.files for x in (WaitFolded(), WaitFlame(), WaitTables())] ==
            [("stacks-wait.folded",), ("flame-wait.html",), ()],
            "table: the folded file, the page, the tables")
    t.check(all(x.wanted(profile(t, w)) for x in
                (WaitFolded(), WaitFlame(), WaitTables())) and
            not any(x.wanted(profile(t, None)) for x in
                    (WaitFolded(), WaitFlame(), WaitTables())),
            "table: the wait outputs apply only to a recording with waits")


if __name__ == "__main__":
    jrtest.main(globals())
