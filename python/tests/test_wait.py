# SPDX-License-Identifier: MIT
"""python -m jitring record --wait: where threads wait, and why, through
real perf.

 1. shared: 4 threads append to one shared list, then 4 each to its own:
    on a free-threaded interpreter the shared one's function waits on the
    list's per-object lock (its largest reason but the barrier that
    starts the threads together) and leads that lock's waits, the other
    a third as long or absent; the CPU tables hold no switch sample (no
    Thread.join there); stacks-wait.folded and flame-wait.html carry the
    reason's frame under the function;
 2. lock: 4 threads take one threading.Lock around a hot section (dwarf
    mode): its function waits on "threading.Lock", its largest reason (a
    GIL build: one of its reasons, beside the GIL; without symbols:
    "unnamed native");
 3. sleep (--wall): a thread that sleeps 30 ms after each 20 ms of work,
    beside a thread that only computes: the sleeper's line gives sleep
    within 5 points of the share the program measured itself, its CPU
    and waits add up to the life it measured within 5 %, and the
    computing thread's function is in no wait table (on a GIL build,
    where each waits for the other's GIL, the sleeper alone);
 3b. sampled (--wall --wait-freq 200): switch_prog.py's two threads
    passing a byte through pipes (15,000-25,000 switches a second):
    their stacks are sampled once they switch more than 5,000 times a
    second (stderr and a note say so; fewer stacks than switches), yet
    the echo thread's CPU and waits add up to its life within 5 %, its
    largest named wait its pipe's read;
 3c. budget (--wall --wait-budget 64M): eight threads yielding until
    perf stops at the budget's cap: the folder within the budget,
    stderr and the notes say how the stacks were cut (stopped at half
    the budget, or sampled where the flood of its first instants fills
    it first) and when perf stopped, and each thread's CPU and waits
    (those with no sampled stack included) still make its life within
    5 %;
 3d. attached (record --pid --wait): a service's two threads in a
    sleep loop entered before the window: the loop leads the self table
    of waits, as sleep, and a tenth of the waits or less have no Python
    frame (the frames running throughout the window name them); the
    window starts at the service's start of jitring (the samples before
    it, which name nothing, left out and counted);
 4. I/O: a socketpair reader blocked on a writer that sleeps between
    sends, and a main thread waiting for a child process: recv, sleep and
    child wait named;
 4a. executor: a ThreadPoolExecutor's idle workers and a
    queue.SimpleQueue consumer: "executor idle" and
    "queue.SimpleQueue.get", each its function's largest wait;
 4b. gc (free-threaded): gc.collect() in a loop while two threads
    allocate: their largest wait is the collector's stop-the-world;
 5. reasons: stacks of the wait paths no program here takes (the GIL,
    also as a stripped GIL build's condition variable, a stop-the-world
    pause, a page fault, a yield in a PyMutex, a
    preemption, stripped code) named as record names them;
 6. refused: with kernel.perf_event_paranoid above 1 and no privilege (an
    unmapped user namespace), --wait is one line and exit 2, and the
    program never runs.
Skips (77) where perf cannot record here.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import jrtest
import test_record

SHARED = textwrap.dedent("""
    import threading
    shared = []
    go = threading.Barrier(4)
    def append_shared(n):
        go.wait()
        for i in range(n):
            shared.append(i)
    def append_own(n):
        go.wait()
        mine = []
        for i in range(n):
            mine.append(i)
    def run(fn):
        ts = [threading.Thread(target=fn, args=(300000,)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    run(append_shared)
    run(append_own)
""")

# The threads start their loops together (a loaded machine may run each
# thread's whole loop before it starts the next).
LOCK = textwrap.dedent("""
    import threading
    lock = threading.Lock()
    go = threading.Barrier(4)
    def hot_section(n):
        go.wait()
        for i in range(n):
            with lock:
                s = 0
                for j in range(200):
                    s += j
    ts = [threading.Thread(target=hot_section, args=(5000,))
          for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
""")

# gc off: a collection stops the world, and the computing thread would
# wait for it (rightly, but not what this checks).
SLEEP = textwrap.dedent("""
    import gc, json, sys, threading, time
    gc.disable()
    stop = False
    def compute_only():
        s = 0
        while not stop:
            for i in range(1000):
                s += i & 7
    got = {}
    def sleeper():
        t0 = time.monotonic()
        slept = 0.0
        for _ in range(10):
            end = time.monotonic() + 0.02
            while time.monotonic() < end:
                pass
            a = time.monotonic()
            time.sleep(0.03)
            slept += time.monotonic() - a
        got.update(life=time.monotonic() - t0, slept=slept)
    c = threading.Thread(target=compute_only)
    if sys.argv[2] == "1":
        c.start()
    s = threading.Thread(target=sleeper)
    s.start()
    s.join()
    stop = True
    if c.is_alive():
        c.join()
    with open(sys.argv[1], "w") as f:
        json.dump(got, f)
""")

GC = textwrap.dedent("""
    import gc, threading, time
    keep = [[i] * 4 for i in range(300000)]   # a heap for gc to walk
    stop = False
    def worker():
        while not stop:
            x = [[i] for i in range(100)]
    def collector():
        for _ in range(40):
            gc.collect()
            time.sleep(0.005)
    ws = [threading.Thread(target=worker) for _ in range(2)]
    for w in ws:
        w.start()
    c = threading.Thread(target=collector)
    c.start()
    c.join()
    stop = True
    for w in ws:
        w.join()
""")

IO = textwrap.dedent("""
    import socket, subprocess, threading, time
    a, b = socket.socketpair()
    def reader():
        n = 0
        while n < 100:      # sends that came together, one recv
            n += len(a.recv(64))
    def writer():
        for i in range(100):
            time.sleep(0.003)
            b.send(b"x")
    r = threading.Thread(target=reader)
    w = threading.Thread(target=writer)
    r.start()
    w.start()
    subprocess.run(["sleep", "0.3"])
    r.join()
    w.join()
""")


def tables(out):
    """{'total': [(seconds, share, reason, function)], 'self': [...],
    'preempted': [(seconds, share, '', function)]} of the wait tables, in
    order."""
    tabs, cur = {"total": [], "self": [], "preempted": []}, None
    row = re.compile(r"^\s*([\d.]+)s\s+([\d.]+)%\s+(.*)$")
    for line in out.splitlines():
        if line.startswith("Where threads wait, by Python function"):
            cur = "total"
        elif line.startswith("By self (the innermost Python function, by "
                             "reason"):
            cur = "self"
        elif line.startswith("Where threads were preempted"):
            cur = "preempted"
        elif not line.strip():
            cur = None
        elif cur:
            m = row.match(line)
            if not m:
                continue
            rest = re.split(r"\s{2,}", m.group(3).strip())
            if cur == "preempted":
                reason, fn = "", rest[-1]
            else:
                reason = " ".join(rest[:-1])
                reason = re.sub(r" \+\d+ more$", "", reason)
                fn = rest[-1]
            tabs[cur].append((float(m.group(1)), float(m.group(2)),
                              reason, fn))
    return tabs


def cpu_self(out):
    """The function names of the CPU table by self."""
    rows, on = [], False
    for line in out.splitlines():
        if line.startswith("By self (the innermost Python function; "
                           "native"):
            on = True
        elif on and not line.strip():
            break
        elif on:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%"):
                rows.append((float(parts[1][:-1]), parts[2]))
    return rows


def wall_lines(out, every=None):
    """{function in parentheses: (life s, cpu s, {reason: s})} of
    --wall's per-thread lines (the last of a function's; @every, a list,
    gets (function, life, cpu, reasons) of each)."""
    got, on = {}, False
    line_re = re.compile(r"^\s*\d+\s+([\d.]+)s\s+([\d.]+)s\s+([\d.]+)s\s+"
                         r".*\((\S+)\): (.*)$")
    for line in out.splitlines():
        if line.startswith("Each thread's time (--wall)"):
            on = True
            continue
        if on and not line.strip():
            break
        m = on and line_re.match(line)
        if not m:
            continue
        reasons = {}
        for part in m.group(5).split(", "):
            w, _, s = part.rpartition(" ")
            if w.endswith(" s") or s == "s":
                w, _, v = w.rpartition(" ")
                try:
                    reasons[w] = float(v)
                except ValueError:
                    pass
        got[m.group(4)] = (float(m.group(1)), float(m.group(2)), reasons)
        if every is not None:
            every.append((m.group(4),) + got[m.group(4)])
    return got


def named(rows, fn):
    return [r for r in rows if r[3].startswith(fn + ":")]


class Rec(test_record.Rec):
    """record --wait on a program given as text."""

    def run(self, name, text, args=(), opts=("--wait",), timeout=300,
            prefix=()):
        prog = self.script(name + ".py", text)
        out = os.path.join(self.t.scratch, name)
        p = subprocess.run(list(prefix) + [self.py, "-m", "jitring",
                                           "record", "-o", out] +
                           list(opts) + ["--top", "40", "--", prog] +
                           list(args), capture_output=True, text=True,
                           env=self.env, cwd=self.t.scratch,
                           timeout=timeout)
        return p, out


def test_shared(t, r):
    p, out = r.run("shared", SHARED)
    t.check(p.returncode == 0, "shared: record --wait exits 0",
            p.stderr[-1500:])
    tabs = tables(p.stdout)
    # The threads' wait at the barrier that starts them together aside.
    shared = [row for row in named(tabs["self"], "append_shared")
              if row[2] != "threading.Barrier"]
    locks = [row for row in tabs["self"] if row[2] == "per-object lock"]
    if jrtest.free_threaded():
        t.check(shared and shared[0][2] == "per-object lock",
                "shared: append_shared's largest wait is the list's "
                "per-object lock", p.stdout[-3000:])
        t.check(locks and locks[0][3].startswith("append_shared:"),
                "shared: the shared list's function leads the per-object "
                "lock's waits", locks)
        own = named(locks, "append_own")
        t.check(locks and (not own or own[0][0] * 3 < locks[0][0]),
                "shared: the own lists' function waits on a per-object "
                "lock a third as long or less", locks)
        with open(os.path.join(out, "stacks-wait.folded")) as f:
            folded = f.read()
        t.check(re.search(r"py::append_shared:[^;]*;\[wait: per-object "
                          r"lock\];", folded),
                "stacks-wait.folded: [wait: per-object lock] under "
                "append_shared")
        with open(os.path.join(out, "flame-wait.html"),
                  errors="replace") as f:
            html = f.read()
        t.check("[wait: per-object lock]" in html and
                "append_shared" in html and "d3" in html,
                "flame-wait.html holds the function and the reason")
    else:
        t.skip_part("shared: the per-object lock", "a GIL interpreter "
                    "has no per-object locks")
    cpu = cpu_self(p.stdout)
    t.check(cpu and not any(fn.startswith(("Thread.join:",
                                           "Condition.wait:"))
                            and share > 2 for share, fn in cpu),
            "shared: the CPU table by self holds no switch sample "
            "(Thread.join, Condition.wait at 2% or less)", cpu)
    t.check(re.search(r"^\d+ samples of cpu-clock", p.stdout, re.M),
            "shared: the CPU table counts cpu-clock samples")


def test_lock(t, r):
    # dwarf mode: in fp mode a wait inside glibc's futex path loses its
    # callers where glibc keeps no frame pointers (Debian's).
    p, out = r.run("lock", LOCK, opts=("--wait", "--call-graph", "dwarf"))
    t.check(p.returncode == 0, "lock: record --wait exits 0",
            p.stderr[-1500:])
    rows = named(tables(p.stdout)["self"], "hot_section")
    if jrtest.free_threaded():
        t.check(rows and rows[0][2] == "threading.Lock",
                "lock: hot_section's largest wait is its threading.Lock "
                "(%s)" % (rows[0][2] if rows else None), p.stdout[-3000:])
        return
    # A GIL build: the threads wait for the GIL too (as much or more:
    # the lock's holder holds the GIL most of the time).
    # Stripped (Debian's python3.14/3.15), the lock's wait has no name
    # but its machinery; the GIL's is named by its condition variable.
    want = ("threading.Lock", "unnamed native (_PySemaphore_Wait)",
            "unnamed native (PyMutex)")
    t.check(any(row[2] in want for row in rows),
            "lock: hot_section waits on its threading.Lock (%s)"
            % [row[2] for row in rows], p.stdout[-3000:])
    t.check(any(row[2] == "GIL" for row in rows),
            "lock: hot_section waits for the GIL too (%s)"
            % [row[2] for row in rows], p.stdout[-3000:])


def test_sleep(t, r):
    sleep_case(t, r, "sleep", ())


def test_sleep_fp(t, r):
    """The same in fp mode, where the interpreter keeps frame pointers
    (--wait's auto picks dwarf)."""
    if not r.keeps_fp():
        t.skip_part("sleep_fp", "this interpreter keeps no frame pointers")
        return
    sleep_case(t, r, "sleep_fp", ("--call-graph", "fp"))


def sleep_case(t, r, tag, opts):
    res = os.path.join(t.scratch, tag + ".json")
    # On a GIL build the computing thread holds the GIL the sleeper takes
    # back after each sleep (that wait is the GIL's, and the computing
    # thread waits for it in turn): the two are checked apart there.
    ft = jrtest.free_threaded()
    p, out = r.run(tag, SLEEP, args=[res, "1" if ft else "0"],
                   opts=("--wall",) + opts)
    t.check(p.returncode == 0, "%s: record %s exits 0"
            % (tag, " ".join(("--wall",) + opts)), p.stderr[-1500:])
    with open(os.path.join(out, "jitring-record.json")) as f:
        mode = json.load(f).get("call_graph")
    t.check(mode == ("fp" if opts else "dwarf"),
            "%s: in %s mode" % (tag, mode))
    try:
        with open(res) as f:
            own = json.load(f)
    except (OSError, ValueError):
        t.check(False, "%s: the program wrote its own measure" % tag)
        return
    wall = wall_lines(p.stdout)
    got = wall.get("sleeper")
    t.check(got, "%s: --wall has a line for the sleeper's thread" % tag,
            p.stdout[-3000:])
    if got:
        life, cpu, reasons = got
        from jitring.wait.setup import UNSAMPLED
        share = 100.0 * reasons.get("sleep", 0) / life if life else 0
        # Switches whose stack perf never took (its buffers full on a
        # loaded machine) name no reason: the sleep named is at most the
        # truth, and the truth at most that and the unnamed time.
        unnamed = 100.0 * reasons.get(UNSAMPLED, 0) / life if life else 0
        want = 100.0 * own["slept"] / own["life"]
        t.check(share - 5 <= want <= share + unnamed + 5,
                "%s: the sleeper sleeps %.1f%% of its life by record (and "
                "%.1f%% with no stack), %.1f%% by its own clock"
                % (tag, share, unnamed, want), got)
        # Its time adds up: CPU and every wait, against the life it
        # measured itself (the thread's own start and end just outside).
        whole = cpu + sum(reasons.values())
        t.check(abs(whole - own["life"]) <= 0.05 * own["life"],
                "%s: --wall's CPU %.3f s and waits %.3f s make the "
                "sleeper's life, %.3f s by its own clock, within 5%%"
                % (tag, cpu, whole - cpu, own["life"]), got)
    tabs = tables(p.stdout)
    t.check(named(tabs["self"], "sleeper") and
            named(tabs["self"], "sleeper")[0][2] == "sleep",
            "%s: the sleeper's wait is named sleep" % tag, tabs["self"])
    if not ft:
        t.skip_part("%s: the computing thread" % tag, "on a GIL build it "
                    "waits for the GIL whenever another thread runs")
        return
    t.check(not named(tabs["total"], "compute_only") and
            not named(tabs["self"], "compute_only"),
            "%s: the computing thread's function is in no wait table"
            % tag,
            named(tabs["total"], "compute_only"))
    c = wall.get("compute_only")
    from jitring.wait.setup import UNSAMPLED
    # Its preemptions after its last sampled one (perf's buffers full,
    # or the stacks sampled while the loaded machine switches fast) are
    # "no sampled stack": time, not a wait it names.
    t.check(c and not [w for w in c[2]
                       if w not in ("preempted", UNSAMPLED) and
                       c[2][w] > 0.0005],
            "%s: the computing thread's line: CPU and preemption only"
            % tag, c)


def test_gc(t, r):
    """gc.collect() in one thread while two others allocate: on a
    free-threaded interpreter each collection stops the world, and the
    others wait for it to end."""
    if not jrtest.free_threaded():
        t.skip_part("gc: stop-the-world", "a GIL build's collector stops "
                    "no one: the others wait for the GIL")
        return
    p, out = r.run("gc", GC)
    t.check(p.returncode == 0, "gc: record --wait exits 0",
            p.stderr[-1500:])
    rows = named(tables(p.stdout)["self"], "worker")
    t.check(rows and rows[0][2] == "stop-the-world",
            "gc: the allocating threads' largest wait is the collector's "
            "stop-the-world (%s)" % (rows[0][2] if rows else None),
            p.stdout[-3000:])


def test_sampled(t, r):
    """--wait-freq: a program switching more than 5,000 times a second
    has its switches' stacks sampled while it does (each weighing the
    switches it stands for), its threads' times still whole."""
    prog = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "switch_prog.py")
    with open(prog) as f:
        text = f.read()
    p, out = r.run("sampled", text, args=["20000", "450"],
                   opts=("--wall", "--wait-freq", "200"))
    t.check(p.returncode == 0, "sampled: record --wall --wait-freq 200 "
            "exits 0", p.stderr[-1500:])
    fast = [l for l in p.stderr.splitlines()
            if l.startswith("jitring record: --wait, ") and
            "sampled while it does, about 200 a second" in l]
    late = re.search(r"^\(the program switched \d+ times a second "
                     r".*no whole window", p.stdout, re.M)
    if not fast:
        # A loaded machine may slow the ping-pong below the rate.
        t.skip_part("sampled", "the program never switched 5,000 times a "
                    "second here: %s" % p.stderr[-300:])
    elif late:
        # perf, starved on a loaded machine, took the change to sampled
        # stacks only as the program ended: said so, nothing sampled.
        t.skip_part("sampled", "no whole window sampled here: %s"
                    % late.group(0))
    else:
        # Every switch's stack until record saw the rate, then about
        # 200 a second a thread for half a second at least: fewer stacks
        # than switches (how many fewer, the machine's load says).
        m = re.search(r"^(\d+) context switches of \d+ threads? over "
                      r"[\d.]+ s of thread time.*\n\((\d+) of them "
                      r"sampled with their stack", p.stdout, re.M)
        t.check(m and 0 < int(m.group(2)) < int(m.group(1)),
                "sampled: fewer stacks than switches (%s)"
                % (m and m.group(0).replace("\n", " ")), p.stdout[-3000:])
        t.check(re.search(r"^\(for [\d.]+ s of the program, switching "
                          r"\d+ times a second", p.stdout, re.M),
                "sampled: a note says for how long the stacks were "
                "sampled", p.stdout[-3000:])
    got = wall_lines(p.stdout).get("echo")
    t.check(got, "sampled: --wall has a line for the echo thread",
            p.stdout[-3000:])
    if got:
        life, cpu, reasons = got
        whole = cpu + sum(reasons.values())
        t.check(abs(whole - life) <= 0.05 * life,
                "sampled: the echo thread's CPU %.3f s and sampled waits "
                "%.3f s make its life %.3f s within 5%%"
                % (cpu, whole - cpu, life), got)
        # Its switches after its last sample have no stack to name.
        named_ = {k: v for k, v in reasons.items()
                  if k != "no sampled stack"}
        t.check(named_ and max(named_, key=named_.get) == "I/O (read)",
                "sampled: the echo thread's largest named wait is its "
                "pipe's read", reasons)
    echo = named(tables(p.stdout)["self"], "echo")
    t.check(echo and echo[0][2] == "I/O (read)",
            "sampled: echo's wait is named I/O (read)", echo)


# Eight threads yield (a context switch each where more threads than CPUs
# are runnable: tens to hundreds of thousands a second) until perf says
# it stopped at its cap (its log, in the folder given), or 300 s.
BUDGETED = textwrap.dedent("""
    import os, sys, threading, time
    log = os.path.join(sys.argv[1], "perf-record.log")
    stop = False
    go = threading.Barrier(9)
    def spin():
        go.wait()
        while not stop:
            os.sched_yield()
    ts = [threading.Thread(target=spin) for _ in range(8)]
    for t in ts:
        t.start()
    go.wait()               # all eight recorded before perf can stop
    end = time.monotonic() + 300
    while time.monotonic() < end:
        with open(log, errors="replace") as f:
            if "perf size limit reached" in f.read():
                break
        time.sleep(0.01)
    stop = True
    for t in ts:
        t.join()
""")


def folder_bytes(path):
    """The bytes the folder's files take on the disk."""
    return sum(os.lstat(os.path.join(path, n)).st_blocks * 512
               for n in os.listdir(path))


def test_budget(t, r):
    """--wait-budget: a program switching as fast as Python can (eight
    threads yielding on fewer CPUs) fills a small budget: the folder
    stays inside it, stderr and the tables say how the stacks were cut
    (stopped at half the budget, or sampled) and when perf stopped, and
    each thread's CPU and waits (those with no sampled stack included)
    still make its life."""
    budget = 64
    out = r.out("budget")
    p, _ = r.run("budget", BUDGETED, args=[out],
                 opts=("--wall", "--wait-budget", "%dM" % budget))
    t.check(p.returncode == 0, "budget: record --wall --wait-budget "
            "exits 0", p.stderr[-1500:])
    size = folder_bytes(out) if os.path.isdir(out) else None
    t.check(size is not None and size <= budget << 20,
            "budget: the folder takes %s bytes, at most %d MB"
            % (size, budget))
    err = [l for l in p.stderr.splitlines()
           if l.startswith("jitring record: --wait, ")]
    # The watch stops the stacks at half the cap, or, where the flood of
    # the program's first instants (every switch's stack until the watch
    # reads its rate) reaches the cap first on a loaded machine, it has
    # sampled them by then: either way it says what it did before perf
    # stopped.
    t.check(err and "perf stopped recording" in err[-1] and
            "(perf stopped recording " in p.stdout,
            "budget: stderr and the notes say perf stopped at the cap, "
            "last", p.stderr[-1500:] + p.stdout[-1500:])
    # Where the watch ran before the cap (not on a starved machine, where
    # the flood of the first instants fills it at once) it said how.
    cut = [l for l in err[:-1]
           if "no more stacks of context switches" in l or
           "the stacks of its switches are sampled" in l]
    if len(err) > 1:
        t.check(cut, "budget: stderr says how the stacks were cut before "
                "perf stopped", p.stderr[-1500:])
    rows = []
    wall_lines(p.stdout, rows)
    spins = [r[1:] for r in rows if r[0] == "spin"]
    t.check(len(spins) == 8, "budget: --wall has a line for each of the "
            "8 spinning threads (%d)" % len(spins), p.stdout[-3000:])
    for life, cpu, reasons in spins:
        whole = cpu + sum(reasons.values())
        if abs(whole - life) > 0.05 * life + 0.002:
            t.check(False, "budget: a thread's CPU %.3f s and waits %.3f "
                    "s make its life %.3f s within 5%%"
                    % (cpu, whole - cpu, life), reasons)
            break
    else:
        t.check(spins, "budget: each thread's CPU and waits make its "
                "life within 5%")


ATTACHED = textwrap.dedent("""
    import threading, time
    go = threading.Barrier(3)
    def wait_loop():
        go.wait()
        while True:
            time.sleep(0.002)
    for _ in range(2):
        threading.Thread(target=wait_loop, daemon=True).start()
    go.wait()
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
""")


def test_attached(t, r):
    """record --pid --wait: a service's threads in a loop entered before
    the window (no trampoline frame of it in their stacks) have their
    waits named by that loop, as its CPU samples are."""
    prog = r.script("attached.py", ATTACHED)
    env = dict(r.env)
    if sys.version_info < (3, 14):
        env["JITRING_PROFILE"] = "standby"
        # A free-threaded 3.13 reads other threads' frames only where
        # the service asks for it (jitring._running.frames_readable()).
        env["JITRING_RUNNING_FRAMES"] = "1"
    svc = subprocess.Popen([r.py, prog], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env, text=True)
    try:
        ready = svc.stdout.readline().strip() == "ready"
        out = os.path.join(t.scratch, "attached")
        p = subprocess.run([r.py, "-m", "jitring", "record", "-o", out,
                            "--pid", str(svc.pid), "--duration", "1.5",
                            "--wait", "--top", "40"],
                           capture_output=True, text=True, env=r.env,
                           timeout=300)
    finally:
        svc.kill()
        _, err = svc.communicate()
    t.check(ready and p.returncode == 0, "attached: record --pid --wait "
            "exits 0", (p.stderr[-1500:], err[-500:]))
    rows = tables(p.stdout)["self"]
    loop = named(rows, "wait_loop")
    bare = [row for row in rows if row[3] == "(no Python frame)"]
    t.check(rows and rows[0][3].startswith("wait_loop:") and
            loop[0][2] == "sleep",
            "attached: the loop running since before the window leads "
            "the waits, as sleep (%s)" % (loop[:1],), p.stdout[-3000:])
    t.check(sum(row[0] for row in bare) * 10 <=
            sum(row[0] for row in rows),
            "attached: a tenth of the waits or less without a Python "
            "frame (%s)" % bare, rows)
    # perf is on before the service starts jitring: the samples until
    # then name no function, and the window starts at the start.
    try:
        with open(os.path.join(out, "jitring-record.json")) as f:
            on = json.load(f).get("window_on_ns")
    except (OSError, ValueError):
        on = None
    t.check(type(on) is int and on > 0, "attached: the recording holds "
            "the service's clock at its start of jitring (%r)" % on)
    from jitring.profile.window import in_window
    samples = [(1, "c", (), 1, ns, "cpu-clock") for ns in (5, 9, 10, 11)]
    kept, early = in_window(samples, {"attached": True,
                                              "window_on_ns": 10})
    t.check([s[4] for s in kept] == [10, 11] and early == 2 and
            in_window(samples, {"window_on_ns": 10}) ==
            (samples, 0),
            "attached: the samples before it are left out, and counted; "
            "none where record ran the program", (kept, early))


def test_io(t, r):
    p, out = r.run("io", IO)
    t.check(p.returncode == 0, "io: record --wait exits 0",
            p.stderr[-1500:])
    rows = tables(p.stdout)["self"]
    for fn, why in (("reader", "I/O (recv)"), ("writer", "sleep")):
        got = named(rows, fn)
        t.check(got and got[0][2] == why, "io: %s waits on %s (%s)"
                % (fn, why, got[0][2] if got else None), rows)
    t.check(any(row[2] == "child wait" for row in rows),
            "io: the main thread's wait for its child is a child wait",
            rows)


def test_executor(t, r):
    """A ThreadPoolExecutor's workers idle between jobs submitted 20 ms
    apart, beside a thread consuming a queue.SimpleQueue: the workers'
    _worker waits as "executor idle", the consumer as
    "queue.SimpleQueue.get", each its function's largest reason.  The
    jobs are short and the consumer does none, so that on a GIL build
    waiting for the GIL stays smaller than the waits named, also on a
    loaded machine (the consumer doing a job of 20,000 beside four
    workers waited for the GIL more than for its queue at load 4)."""
    text = textwrap.dedent("""
        import queue, threading, time
        from concurrent.futures import ThreadPoolExecutor

        def job(n):
            return sum(range(n))

        def consume(q):
            while q.get() is not None:
                pass

        q = queue.SimpleQueue()
        c = threading.Thread(target=consume, args=(q,))
        c.start()
        with ThreadPoolExecutor(4) as ex:
            for _ in range(25):
                ex.submit(job, 2000)
                q.put(1)
                time.sleep(0.02)
        q.put(None)
        c.join()
    """)
    p, out = r.run("executor", text)
    t.check(p.returncode == 0, "executor: record --wait exits 0",
            p.stderr[-1500:])
    rows = tables(p.stdout)["self"]
    for fn, why in (("_worker", "executor idle"),
                    ("consume", "queue.SimpleQueue.get")):
        got = named(rows, fn)
        t.check(got and got[0][2] == why, "executor: %s waits as %s (%s)"
                % (fn, why, got[0][2] if got else None), rows)
    with open(os.path.join(out, "stacks-wait.folded")) as f:
        folded = f.read()
    t.check(re.search(r"py::_worker:[^;]*concurrent/futures/thread\.py;"
                      r"\[wait: executor idle\];", folded),
            "stacks-wait.folded: [wait: executor idle] under _worker")


def test_reasons(t, r):
    from jitring.wait.reasons import reason

    def k(*names):
        return [(n, "[kernel.kallsyms]") for n in names]

    def u(*names):
        return [(n, "/usr/bin/python3") for n in names]
    py = [("py::f:/x.py", ""), ("py::<module>:/x.py", "")]
    futex = k("schedule", "futex_wait", "__x64_sys_futex",
              "do_syscall_64") + [("__futex_abstimed_wait_common",
                                   "/lib/libc.so.6"),
                                  ("pthread_cond_timedwait@@GLIBC_2.3.2",
                                   "/lib/libc.so.6")]
    cases = [
        ("the GIL", futex + u("take_gil", "PyEval_RestoreThread",
                              "time_sleep"), False, "GIL"),
        ("the GIL's mutex", futex[:-2] + [
            ("__pthread_mutex_cond_lock", "/lib/libc.so.6"),
            ("pthread_cond_timedwait@@GLIBC_2.3.2", "/lib/libc.so.6")] +
         u("take_gil", "_PyEval_EvalFrameDefault"), False, "GIL"),
        ("a stop-the-world pause", futex + u(
            "_PySemaphore_Wait", "_PyParkingLot_Park", "tstate_wait_attach",
            "_PyThreadState_Attach"), False, "stop-the-world"),
        ("a collection's pause", futex + u(
            "_PySemaphore_Wait", "stop_the_world", "_PyEval_StopTheWorld",
            "gc_collect_main.constprop.0"), False, "stop-the-world (gc)"),
        ("a page fault", k("schedule", "io_schedule", "filemap_fault",
                           "handle_mm_fault", "exc_page_fault",
                           "asm_exc_page_fault") + u("memcpy"), False,
         "page fault"),
        ("a yield in a PyMutex", k("schedule", "__x64_sys_sched_yield") +
         [("__sched_yield", "/lib/libc.so.6")] + u(
             "PyMutex_Lock", "_PyCriticalSection_BeginSlow", "list_append"),
         True, "per-object lock"),
        ("a preemption", k("schedule", "irqentry_exit_to_user_mode") +
         u("list_append"), True, "preempted"),
        ("stripped code", futex[:-1] + [("[unknown]", "/usr/bin/python3")]
         * 3, False, "unnamed native (futex)"),
        # The GIL of Debian's stripped python3.14: only the GIL waits on a
        # condition variable in a GIL build's interpreter.
        ("a stripped GIL build's condition variable", futex + [
            ("[unknown]", "/usr/bin/python3.14")] * 3, False, "GIL"),
        ("the same under the eval breaker", futex + [
            ("[unknown]", "/usr/bin/python3.14"),
            ("_Py_HandlePending", "/usr/bin/python3.14")], False, "GIL"),
        ("a stripped free-threaded build's condition variable", futex + [
            ("[unknown]", "/usr/bin/python3.13t")] * 3, False,
         "unnamed native (futex)"),
        ("a condition variable of a library", futex + [
            ("[unknown]", "/usr/lib/libfoo.so")] + [
            ("[unknown]", "/usr/bin/python3.14")], False,
         "unnamed native (futex)"),
        ("a PyMutex elsewhere", futex + u(
            "_PySemaphore_Wait", "_PyParkingLot_Park", "_PyMutex_LockTimed",
            "_PyType_Lookup"), False, "PyMutex (in _PyType_Lookup)"),
        ("waitpid", k("schedule", "do_wait", "kernel_wait4",
                      "__x64_sys_wait4") + u("os_waitpid_impl"), False,
         "child wait"),
        ("epoll", k("schedule", "ep_poll", "do_epoll_wait",
                    "__x64_sys_epoll_wait") + u("select_epoll_poll_impl"),
         False, "I/O (epoll)"),
        ("an unknown syscall", k("schedule", "do_sigtimedwait",
                                 "__x64_sys_rt_sigtimedwait") +
         u("signal_sigtimedwait"), False, "other (rt_sigtimedwait syscall)"),
    ]
    for what, frames, preempt, want in cases:
        got = reason(frames + py, preempt)
        t.check(got == want, "reasons: %s: %s" % (what, want), got)
    got = reason(futex + u("lock_PyThread_acquire_lock") +
                       [("py::Condition.wait:/lib/threading.py", ""),
                        ("py::Event.wait:/lib/threading.py", ""),
                        ("py::main:/x.py", "")], False)
    t.check(got == "threading.Event", "reasons: Event.wait, through "
            "Condition.wait's lock: threading.Event", got)


def test_refused(t, r):
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except (OSError, ValueError):
        paranoid = None
    if paranoid is None or paranoid <= 1:
        t.skip_part("refused", "perf_event_paranoid is %s: --wait works "
                    "for every user" % paranoid)
        return
    probe = subprocess.run(["unshare", "--user", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        t.skip_part("refused", "no unprivileged user namespace here")
        return
    mark = os.path.join(t.scratch, "ran")
    text = "open(%r, 'w').close()\n" % mark
    p, out = r.run("refused", text, prefix=["unshare", "--user"])
    err = [l for l in p.stderr.splitlines() if l.strip()]
    t.check(p.returncode == 2 and len(err) == 1 and
            "perf_event_paranoid=%d" % paranoid in err[0] and
            "sysctl" in err[0],
            "refused: exit 2, one line naming the paranoid level and the "
            "fix", (p.returncode, p.stderr[-800:]))
    t.check(not os.path.exists(mark) and not os.path.exists(out),
            "refused: the program never ran, no folder made")
    from jitring.wait.setup import refusal
    t.check(refusal(1, False) is None and
            refusal(2, True) is None and
            refusal(2, False) is not None,
            "refused: only above 1 and without privilege")


def fixture(t):
    py, env = jrtest.record_python(t)
    return (Rec(t, py, env),)


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
