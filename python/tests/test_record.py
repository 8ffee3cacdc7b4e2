# SPDX-License-Identifier: MIT
"""python -m jitring record, report and check, end to end through real perf.

record runs from a venv whose .pth carries the package's autostart hook
(jrtest.hook_venv), so child processes get jitring as from an installed
wheel.

 1. the whole tree: a program that starts a spawn pool, a subprocess and
    an os.fork child: each child's hot function is in the table, under
    its own process in stacks.folded, every dump is valid, and the
    summary has a line per process with its command; --no-children
    profiles the top process only; the program's exit status (3) is
    record's;
 2. signals: SIGINT to the process group while the program runs (it
    handles KeyboardInterrupt and exits 5), SIGTERM to record alone (143),
    timeout -s TERM: each finishes the profile, and no perf or program
    process outlives record; a SIGINT while the recording is finished
    stops that (in perf script, every parallel slice of it; with
    --memfd-trampolines in perf inject), keeps perf.data and the dumps,
    names the command that finishes them, and `report DIR` does;
 3. record -m module; the program's stdout and stderr (a traceback)
    reach record's; a
    script or module that does not exist gets python's own message and
    status, and no recording;
 4. the tables: functions hot through a shared helper lead the total
    view; jitring's own frames (its runner, runpy, its at-exit stop) are
    in no table and no stack;
 5. flame.html is written and holds the hot functions (the page in a
    browser: test_flame.py);
 6. -e task-clock samples that event; an event perf does not have is a
    message and exit 2, and the program never runs;
 7. usage errors exit 2 with the usage line; -o refuses a folder of the
    user's unless --force (and leaves its files), reuses an earlier
    recording's; default names never collide; an unusable folder, a
    missing perf and a refused perf record are one message and exit 2;
 8. check: 0 for a recording's dump, non-zero for a damaged copy;
 9. scale: an 8-thread program's recording (--memfd-trampolines: the
    perf inject route) finished both ways
    from one perf.data, perf inject given the reached functions only
    (the default) and the whole dumps (report --inject full): the same
    stacks, far fewer jitted images, the full dumps back after;
10. reuse: a function's trampoline copy reused by a later function (the
    dump shows both at one address): each is named in the profile with
    its own share (in fp mode too, where the interpreter picks it);
    perf.jit.data (or in fp mode perf.data) alone, no perf.script.txt;
11. fp: where the interpreter keeps frame pointers (Debian sid's 3.15,
    through wheel_test.sh), record picks --call-graph fp: no inject, no
    stack copies, the trampolines named, the same top functions and
    shares within 3 points as --call-graph dwarf on the same work (a
    second pair of runs where a loaded machine's first differs more);
    skipped elsewhere (scripts/build-python.sh --fp builds a 3.13t with
    frame pointers);
13. elf: dwarf mode's default, the trampolines an ELF file perf unwinds
    through, finished with no perf inject (no perf.jit.data, no jitted
    image, no inject log), against --memfd-trampolines (perf inject) on
    the same 60-frame program: the same Python functions over 1% of the
    program's samples, their shares within 3 points, <module> the root
    of as many samples; the
    folder moved, report finishes it again alike (the ELF file's mmap
    is read relative to the folder); a child on the memfd image
    (JITRING_TRAMPOLINE_ELF=0): the recording is injected, and both
    processes' functions named;
12. deep: a recursive-descent parser 60 Python frames deep: in dwarf
    mode its <module> holds every sample of the program's functions (the
    32 KiB stack copy, perf script reading every frame); with 8 KiB copies,
    and in fp mode past perf's 127-frame limit, the cut stacks sit under
    a frame of their own, <module> and those together hold every sample,
    and the note after the tables gives their share and the remedy; of
    the program's execs (one, or two through sid's wrapper) all but the
    first need jitring.perf.execfix's wipe: a program that starts no process
    keeps its perf.data as perf wrote it;
14. live: perf.data read in segments while the program runs (100
    samples a segment; the program goes on once the second segment's
    file is there, then runs an exec'd child): one segment or more
    read, no segment file left, both processes' functions in the
    tables, and `report` of the whole file prints the same tables and
    writes the same stacks.folded, byte for byte; the same where the
    first segment's perf script fails (a perf wrapper on PATH): no
    segment used, the reason in jitring-record.json; in fp mode too
    where the interpreter keeps frame pointers.  live_abandoned: a
    reader still at work when the program ends (a stand-in perf script
    that never ends): record ends it and its perf script and reads its
    stretch with the rest, exit 0, the same profile as report's, no
    segment file or reader left.  live_segments:
    the reading driven by hand on perf.data written again a piece at a
    time (the feature sections before the header's end): the samples
    the whole file gives, each once.
15. inherited: every event perf opens on the program's task is
    inherited (`perf record -vv` through a perf wrapper on PATH), so
    its threads' perf contexts are clones and a switch between them
    takes the kernel's cheap path (perf's BPF side-band event, opened
    on the task without inheritance where record runs with the right to
    it, made contended free-threaded code 2-4x slower).
16. tables: the tables add up: the samples with no Python frame on a
    line of their own, the self column and it 100 %; a script given by
    its absolute path from another folder named relative to its
    folder; a child started through the dynamic loader named by its
    Python command line.  names: the file names of synthetic
    recordings.
17. max_stack (root): --max-stack N raises kernel.perf_event_max_stack
    for the recording (the program sees N), the old value back after,
    also after record's SIGKILL, with no process of record's left; the
    60-frame program's stacks whole in fp mode; refused in one line as
    another user (unshare --user) and while another perf session
    records call chains (other tests' perf: then tried again).
The cases, each run by name (test_record.py tree): tree (1, 4, 5 and
8), signals and interrupted (2), output (3), event (6), cli (7; over
event's recording where that case ran), scale (9), reuse (10), deep
(12), elf (13), fp (11), live, live_abandoned and live_segments
(14), inherited (15), tables and names (16), max_stack (17); whatever
ran, nothing is written to ~/.debug.
Skips (77) where perf cannot record here.
"""

import difflib
import os
import select
import signal
import subprocess
import textwrap
import time

import jrtest
from jrtest import perf_usable  # noqa: F401 (test_attach's)

# Each hot function runs until its thread has run its share of CPU time
# (0.1 s: about 100 samples at 999 Hz), not a count of loops: the
# samples are as many on a fast machine as on a slow or loaded one.
TREE = textwrap.dedent("""
    import multiprocessing as mp, os, subprocess, sys, time

    def helper(seconds):
        end = time.thread_time() + seconds
        s = 0
        while time.thread_time() < end:
            for i in range(10000):
                s ^= i * 3
        return s

    def hot_a():
        return helper(0.1)

    def hot_b():
        return helper(0.1)

    def pool_fn(seconds):
        end = time.thread_time() + seconds
        s = 0
        while time.thread_time() < end:
            for i in range(10000):
                s += i * i
        return s

    def fork_fn():
        end = time.thread_time() + 0.1
        s = 0
        while time.thread_time() < end:
            for i in range(10000):
                s += i
        return s

    SUB = ("import time\\n"
           "def sub_fn():\\n"
           "    end = time.thread_time() + 0.1\\n"
           "    s = 0\\n"
           "    while time.thread_time() < end:\\n"
           "        for i in range(10000):\\n"
           "            s -= i\\n"
           "sub_fn()\\n")

    if __name__ == "__main__":
        print("tree-stdout", flush=True)
        sys.stderr.write("tree-stderr\\n")
        hot_a()
        hot_b()
        with mp.get_context("spawn").Pool(2) as p:
            p.map(pool_fn, [0.1, 0.1])
        subprocess.run([sys.executable, "-c", SUB], check=True)
        pid = os.fork()
        if pid == 0:
            fork_fn()
            os._exit(0)
        os.waitpid(pid, 0)
        sys.exit(3)
""")

# The main thread sleeps in short steps: free-threaded 3.13.5's
# threading.Event().wait() misses a SIGINT that comes just before it parks
# (6 of 10 plain runs hung here), which is CPython's, not record's.
LONG = textwrap.dedent("""
    import sys, threading, time
    # "ready" once spin_long has spun a while: on a loaded machine its
    # samples then still outnumber start-up's in the tables.
    spun = threading.Event()
    def spin_long():
        s = n = 0
        while True:
            for i in range(100000):
                s += i
            n += 1
            if n == 30:
                spun.set()
    threading.Thread(target=spin_long, daemon=True).start()
    spun.wait()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(5)
""")

SHORT = textwrap.dedent("""
    import os, sys
    def spin_short(n):
        s = 0
        for i in range(n):
            s += i
        return s
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").close()
    spin_short(3000000)
""")


# The 8-thread CPU-bound job: perf_prog.py (worker calls hot_a or hot_b).
PERF_PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "perf_prog.py")

# Two functions, one after the other, the second made once the first's
# code is freed: jitring gives a new function the copy of a freed one.
# The functions are taken from compiled code without running a module (a
# module's code would get a copy of its own).  Which freed copy a new
# function gets is the module's choice (3.13t: the last freed; 3.15 may
# hand out an older one first), so the program makes second_fn until one
# has first_fn's address (read back from its own dump) and makes that one
# hot; the others stay alive, so their copies are not handed out again.
# Each of the two hot calls runs until its thread has run argv[1] seconds
# of CPU: the same CPU time each, so the same share, whatever the load.
REUSE = textwrap.dedent("""
    import gc, os, struct, sys, time, types
    import jitring

    def make(name):
        src = ("def %s(seconds):\\n"
               "    end = thread_time() + seconds\\n    s = 0\\n"
               "    while thread_time() < end:\\n"
               "        for i in range(10000):\\n"
               "            s ^= i * 7\\n    return s\\n" % name)
        mod = compile(src, "<reuse>", "exec")
        code = [c for c in mod.co_consts if isinstance(c, types.CodeType)]
        return types.FunctionType(code[0], {"thread_time": time.thread_time})

    def addrs(name):
        jitring.flush()
        path = os.path.join(os.environ["JITRING_DIR"],
                            "jit-%d.dump" % os.getpid())
        with open(path, "rb") as f:
            data = f.read()
        off, got, want = 40, [], ("py::%s:" % name).encode()
        while off + 16 <= len(data):
            rid, size = struct.unpack_from("<II", data, off)
            if size < 16 or off + size > len(data):
                break
            if rid == 0 and data.startswith(want, off + 56):
                got.append(struct.unpack_from("<Q", data, off + 32)[0])
            off += size
        return got

    n = float(sys.argv[1])
    f = make("first_fn")
    f(n)
    first = addrs("first_fn")[-1]   # addrs has its copy before f is freed
    del f
    gc.collect()
    keep = []
    for _ in range(5000):
        g = make("second_fn")
        g(0)
        if addrs("second_fn")[-1] == first:
            break
        keep.append(g)
    else:
        sys.exit("no new function got first_fn's copy")
    g(n)
""")


def fake_tool(t, name, body, tool="perf"):
    """A folder for PATH whose @tool is the shell script @body."""
    d = os.path.join(t.scratch, name)
    os.mkdir(d)
    with open(os.path.join(d, tool), "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(os.path.join(d, tool), 0o755)
    return d


class Rec:
    """record as a user runs it, and what one case leaves another: the
    event case's recording (earlier), which the cli case records over."""

    def __init__(self, t, py, env):
        self.t, self.py, self.env = t, py, env
        self.earlier = None

    def script(self, name, text):
        path = os.path.join(self.t.scratch, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def out(self, name):
        return os.path.join(self.t.scratch, name)

    def keeps_fp(self):
        """Whether the interpreter under test keeps frame pointers
        (record's fp mode works there)."""
        p = subprocess.run([self.py, "-c", "import jitring.record.perf as m; "
                            "print(m.keeps_frame_pointers())"],
                           capture_output=True, text=True, env=self.env)
        return p.stdout.strip() == "True"

    def argv(self, args):
        return [self.py, "-m", "jitring"] + args

    def run(self, args, env=None, timeout=300, cwd=None):
        return subprocess.run(self.argv(args), capture_output=True,
                              text=True, env=env or self.env,
                              cwd=cwd or self.t.scratch, timeout=timeout)

    def start(self, args, env=None):
        """record in a session of its own (its process group is its pid,
        as a shell's job's is), its output on pipes."""
        return subprocess.Popen(self.argv(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=env or self.env, cwd=self.t.scratch,
                                start_new_session=True)


def sections(out):
    """{'total': [...], 'self': [...]}: the function names of each table,
    in order."""
    tabs, cur = {"total": [], "self": []}, None
    for line in out.splitlines():
        if line.startswith("Hottest Python functions by total"):
            cur = "total"
        elif line.startswith("By self"):
            cur = "self"
        elif not line.strip():
            cur = None if cur and tabs[cur] else cur
        elif cur:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%"):
                tabs[cur].append(parts[2])
    return tabs


def procs_table(out):
    """[(pid, share, command)] of the per-process lines."""
    rows, on = [], False
    for line in out.splitlines():
        if line.split()[:3] == ["pid", "samples", "command"]:
            on = True
        elif on and line.strip():
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].isdigit():
                rows.append((int(parts[0]), parts[1], parts[2]))
        elif on:
            break
    return rows


def has(rows, fn):
    return any(r.startswith(fn + ":") for r in rows)


def leftovers(out):
    """Processes whose command line names the recording's folder (perf
    and the program's runner do)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if out in cmd:
            found.append((int(d), cmd.replace("\0", " ")))
    return found


def test_tree(t, r):
    prog = r.script("tree.py", TREE)
    out = r.out("tree")
    p = r.run(["record", "-o", out, "--top", "40", "--", prog])
    t.check(p.returncode == 3, "the tree: record exits with the "
            "program's status (3)", p.stderr[-1500:])
    t.check("tree-stdout" in p.stdout and "tree-stderr" in p.stderr,
            "the program's stdout and stderr reach record's",
            p.stdout[:300] + p.stderr[:300])
    tabs = sections(p.stdout)
    for fn in ("hot_a", "hot_b", "helper", "pool_fn", "sub_fn",
               "fork_fn"):
        t.check(has(tabs["total"], fn), "the tree: %s in the total table"
                % fn, p.stdout[-3000:])
    for fn in ("hot_a", "hot_b"):
        t.check(not has(tabs["self"], fn), "%s is hot through its callee "
                "only: not in the self table" % fn, tabs["self"])
    t.check(has(tabs["self"], "helper"), "the shared helper leads by self",
            tabs["self"])
    rows = procs_table(p.stdout)
    cmds = [c for _, _, c in rows]
    top = [pid for pid, _, c in rows if c.endswith("tree.py")]
    t.check(len(top) == 1, "a line for the top process, its command "
            "without jitring's runner", cmds)
    t.check(top and any(c.endswith("(fork of %d)" % top[0])
                        for c in cmds), "a line for the fork child", cmds)
    t.check(sum("multiprocessing" in c for c in cmds) >= 2,
            "lines for the spawn pool's workers", cmds)
    t.check(any(" -c " in c for c in cmds), "a line for the subprocess",
            cmds)
    own = ("jitring/__main__.py", "jitring/__init__.py", "runpy")
    for f in ("stacks.folded",):
        with open(os.path.join(out, f)) as fh:
            text = fh.read()
        t.check(not any(o in text for o in own), "no jitring frame in " + f)
        lines = text.splitlines()
        t.check(any(l.split(";")[0].startswith("python") and
                    "multiprocessing" in l.split(";")[0] and
                    "py::pool_fn:" in l for l in lines),
                "stacks.folded: pool_fn under a pool worker's process")
    t.check(not any(o in row for row in tabs["total"] + tabs["self"]
                    for o in own), "no jitring frame in the tables")
    # perf unwinds the processes that exec'd (jitring.perf.execfix): most of
    # each child's samples reach a Python frame.
    per, py = {}, {}
    for l in lines:
        frames, n = l.rsplit(" ", 1)
        proc = frames.split(";")[0]
        per[proc] = per.get(proc, 0) + int(n)
        if "py::" in frames:
            py[proc] = py.get(proc, 0) + int(n)
    # Of those with samples enough for a share: a pool worker that got
    # no task may have few, the subprocess runs sub_fn's 0.1 s of CPU.
    kids = [p for p in per if "multiprocessing.spawn" in p or "sub_fn" in p]
    big = [p for p in kids if per[p] >= 20]
    t.check(any("sub_fn" in p for p in big) and
            all(py.get(p, 0) >= 0.25 * per[p] for p in big),
            "each exec'd child: most samples reach a Python frame",
            {p: (py.get(p, 0), per[p]) for p in kids})
    dumps = jrtest.dumps(out)
    t.check(len(dumps) >= 5, "a dump per Python process (%d)" % len(dumps))
    bad = [d for d in dumps if not jrtest.check_dump(d)[0]]
    t.check(not bad, "every dump valid", bad)
    with open(os.path.join(out, "flame.html"), errors="replace") as fh:
        html = fh.read()
    t.check("hot_a" in html and "pool_fn" in html,
            "flame.html holds the hot functions")

    p = r.run(["record", "-o", r.out("top-only"), "--no-children",
               "--top", "40", "--", prog])
    tabs = sections(p.stdout)
    t.check(p.returncode == 3 and has(tabs["total"], "hot_a") and
            not has(tabs["total"], "pool_fn") and
            not has(tabs["total"], "sub_fn") and
            len(procs_table(p.stdout)) == 1,
            "--no-children: the top process only", p.stdout[-2000:])
    if dumps:
        check_cmd(t, r, dumps[0])


def wait_line(p, want, timeout=120):
    """Read p's stdout until a line @want (True) or its end (False)."""
    fd = p.stdout.fileno()
    buf = b""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        rd, _, _ = select.select([fd], [], [], left)
        if not rd:
            return False
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        buf += chunk
        if (want + "\n").encode() in buf:
            return True


def dump_names(out, name, timeout=60):
    """Whether a dump in @out comes to hold @name (the flusher writes
    within milliseconds; SIGTERM's default action kills the program
    without a flush, so the test waits for it before the signal)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for d in jrtest.dumps(out):
            with open(d, "rb") as f:
                if name in f.read():
                    return True
        time.sleep(0.05)
    return False


def test_signals(t, r):
    prog = r.script("long.py", LONG)
    cases = [("SIGINT to the process group", "sigint", 5),
             ("SIGTERM to record alone", "sigterm", 128 + signal.SIGTERM)]
    for what, name, want in cases:
        out = r.out(name)
        p = r.start(["record", "-o", out, "--", prog])
        if not t.check(wait_line(p, "ready") and
                       dump_names(out, b"spin_long"),
                       what + ": the program runs, spin_long in its dump"):
            p.kill()
            p.communicate()
            continue
        if name == "sigint":
            os.killpg(p.pid, signal.SIGINT)
        else:
            os.kill(p.pid, signal.SIGTERM)
        so, se = p.communicate(timeout=300)
        t.check(p.returncode == want, "%s: record exits %d" % (what, want),
                "%s %s" % (p.returncode, se[-800:]))
        if name == "sigint":
            t.check("interrupted" in so, what + ": the program handled "
                    "its KeyboardInterrupt")
        t.check(has(sections(so)["total"], "spin_long") and
                os.path.exists(os.path.join(out, "flame.html")),
                what + ": the profile is finished", so[-1500:])
        t.check(not leftovers(out), what + ": no perf or program process "
                "left", leftovers(out))

    # timeout(1)'s timer ends with a SIGALRM to it: sent once the program
    # runs, it is the time running out at a known point, whatever the
    # machine's load (its own 600 s never come).
    out = r.out("timeout")
    p = subprocess.Popen(["timeout", "-s", "TERM", "600"] +
                         r.argv(["record", "-o", out, "--", prog]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=r.env, cwd=r.t.scratch)
    ran = wait_line(p, "ready") and dump_names(out, b"spin_long")
    if ran:
        p.send_signal(signal.SIGALRM)
    else:
        try:
            os.killpg(p.pid, signal.SIGKILL)    # timeout's own group
        except OSError:
            p.kill()
    so, se = p.communicate(timeout=300)
    p = subprocess.CompletedProcess(p.args, p.returncode, so, se)
    t.check(ran and p.returncode == 124 and
            os.path.exists(os.path.join(out, "flame.html")) and
            "samples of cpu-clock" in p.stdout,
            "timeout -s TERM: the profile is finished",
            "%d %s %s" % (p.returncode, p.stdout[-600:], p.stderr[-600:]))
    t.check(not leftovers(out), "timeout: no perf or program process left",
            leftovers(out))


def sleeping(n):
    """The pids of the processes `sleep N` (a stand-in's wait)."""
    want = b"sleep\x00%d\x00" % n
    found = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if f.read() == want:
                    found.append(d)
        except OSError:
            pass
    return found


def test_interrupted(t, r):
    """A stand-in perf whose finishing step (perf script of a recording
    through the trampolines' ELF files, each of its parallel slices; perf
    inject with --memfd-trampolines) says so on a FIFO and then waits to
    be stopped: SIGINT then, as a second Ctrl-C would."""
    for step, opts in (("script", []),
                       ("inject", ["--memfd-trampolines"])):
        interrupted_at(t, r, step, opts)


def interrupted_at(t, r, step, opts):
    import shutil
    real = shutil.which("perf")
    fifo = os.path.join(t.scratch, step + ".fifo")
    os.mkfifo(fifo)
    fake = fake_tool(t, "slow" + step,
                     "for a; do [ \"$a\" = %s ] && { echo %s > "
                     "%s; exec sleep 617; }; done\n"
                     "exec %s \"$@\"\n" % (step, step, fifo, real))
    # Slices of a sample each: every slice waits, and all are stopped.
    env = dict(r.env, PATH=fake + os.pathsep + r.env.get("PATH", ""),
               JITRING_PY_TEST_SLICE_MIN="1")
    prog = r.script("short.py", SHORT)
    out = r.out("interrupted-" + step)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    p = r.start(["record", "-o", out] + opts + ["--", prog], env=env)
    rd, _, _ = select.select([fd], [], [], 240)
    if not t.check(rd, "the recording reached perf %s" % step):
        p.kill()
        p.communicate()
        return
    os.killpg(p.pid, signal.SIGINT)
    so, se = p.communicate(timeout=120)
    os.close(fd)
    t.check(p.returncode == 128 + signal.SIGINT,
            "a signal in perf %s: exit 130" % step, "%d %s"
            % (p.returncode, se[-500:]))
    t.check("jitring report %s" % out in se,
            "%s: it names the command that finishes the recording" % step,
            se[-500:])
    t.check(os.path.exists(os.path.join(out, "perf.data")) and
            jrtest.dumps(out) and
            not os.path.exists(os.path.join(out, "perf.jit.data")) and
            not [n for n in os.listdir(out)
                 if n.startswith(("perf.script.txt", "stacks.folded"))],
            "%s: perf.data and the dump kept, no partial output" % step,
            os.listdir(out))
    sleepers = sleeping(617)
    t.check(not sleepers, "%s: the interrupted step is stopped%s"
            % (step, " (every slice)" if step == "script" else ""),
            sleepers)
    p = r.run(["report", out])
    t.check(p.returncode == 0 and
            has(sections(p.stdout)["total"], "spin_short") and
            os.path.exists(os.path.join(out, "flame.html")),
            "%s: report DIR finishes it" % step,
            p.stdout[-800:] + p.stderr[-800:])


def test_output(t, r):
    mod = os.path.join(t.scratch, "pkgdir")
    os.mkdir(mod)
    with open(os.path.join(mod, "spinmod.py"), "w") as f:
        f.write(SHORT + "sys.exit(int(os.environ.get('SPIN_STATUS', 0)))\n")
    p = r.run(["record", "-o", r.out("module"), "-F", "499", "-m",
               "spinmod"], env=dict(r.env, SPIN_STATUS="4"), cwd=mod)
    t.check(p.returncode == 4 and
            has(sections(p.stdout)["total"], "spin_short"),
            "record -m module: its function, its status (4)",
            p.stdout[-800:] + p.stderr[-500:])
    prog = r.script("boom.py", "def boom():\n    raise ValueError("
                    "'boom-123')\nboom()\n")
    p = r.run(["record", "-o", r.out("boom"), "--", prog])
    t.check(p.returncode == 1 and "Traceback" in p.stderr and
            "ValueError: boom-123" in p.stderr,
            "an uncaught exception: its traceback on record's stderr, "
            "status 1", "%d %s" % (p.returncode, p.stderr[-800:]))
    for args, want, rc in (
            (["nosuch.py"], "can't open file", 2),
            (["-m", "nosuch_mod_zz"], "No module named nosuch_mod_zz", 1)):
        out = r.out("missing")
        p = r.run(["record", "-o", out, "--"] + args)
        t.check(p.returncode == rc and want in p.stderr and
                "record" not in p.stderr and not os.path.exists(out),
                "%s: python's message and status (%d), no recording"
                % (" ".join(args), rc),
                "%d %s" % (p.returncode, p.stderr[-500:]))


def test_event(t, r):
    prog = r.script("short.py", SHORT)
    out = r.out("task-clock")
    p = r.run(["record", "-o", out, "-e", "task-clock", "--", prog])
    t.check(p.returncode == 0 and "samples of task-clock" in p.stdout and
            has(sections(p.stdout)["total"], "spin_short"),
            "-e task-clock", p.stdout[-800:] + p.stderr[-800:])
    marker = os.path.join(t.scratch, "ran")
    p = r.run(["record", "-o", r.out("bad-event"), "-e",
               "no-such-event-zz", "--", prog, marker])
    t.check(p.returncode == 2 and "no-such-event-zz" in p.stderr and
            "Traceback" not in p.stderr and not os.path.exists(marker),
            "an unknown event: a message, exit 2, the program not run",
            "%d %s" % (p.returncode, p.stderr[-500:]))
    r.earlier = out


def test_cli(t, r):
    earlier = r.earlier
    if not earlier:
        t.skip_part("-o over an earlier recording, --browser",
                    "the event case's recording is not there")
    prog = r.script("short.py", SHORT)
    for args in (["record"], ["record", "--top", "x", prog],
                 ["record", "--bogus", prog], ["record", "-m"]):
        p = r.run(args)
        t.check(p.returncode == 2 and "usage:" in p.stderr and
                "Traceback" not in p.stderr,
                "usage error %s: the usage line, exit 2" % args[1:],
                "%d %s" % (p.returncode, p.stderr[-300:]))
    mine = r.out("mine")
    os.mkdir(mine)
    with open(os.path.join(mine, "notes.txt"), "w") as f:
        f.write("mine")
    p = r.run(["record", "-o", mine, "--", prog])
    t.check(p.returncode == 2 and "--force" in p.stderr and
            len(p.stderr.strip().splitlines()) == 1 and
            os.listdir(mine) == ["notes.txt"],
            "-o: a folder of the user's is refused, untouched",
            p.stderr[-300:])
    p = r.run(["record", "-o", mine, "--force", "--", prog])
    t.check(p.returncode == 0 and
            os.path.exists(os.path.join(mine, "notes.txt")) and
            os.path.exists(os.path.join(mine, "flame.html")),
            "--force: recorded, the user's file kept", p.stderr[-300:])
    if earlier:
        p = r.run(["record", "-o", earlier, "--", prog])
        t.check(p.returncode == 0 and "samples of cpu-clock" in p.stdout,
                "-o: an earlier recording is replaced", p.stderr[-300:])
    if earlier:
        # --browser: webbrowser runs $BROWSER with the page's URL.
        got = os.path.join(t.scratch, "opened")
        fake = fake_tool(t, "fakebrowser", "echo \"$1\" > %s\n" % got,
                         "browser")
        p = r.run(["report", "--browser", earlier],
                  env=dict(r.env, BROWSER=os.path.join(fake, "browser") +
                           " %s"))
        url = open(got).read().strip() if os.path.exists(got) else ""
        t.check(p.returncode == 0 and url == "file://" + os.path.join(
                earlier, "flame.html"), "--browser opens flame.html", url)
    plain = os.path.join(t.scratch, "a-file")
    with open(plain, "w") as f:
        f.write("x")
    p = r.run(["record", "-o", os.path.join(plain, "sub"), "--", prog])
    t.check(p.returncode == 2 and "Traceback" not in p.stderr and
            len(p.stderr.strip().splitlines()) == 1,
            "an unusable folder: one line, exit 2", p.stderr[-300:])
    names = os.path.join(t.scratch, "names")
    os.mkdir(names)
    p = subprocess.run([r.py, "-c",
                        "from jitring.record.out import default_out\n"
                        "print(default_out())\n"
                        "print(default_out())"],
                       capture_output=True, text=True, env=r.env,
                       cwd=names)
    got = p.stdout.split()
    t.check(len(got) == 2 and got[0] != got[1] and
            all(os.path.isdir(g) for g in got),
            "default folder names in the same second differ", got)

    nobin = os.path.join(t.scratch, "nobin")
    os.mkdir(nobin)
    os.symlink(r.py, os.path.join(nobin, "python3"))
    p = r.run(["record", "-o", r.out("r1"), "--", prog],
              env=dict(r.env, PATH=nobin))
    t.check(p.returncode == 2 and "perf not found" in p.stderr and
            "Traceback" not in p.stderr,
            "no perf: a message and exit 2", p.stderr[-300:])
    fake = fake_tool(t, "fakebin",
                     "[ \"$1\" = --version ] && { echo 'perf version 6.1'; "
                     "exit 0; }\n"
                     "echo 'Error:' >&2\n"
                     "echo 'Access to performance monitoring and "
                     "observability operations is limited.' >&2\n"
                     "echo 'perf_event_open(..., 0) failed unexpectedly "
                     "with error 13 (Permission denied)' >&2\n"
                     "exit 255\n")
    marker = os.path.join(t.scratch, "ran-refused")
    p = r.run(["record", "-o", r.out("r2"), "--", prog, marker],
              env=dict(r.env, PATH=fake + os.pathsep + r.env["PATH"]))
    t.check(p.returncode == 2 and "could not profile" in p.stderr and
            "Permission denied" in p.stderr and
            "Traceback" not in p.stderr and not os.path.exists(marker),
            "a refused perf record: perf's reason, exit 2, the program "
            "not run", p.stderr[-400:])


def check_cmd(t, r, dump):
    """jitring check on the tree case's dump, and on a damaged copy."""
    p = r.run(["check", dump])
    t.check(p.returncode == 0, "check: the recording's dump is valid",
            p.stdout[-300:] + p.stderr[-300:])
    bad = os.path.join(t.scratch, "bad.dump")
    with open(dump, "rb") as f:
        data = bytearray(f.read())
    data[40 + 4:40 + 8] = b"\0\0\0\0"   # the first record's size
    with open(bad, "wb") as f:
        f.write(data)
    p = r.run(["check", bad])
    t.check(p.returncode != 0, "check: a damaged dump fails")


def shares(out, script=None):
    """{python function: share of all samples (%), by total} of a
    recording's stacks.folded; of @script's samples only where given
    (those with a frame of its file)."""
    tot, n = {}, 0
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            c = int(c)
            if script and ":" + script not in stack:
                continue
            n += c
            for fn in set(x for x in stack.split(";")
                          if x.startswith("py::")):
                fn = fn[4:].split(":", 1)[0]
                tot[fn] = tot.get(fn, 0) + c
    return {k: 100.0 * v / n for k, v in tot.items()} if n else {}


def program_share(out, script):
    """The share (%) of a recording's samples with a frame of @script."""
    n = mine = 0
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            n += int(c)
            mine += int(c) if ":" + script in stack else 0
    return 100.0 * mine / n if n else 0.0


def py_stacks(out):
    """{stack of python names: samples} of stacks.folded."""
    st = {}
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            k = tuple(x for x in stack.split(";")[1:] if x.startswith("py::"))
            st[k] = st.get(k, 0) + int(c)
    return st


def jitted(out):
    return [n for n in os.listdir(out) if n.startswith("jitted-")]


def load_addrs(out, name):
    """[(code_addr, ts)] of the CODE_LOADs of function @name in @out's
    dumps."""
    got = []
    for d in jrtest.dumps(out):
        for r in jrtest.records(d):
            if r["type"] == "CODE_LOAD" and \
                    r["name"].startswith("py::%s:" % name):
                got.append((r["addr"], r["ts"]))
    return got


def test_scale(t, r):
    """One perf.data finished both ways in one folder (the marker mmap
    names the dump by its absolute path)."""
    import shutil
    out = r.out("scale")
    p = r.run(["record", "-o", out, "--call-graph", "dwarf",
               "--memfd-trampolines", "--keep-perf-data", "--top", "40",
               "--", PERF_PROG, "8", "3"])
    if not t.check(p.returncode == 0, "scale: record", p.stderr[-1500:]):
        return
    red, nr = py_stacks(out), len(jitted(out))
    sr = shares(out)
    t.check(not [n for n in os.listdir(out) if n.endswith(".full")] and
            jrtest.dumps(out) and
            all(jrtest.check_dump(d)[0] for d in jrtest.dumps(out)) and
            all(len(jrtest.load_names(d)) > 100
                for d in jrtest.dumps(out)),
            "scale: the full dumps are back after inject")
    for n in os.listdir(out):
        if n.startswith("jitted-") or n in ("perf.jit.data", ".debug"):
            f = os.path.join(out, n)
            shutil.rmtree(f) if os.path.isdir(f) else os.unlink(f)
    p = r.run(["report", out, "--inject", "full", "--top", "40"])
    if not t.check(p.returncode == 0, "scale: report --inject full of the "
                   "same perf.data", p.stderr[-1500:]):
        return
    full, nf = py_stacks(out), len(jitted(out))
    sf = shares(out)
    same = sum(min(red.get(k, 0), full.get(k, 0))
               for k in set(red) | set(full))
    t.check(red and red == full, "scale: the same Python stacks both ways "
            "(%d of %d samples' stacks alike)" % (same, sum(full.values())),
            sorted(set(red.items()) ^ set(full.items()))[:6])
    for fn in ("worker", "hot_a", "hot_b"):
        t.check(sf.get(fn, 0) > 10 and
                abs(sf.get(fn, 0) - sr.get(fn, 0)) < 0.5,
                "scale: %s's share %.1f%% / %.1f%%, through the "
                "trampolines of 8 threads" % (fn, sr.get(fn, 0),
                                              sf.get(fn, 0)))
    t.check(0 < nr < nf / 2, "scale: jitted images %d instead of %d"
            % (nr, nf))


def test_reuse(t, r):
    prog = r.script("reuse.py", REUSE)
    out = r.out("reuse")
    p = r.run(["record", "-o", out, "--top", "40", "--", prog, "0.15"])
    if not t.check(p.returncode == 0, "reuse: record", p.stderr[-1500:]):
        return
    first, second = load_addrs(out, "first_fn"), load_addrs(out,
                                                             "second_fn")
    t.check(len(first) == 1 and
            [ts for a, ts in second if a == first[0][0]] and
            all(ts > first[0][1] for a, ts in second if a == first[0][0]),
            "reuse: a second_fn got first_fn's trampoline copy (%s, %s)"
            % (first, second[-3:]))
    names = os.listdir(out)
    t.check(("perf.data" in names) != ("perf.jit.data" in names) and
            "perf.script.txt" not in names,
            "reuse: one perf data file, no perf.script.txt", names)
    sh = shares(out)
    a, b = sh.get("first_fn", 0), sh.get("second_fn", 0)
    # The same CPU time each (about 40 % each): misnamed, second_fn would
    # have none and first_fn both shares.
    t.check(a > 15 and b > 15,
            "reuse: each named with its own share of the same work "
            "(%.1f%%, %.1f%%)"
            % (sh.get("first_fn", 0), sh.get("second_fn", 0)),
            p.stdout[-1500:])


# A recursive-descent parser 60 Python frames deep (deep_prog.py).
DEEP = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    "deep_prog.py")

CUT = "[stack cut: outer frames not recorded]"


def deep_shares(out, script):
    """(share of samples whose stack holds @script's <module>, share cut)
    of the samples in @script's functions (start-up's are not), and the
    share cut of all samples, in %."""
    mod, cut, n, cut_all, n_all = 0, 0, 0, 0, 0
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, c = line.rstrip("\n").rpartition(" ")
            frames, c = stack.split(";"), int(c)
            n_all += c
            cut_all += c if CUT in frames[1:2] else 0
            if not any(x.endswith(":" + script) for x in frames):
                continue
            n += c
            if "py::<module>:" + script in frames:
                mod += c
            if CUT in frames[1:2]:
                cut += c
    if not n:
        return 0, 0, 0
    return 100.0 * mod / n, 100.0 * cut / n, 100.0 * cut_all / n_all


def cut_said(stdout):
    """The share the note after the tables gives, or None."""
    for line in stdout.splitlines():
        if "of samples have a cut stack" in line:
            return float(line.split("%", 1)[0])
    return None


def test_deep(t, r):
    """A program 60 Python frames deep: its <module> holds the samples
    (the program's root, as in CPython 3.15's sampler), or the stacks
    perf cut are said, with their share, and under a root of their own."""
    prog = DEEP
    fp = r.keeps_fp()
    runs = [("default", [])]
    if not fp:
        runs.append(("8 KiB copies", ["--stack-size", "8192"]))
    for what, opts in runs:
        out = r.out("deep-%d" % len(opts))
        p = r.run(["record", "-o", out] + opts + ["--", prog, "20", "250"])
        if not t.check(p.returncode == 0, "deep: record, %s" % what,
                       p.stderr[-1500:]):
            return
        mod, cut, cut_all = deep_shares(out, prog)
        said = cut_said(p.stdout)
        t.check(mod + cut >= 95,
                "deep, %s: <module> %.1f%% and cut stacks %.1f%%: every "
                "sample of the program under one or the other"
                % (what, mod, cut), p.stdout[-2000:])
        t.check((said is None and cut_all < 0.1) or
                (said is not None and abs(said - cut_all) < 0.1),
                "deep, %s: the note gives the cut share (%s, %.1f%% in "
                "stacks.folded)" % (what, said, cut_all), p.stdout[-800:])
        if fp:
            # perf records at most kernel.perf_event_max_stack frames
            # (127 unless raised): some 30 Python frames, about half the
            # program's depth, so about half its samples are cut (42 to
            # 58% seen): a fifth at least, whatever the load.
            # As record read it when perf started (a --max-stack
            # elsewhere may have changed it for a while).
            import json
            with open(os.path.join(out, "jitring-record.json")) as f:
                limit = json.load(f).get("max_stack") or 127
            if limit < 240:
                t.check(cut > 20 and "kernel.perf_event_max_stack=" in
                        p.stdout and "--call-graph dwarf" in p.stdout,
                        "deep, fp: cut at perf's limit of %d frames, and "
                        "the note says how to lift it" % limit,
                        p.stdout[-800:])
        elif not opts:
            t.check(mod >= 85 and cut < 2,
                    "deep, dwarf: whole stacks, <module> %.1f%%" % mod,
                    p.stdout[-2000:])
        if not opts:
            # The program's first exec needs no wipe (perf knew no
            # mapping of it before): a program that starts no process
            # keeps its perf.data as perf wrote it, but where the
            # interpreter is a wrapper that execs again (sid's, through
            # its own loader).
            from jitring.perf.data import PerfData
            from jitring.perf.execfix import fix
            path = os.path.join(out, "perf.data")
            with PerfData(path) as pd:
                execs = sum(1 for typ, misc, _, _ in pd.records()
                            if typ == 3 and misc & (1 << 13))
            n = fix(path)
            t.check(execs >= 1 and n == execs - 1, "deep: of the %d "
                    "execs of a program that starts no process, all but "
                    "the first to fix (%d)" % (execs, n))
        else:
            t.check(cut > 30 and "--stack-size 32768" in p.stdout,
                    "deep, dwarf with 8 KiB copies: %.1f%% cut, and the "
                    "note names --stack-size" % cut, p.stdout[-800:])


MIXED = textwrap.dedent("""
    import os, subprocess, sys
    def spin_parent(n):
        s = 0
        for i in range(n):
            s += i
        return s
    spin_parent(3000000)
    subprocess.run([sys.executable, "-c", %r],
                   env=dict(os.environ, JITRING_TRAMPOLINE_ELF="0"),
                   check=True)
""" % SHORT)


def test_elf(t, r):
    import shutil
    prog = DEEP
    got = {}
    for what, opts in (("elf", []), ("inject", ["--memfd-trampolines"])):
        out = r.out("elf-" + what)
        # perf script in as many slices as there are CPUs (up to 4).
        p = r.run(["record", "-o", out, "--call-graph", "dwarf"] + opts +
                  ["--top", "40", "--", prog, "20", "250"],
                  env=dict(r.env, JITRING_PY_TEST_SLICE_MIN="1"))
        if not t.check(p.returncode == 0, "elf: record, %s" % what,
                       p.stderr[-1500:]):
            return
        names = os.listdir(out)
        tramp = [n for n in names if n.startswith("jitring-tramp-")]
        if what == "elf":
            t.check(len(tramp) == 1 and "perf.data" in names and
                    "perf.jit.data" not in names and not jitted(out) and
                    "perf-inject.log" not in names,
                    "elf: one ELF file, perf.data, no inject", names)
        else:
            t.check(not tramp and "perf.jit.data" in names and jitted(out),
                    "elf: --memfd-trampolines injects", names)
        mod, cut, _ = deep_shares(out, prog)
        # Shares of the program's samples (those with a frame of it): the
        # two runs' start-ups (a tenth of the samples idle, a fifth loaded,
        # 4-6 points apart from run to run) would move every share alike.
        # Those samples are most of the samples (a route that named no
        # frame of the program would leave them few).
        mine = program_share(out, prog)
        t.check(mine > 50, "elf, %s: %.1f%% of the samples have a frame "
                "of the program" % (what, mine))
        got[what] = (shares(out, prog), mod, cut, out)
    (se, me, ce, out), (si, mi, ci, _) = got["elf"], got["inject"]
    top_e = {k for k, v in se.items() if v > 1}
    top_i = {k for k, v in si.items() if v > 1}
    t.check(top_e and top_e == top_i,
            "elf: the same Python functions over 1%% as with inject (%d)"
            % len(top_e), sorted(top_e ^ top_i))
    far = sorted((k, round(se.get(k, 0), 1), round(si.get(k, 0), 1))
                 for k in top_e | top_i
                 if abs(se.get(k, 0) - si.get(k, 0)) >= 3)
    t.check(not far, "elf: their shares within 3 points", far)
    t.check(me >= 85 and abs(me - mi) < 5 and ce < 2,
            "elf: <module> roots %.1f%% of the samples (%.1f%% with "
            "inject), %.1f%% cut" % (me, mi, ce))
    moved = out + "-moved"
    shutil.move(out, moved)
    p = r.run(["report", moved, "--top", "40"])
    t.check(p.returncode == 0 and shares(moved, prog) == se,
            "elf: the folder moved, report finishes it alike",
            p.stderr[-1500:])
    # A child whose trampolines are the memfd image (as where its ELF
    # file cannot be made): perf cannot unwind through those, so the
    # recording is injected, and both processes' functions are named.
    prog = r.script("mixed.py", MIXED)
    out = r.out("elf-mixed")
    p = r.run(["record", "-o", out, "--call-graph", "dwarf", "--top",
               "40", "--", prog])
    sh = shares(out) if p.returncode == 0 else {}
    names = os.listdir(out) if p.returncode == 0 else []
    t.check(sh.get("spin_parent", 0) > 5 and sh.get("spin_short", 0) > 5 and
            "perf.jit.data" in names and
            len([n for n in names if n.startswith("jitring-tramp-")]) == 1,
            "elf: a child on the memfd image: injected, both named "
            "(%.1f%%, %.1f%%)" % (sh.get("spin_parent", 0),
                                   sh.get("spin_short", 0)),
            p.stderr[-1500:] + str(names))


def test_fp(t, r):
    if not r.keeps_fp():
        t.skip_part("fp", "%s is built without frame pointers (Debian "
                    "sid's 3.15 has them: py_wheel_sid3.15)" % r.py)
        return
    # The same work in both runs (1,500 calls a thread, about 3 s of CPU),
    # so that their shares differ only by how each mode attributes it,
    # and by the machine: on a loaded VM a vCPU's stolen time counts as
    # the sampled thread's, a few points now and then.  So a second pair
    # of runs where the first differs by more than 3 points.
    job = [PERF_PROG, "8", "120", "1500"]
    fns = ("worker", "hot_a", "hot_b")
    for attempt in (1, 2):
        fp, dw = r.out("fp-auto-%d" % attempt), r.out("fp-dwarf-%d" % attempt)
        p = r.run(["record", "-o", fp, "--"] + job)
        if not t.check(p.returncode == 0, "fp: record", p.stderr[-1500:]):
            return
        p = r.run(["record", "-o", dw, "--call-graph", "dwarf", "--"] + job)
        if not t.check(p.returncode == 0, "fp: record --call-graph dwarf",
                       p.stderr[-1500:]):
            return
        sf, sd = shares(fp), shares(dw)
        off = [fn for fn in fns
               if not (sf.get(fn, 0) > 10 and
                       abs(sf[fn] - sd.get(fn, 0)) <= 3)]
        if not off:
            break
        print("fp: pair %d: %s" % (attempt, ", ".join(
            "%s %.1f%% / %.1f%%" % (fn, sf.get(fn, 0), sd.get(fn, 0))
            for fn in off)))
    with open(os.path.join(fp, "jitring-record.json")) as f:
        meta = __import__("json").load(f)
    t.check(meta.get("call_graph") == "fp", "fp: chosen by itself",
            meta.get("call_graph"))
    t.check(not jitted(fp) and
            not os.path.exists(os.path.join(fp, "perf.jit.data")),
            "fp: no inject, no jitted images", os.listdir(fp))
    for fn in fns:
        t.check(sf.get(fn, 0) > 10 and abs(sf[fn] - sd.get(fn, 0)) <= 3,
                "fp: %s %.1f%% as in dwarf mode (%.1f%%)"
                % (fn, sf.get(fn, 0), sd.get(fn, 0)))
    # dwarf mode's data: perf.data (trampolines in an ELF file), or
    # perf.jit.data where perf inject ran.
    dwd = [os.path.join(dw, n) for n in ("perf.jit.data", "perf.data")
           if os.path.exists(os.path.join(dw, n))]
    t.check(dwd and os.path.getsize(os.path.join(fp, "perf.data")) * 5 <
            os.path.getsize(dwd[0]),
            "fp: perf.data a fifth of dwarf mode's or less", os.listdir(dw))


LIVE = textwrap.dedent("""
    import os, subprocess, sys, time

    def spin(n):
        s = 0
        for i in range(n):
            s ^= i * 7
        return s

    SUB = ("def sub_fn():\\n"
           "    s = 0\\n"
           "    for i in range(3000000):\\n"
           "        s -= i\\n"
           "sub_fn()\\n")

    if __name__ == "__main__":
        # Until the file argv[2] is there (live-1.data: record has read
        # the first segment of perf.data), and with "gone" after it, is
        # there and then gone (live-0.data: its reader was done with);
        # 240 s at most.  Then an exec'd child and more work.
        seg = os.path.join(sys.argv[1], sys.argv[2])
        end = time.monotonic() + 240
        while not os.path.exists(seg) and time.monotonic() < end:
            spin(100000)
        while sys.argv[3:] == ["gone"] and os.path.exists(seg) and \
                time.monotonic() < end:
            spin(100000)
        subprocess.run([sys.executable, "-c", SUB], check=True)
        spin(3000000)
""")


def test_live(t, r):
    """record reads perf.data in segments while the program runs
    (jitring.perf.live): the profile is the one `report` makes of the whole
    file, byte for byte; no segment file is left; a reader that fails
    leaves the whole file to the finishing, with the same result.  In
    dwarf mode, and in fp mode where the interpreter keeps frame
    pointers."""
    import json
    import shutil
    prog = r.script("live.py", LIVE)
    real = shutil.which("perf", path=r.env.get("PATH"))
    fail = fake_tool(t, "live-perf", 'case "$*" in *live-0.data*) '
                     'exit 1;; esac\nexec %s "$@"\n' % real)
    runs = [("live", None, "dwarf"), ("failing reader", fail, "dwarf")]
    if r.keeps_fp():
        runs.append(("live, fp", None, "fp"))
    for what, path, mode in runs:
        out = r.out("live-" + what.replace(" ", "-").replace(",", ""))
        # The readers at the program's priority: on a loaded machine one
        # at nice 10 may not read the first segment in minutes.
        env = dict(r.env, JITRING_PY_TEST_LIVE_SEGMENT="100",
                   JITRING_PY_TEST_LIVE_NICE="0")
        if path:
            env["PATH"] = path + os.pathsep + env.get("PATH", "")
        p = r.run(["record", "-o", out, "--call-graph", mode, "--top",
                   "30", "--", prog, out] +
                  (["live-0.data", "gone"] if path else ["live-1.data"]),
                  env=env)
        if not t.check(p.returncode == 0, "%s: record" % what,
                       p.stderr[-1500:]):
            continue
        with open(os.path.join(out, "jitring-record.json")) as f:
            meta = json.load(f)
        if path:
            t.check(meta.get("live_segments") == 0 and
                    "status 1" in (meta.get("live_failed") or ""),
                    "%s: no segment used, the reason kept" % what,
                    (meta.get("live_segments"), meta.get("live_failed")))
        else:
            t.check(meta.get("live_segments", 0) >= 1 and
                    not meta.get("live_failed"),
                    "%s: %s segments read while the program ran"
                    % (what, meta.get("live_segments")),
                    meta.get("live_failed"))
        left = [n for n in os.listdir(out) if n.startswith("live-")]
        t.check(not left, "%s: no segment file left" % what, left)
        tabs = sections(p.stdout)
        t.check(has(tabs["total"], "spin") and has(tabs["total"], "sub_fn"),
                "%s: the program's and its exec'd child's functions"
                % what, p.stdout[-2000:])
        with open(os.path.join(out, "stacks.folded")) as f:
            folded = f.read()
        q = r.run(["report", out, "--top", "30"], env=env)
        with open(os.path.join(out, "stacks.folded")) as f:
            again = f.read()
        t.check(q.returncode == 0 and q.stdout == p.stdout and
                again == folded, "%s: report of the whole file gives the "
                "same tables and stacks.folded" % what,
                "".join(difflib.unified_diff(
                    p.stdout.splitlines(True), q.stdout.splitlines(True),
                    n=0))[:3000] + q.stderr[-500:])


def opened_events(log):
    """[(pid, inherit)] for each event a `perf record -vv` log says perf
    opened: the attr block before each sys_perf_event_open line says
    whether it is inherited."""
    got, inherit = [], False
    for line in log.splitlines():
        if line.startswith("perf_event_attr:"):
            inherit = False
        elif line.split()[:2] == ["inherit", "1"]:
            inherit = True
        elif line.startswith("sys_perf_event_open: pid "):
            got.append((int(line.split()[2]), inherit))
    return got


def test_inherited(t, r):
    import shutil
    real = shutil.which("perf", path=r.env.get("PATH"))
    fake = fake_tool(t, "verbose", 'for a; do [ "$a" = record ] && '
                     'exec %s "$@" -vv; done\nexec %s "$@"\n'
                     % (real, real))
    env = dict(r.env, PATH=fake + os.pathsep + r.env.get("PATH", ""))
    prog = r.script("short.py", SHORT)
    out = r.out("inherited")
    p = r.run(["record", "-o", out, "--", prog], env=env)
    if not t.check(p.returncode == 0, "inherited: record", p.stderr[-1500:]):
        return
    with open(os.path.join(out, "perf-record.log"), errors="replace") as f:
        events = opened_events(f.read())
    mine = [e for e in events if e[0] != -1]
    t.check(mine and all(inherit for _, inherit in mine),
            "inherited: every event perf opened on the program's task is "
            "inherited (%d)" % len(mine), events)


def test_live_abandoned(t, r):
    """A reader of the live reading still at work when the program ends
    (its perf script a stand-in that says so on a FIFO and never ends):
    record ends it and its perf script, reads its stretch with the tail,
    and exits with the program's status; the profile is report's of the
    whole file; no segment file and no reader process left."""
    import json
    import shutil
    real = shutil.which("perf", path=r.env.get("PATH"))
    ran = os.path.join(t.scratch, "reader-ran")
    fake = fake_tool(t, "slowlive", 'case "$*" in *live-0.data*) touch %s; '
                     'exec sleep 619;; esac\nexec %s "$@"\n' % (ran, real))
    env = dict(r.env, PATH=fake + os.pathsep + r.env.get("PATH", ""),
               JITRING_PY_TEST_LIVE_SEGMENT="100",
               JITRING_PY_TEST_LIVE_NICE="0")
    prog = r.script("live.py", LIVE)
    out = r.out("live-abandoned")
    # The program goes on once the reader's perf script runs.
    p = r.start(["record", "-o", out, "--call-graph", "dwarf", "--top",
                 "30", "--", prog, out, ran], env=env)
    so, se = p.communicate(timeout=300)
    t.check(os.path.exists(ran), "live, abandoned: the first segment's "
            "reader ran")
    t.check(p.returncode == 0, "live, abandoned: record exits with the "
            "program's status", "%d %s" % (p.returncode, se[-500:]))
    with open(os.path.join(out, "jitring-record.json")) as f:
        meta = json.load(f)
    t.check(meta.get("live_segments", 0) == 0 and
            not meta.get("live_failed"),
            "live, abandoned: its stretch read with the tail, no failure",
            (meta.get("live_segments"), meta.get("live_failed")))
    names = os.listdir(out)
    t.check(not [n for n in names if n.startswith("live-")],
            "live, abandoned: no segment file left", names)
    t.check(not sleeping(619) and not leftovers(out),
            "live, abandoned: no reader left",
            (sleeping(619), leftovers(out)))
    with open(os.path.join(out, "stacks.folded")) as f:
        folded = f.read()
    q = r.run(["report", out, "--top", "30"], env=env)
    with open(os.path.join(out, "stacks.folded")) as f:
        again = f.read()
    t.check(q.returncode == 0 and q.stdout == so and again == folded and
            has(sections(so)["total"], "spin"),
            "live, abandoned: report of the whole file gives the same "
            "tables and stacks.folded", so[-1500:] + q.stderr[-500:])


def test_live_segments(t, r):
    """jitring.perf.live driven by hand on a recording of the tree, its
    perf.data written again a piece at a time as perf record writes it
    (the data section's size 0 until the end, the feature sections after
    the data before the header says where it ends): the scan never takes
    a feature section for a record; about four segments and the tail
    give the samples the whole file gives, each once."""
    import collections
    import struct
    from jitring.perf.data import PerfData
    from jitring.perf.driver import Steps, find_perf, perf_cmd
    from jitring.perf.execfix import fix
    from jitring.perf.live import Live
    from jitring.perf.script import script
    prog = r.script("tree.py", TREE)
    out = r.out("live-segments")
    p = r.run(["record", "-o", out, "--call-graph", "dwarf", "--", prog],
              env=dict(r.env, JITRING_PY_TEST_LIVE="0"))
    if not t.check(p.returncode == 3, "segments: record", p.stderr[-1500:]):
        return
    path = os.path.join(out, "perf.data")
    with open(path, "rb") as f:
        whole = f.read()
    size_at = 48                # the data section's size in the header
    d_off, d_size = struct.unpack_from("<QQ", whole, size_at - 8)
    perf = perf_cmd(find_perf(), out, False)
    live = Live(out, perf, False)
    # About four segments, whatever the machine's speed gave.
    with PerfData(path) as pd:
        live.segment = max(50, sum(1 for _ in pd.samples()) // 4)
    saved = os.environ.get("JITRING_PY_TEST_LIVE_NICE")
    os.environ["JITRING_PY_TEST_LIVE_NICE"] = "0"   # as test_live's
    started = 0
    with open(path, "wb") as f:
        f.write(whole[:size_at] + bytes(8) + whole[size_at + 8:d_off])
        for o in list(range(d_off, len(whole), 1 << 18)) + [len(whole)]:
            f.write(whole[f.tell():o])
            f.flush()
            while live.poll():
                started += 1
                live.wait()
        f.seek(0)
        f.write(whole[:d_off])
    t.check(live.failed is None and live.pos == d_off + d_size,
            "segments: the scan stops at the data's end, not in the "
            "feature sections", (live.failed, live.pos, d_off + d_size))
    got = live.finish()
    if saved is None:
        del os.environ["JITRING_PY_TEST_LIVE_NICE"]
    else:
        os.environ["JITRING_PY_TEST_LIVE_NICE"] = saved
    t.check(got is not None and len(got[0]) == started >= 2,
            "segments: %d segments and a tail" % started, live.failed)
    if not got:
        return
    pre, tail = got
    fix(os.path.join(out, tail))

    def stacks(samples):
        return collections.Counter((pid, tid, tm, frames)
                                   for pid, _, frames, tid, tm, _ in samples)
    with Steps() as steps:
        parts = stacks(script(steps, perf, out, elf=True,
                                      data=tail, pre=pre))
        alone = stacks(script(steps, perf, out, elf=True))
    live.discard()
    t.check(parts == alone and len(alone) > 500,
            "segments: the same %d samples as the whole file" %
            sum(alone.values()),
            (sum((parts - alone).values()), sum((alone - parts).values())))
    left = [n for n in os.listdir(out) if n.startswith("live-")]
    t.check(not left, "segments: no segment file left", left)


# A program given by its absolute path, run from another folder; a child
# started through a launcher (the dynamic loader running the interpreter,
# as sid's wrapper does): its process line is its Python command line.
TABLES = textwrap.dedent("""
    import subprocess, sys, time
    def spin_tab(seconds):
        end = time.thread_time() + seconds
        s = 0
        while time.thread_time() < end:
            for i in range(10000):
                s ^= i
        return s
    CHILD = ("import time\\n"
             "def spin_child():\\n"
             "    end = time.thread_time() + 0.1\\n"
             "    while time.thread_time() < end:\\n"
             "        pass\\n"
             "spin_child()\\n")
    spin_tab(0.3)
    if sys.argv[1:]:
        # An interpreter that is a wrapper (sid's) is a launcher itself.
        with open(sys.executable, "rb") as f:
            elf = f.read(4) == b"\\x7fELF"
        subprocess.run((sys.argv[1:] if elf else []) +
                       [sys.executable, "-c", CHILD], check=True)
""")

LOADER = "/lib64/ld-linux-x86-64.so.2"


def table_lines(stdout, title):
    """[(total %, self %, name)] of the table whose title starts with
    @title."""
    rows, on = [], False
    for line in stdout.splitlines():
        if line.startswith(title):
            on = True
        elif on and not line.strip():
            if rows:
                break
        elif on:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%"):
                rows.append((float(parts[0][:-1]), float(parts[1][:-1]),
                             parts[2]))
    return rows


def test_tables(t, r):
    """The tables add up: the samples with no Python frame on a line of
    their own (the self column and it make the whole); file names relative
    to the program's folder when it is given by an absolute path from
    another folder; a process started through a launcher named by its
    Python command line."""
    from jitring.output.tables import NO_PYTHON
    from jitring.profile.model import no_python
    d = r.out("tables-prog")
    os.mkdir(d)
    prog = os.path.join(d, "tables_prog.py")
    with open(prog, "w") as f:
        f.write(TABLES)
    cwd = r.out("tables-cwd")
    os.mkdir(cwd)
    out = r.out("tables")
    launcher = [LOADER] if os.access(LOADER, os.X_OK) else []
    p = r.run(["record", "-o", out, "--top", "40", "--", prog] + launcher,
              cwd=cwd)
    if not t.check(p.returncode == 0, "tables: record", p.stderr[-1500:]):
        return
    tabs = sections(p.stdout)
    t.check("spin_tab:tables_prog.py" in tabs["total"],
            "tables: a script given by its absolute path from another "
            "folder is named relative to its folder", tabs["total"])
    slf = table_lines(p.stdout, "By self")
    nopy = [row for row in slf if row[2] == NO_PYTHON]
    folded = {}
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            folded[tuple(stack.split(";"))] = int(n)
    want = 100.0 * no_python(folded) / sum(folded.values())
    if t.check(len(nopy) == 1 and abs(nopy[0][1] - want) < 0.06,
               "tables: the samples with no Python frame on a line of "
               "their own (%.1f%% in stacks.folded)" % want, slf):
        added = sum(s for _, s, _ in slf)
        t.check(abs(added - 100.0) <= 0.05 * len(slf) + 0.1,
                "tables: the self column adds up to the whole (%.1f%%)"
                % added, slf)
    if not launcher:
        t.skip_part("a launcher's child", "no %s" % LOADER)
        return
    cmds = [c for _, _, c in procs_table(p.stdout)]
    t.check(len(cmds) == 2 and any("-c import time" in c and
                                   c.startswith("python") for c in cmds) and
            not any("ld-linux" in c for c in cmds),
            "tables: the child started through the loader is named by "
            "its Python command line", cmds)
    t.check(has(tabs["total"], "spin_child"), "tables: the child's "
            "function named", tabs["total"])


def test_names(t, r):
    """program_dirs() on synthetic recordings: the script's folder as
    python names it and as it resolves, then the working folder."""
    from jitring.output.tables import fmt_name, program_dirs
    d = r.out("names")
    os.makedirs(os.path.join(d, "real", "sub"))
    os.symlink(os.path.join(d, "real"), os.path.join(d, "link"))
    cases = [
        ({"cwd": "/w", "command": ["/app/a.py"]}, "py::f:/app/a.py",
         "f:a.py"),
        ({"cwd": "/w", "command": ["../app/a.py"]}, "py::f:/w/../app/a.py",
         "f:a.py"),
        ({"cwd": "/w", "command": ["/app/a.py"]}, "py::g:/w/lib/m.py",
         "g:lib/m.py"),
        ({"cwd": "/w", "command": ["-m", "pkg"]}, "py::h:/w/pkg/m.py",
         "h:pkg/m.py"),
        ({"cwd": d, "command": ["link/a.py"]},
         "py::i:%s/real/sub/m.py" % d, "i:sub/m.py"),
        ({"cwd": "/w", "command": ["/app/a.py"], "attached": True},
         "py::j:/app/a.py", "j:/app/a.py"),
        ({"cwd": "/w", "command": ["/app/a.py"]},
         "py::k:/usr/lib/python3/dist-packages/docutils/core.py",
         "k:docutils/core.py"),
        ({"cwd": "/w", "command": ["/app/a.py"]},
         "py::l:/opt/lib/python3.13t/site-packages/m.py", "l:m.py"),
    ]
    for meta, name, want in cases:
        got = fmt_name(name, program_dirs(meta))
        t.check(got == want, "names: %s in %s is %s" % (name, meta, want),
                got)


# Prints kernel.perf_event_max_stack as the program sees it and its pid;
# with "wait", runs until SIGINT.
MAXSTACK = textwrap.dedent("""
    import os, sys, time
    with open("/proc/sys/kernel/perf_event_max_stack") as f:
        print("max_stack %s %d" % (f.read().strip(), os.getpid()),
              flush=True)
    if sys.argv[1:] == ["wait"]:
        try:
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            sys.exit(5)
""")


def sysctl_max_stack():
    with open("/proc/sys/kernel/perf_event_max_stack") as f:
        return int(f.read())


# Tries of a --max-stack recording the kernel refuses while other perf
# sessions record call chains (other tests on the machine), 2 s apart.
BUSY_TRIES = 30


def busy(p):
    """Whether record refused --max-stack because another perf session
    records call chains (other tests' perf, on a shared machine)."""
    return p.returncode == 2 and "Device or resource busy" in p.stderr


def test_max_stack(t, r):
    """record --max-stack N: the program runs with the value raised, which
    is put back after, also when record is killed with SIGKILL; refused
    in one line where the user is not root or the kernel keeps the value
    (another perf session recording call chains)."""
    if os.geteuid() != 0:
        t.skip("not root: --max-stack needs root")
    old = sysctl_max_stack()
    n = max(1024, 2 * old)
    prog = r.script("maxstack.py", MAXSTACK)
    out = r.out("maxstack")
    for i in range(BUSY_TRIES):
        p = r.run(["record", "-o", out, "--force", "--max-stack", str(n),
                   "--", prog])
        if not busy(p):
            break
        if i == 0:
            t.check(len(p.stderr.strip().splitlines()) == 1 and
                    sysctl_max_stack() == old and
                    "max_stack" not in p.stdout,
                    "max-stack: refused in one line while another perf "
                    "session records call chains, the value and the "
                    "program untouched", p.stderr)
        time.sleep(2)   # back off: a retry once the other session ends
    else:
        t.skip("kernel.perf_event_max_stack kept by other perf sessions")
    t.check(p.returncode == 0 and "max_stack %d " % n in p.stdout and
            sysctl_max_stack() == old,
            "max-stack: the program ran with %d, %d back after" % (n, old),
            p.stdout[-600:] + p.stderr[-600:])
    max_stack_deep(t, r, n)
    max_stack_killed(t, r, prog, old, n)
    ns = ["unshare", "--user"]
    q = subprocess.run(ns + ["true"], capture_output=True)
    if q.returncode != 0:
        t.skip_part("max-stack as another user", "no unshare --user here")
        return
    p = subprocess.run(ns + r.argv(["record", "-o", r.out("maxstack-user"),
                                    "--max-stack", str(n), "--", prog]),
                       capture_output=True, text=True, env=r.env,
                       cwd=r.t.scratch, timeout=120)
    t.check(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
            and "root" in p.stderr and "max_stack" not in p.stdout and
            sysctl_max_stack() == old and
            not os.path.exists(r.out("maxstack-user")),
            "max-stack: not root (uid %s): refused in one line, nothing "
            "run or changed" % "nobody", p.stderr[-600:])


def max_stack_deep(t, r, n):
    """Where the interpreter keeps frame pointers: the 60-frame program's
    stacks whole at --max-stack @n (cut at the default 127)."""
    if not r.keeps_fp():
        t.skip_part("max-stack: deep stacks in fp mode", "the interpreter "
                    "keeps no frame pointers")
        return
    out = r.out("maxstack-deep")
    for _ in range(BUSY_TRIES):
        p = r.run(["record", "-o", out, "--force", "--max-stack", str(n),
                   "--", DEEP, "20", "250"])
        if not busy(p):
            break
        time.sleep(2)   # back off, then retry
    mod, cut, _ = deep_shares(out, DEEP)
    t.check(p.returncode == 0 and cut < 5 and mod > 90,
            "max-stack, fp: the 60-frame program's stacks whole at %d "
            "(<module> %.1f%%, %.1f%% cut)" % (n, mod, cut),
            p.stdout[-1500:] + p.stderr[-600:])


def max_stack_killed(t, r, prog, old, n):
    """record killed with SIGKILL while the program runs: the old value
    back once perf has stopped, and no process of record's left."""
    out = r.out("maxstack-kill")
    for _ in range(BUSY_TRIES):
        p = r.start(["record", "-o", out, "--force", "--max-stack", str(n),
                     "--", prog, "wait"])
        line = b""
        fd = p.stdout.fileno()
        while not line.endswith(b"\n"):
            rd, _, _ = select.select([fd], [], [], 120)
            chunk = os.read(fd, 256) if rd else b""
            if not chunk:
                break
            line += chunk
        if line:
            break
        p.wait(60)
        if not busy(subprocess.CompletedProcess(p.args, p.returncode, "",
                                                p.stderr.read())):
            break
        time.sleep(2)   # back off, then retry
    words = line.decode().split()
    if not t.check(words[:2] == ["max_stack", str(n)],
                   "max-stack, killed: the program runs with %d" % n,
                   line):
        p.kill()
        p.wait()
        return
    pid = int(words[2])
    p.kill()
    p.wait()
    back = jrtest.poll(lambda: sysctl_max_stack() == old, timeout=60)
    t.check(back, "max-stack, killed: record's SIGKILL puts %d back "
            "(%d now)" % (old, sysctl_max_stack()))
    try:
        os.killpg(pid, signal.SIGINT)
    except OSError:
        pass
    gone = jrtest.poll(lambda: not leftovers(out), timeout=60)
    t.check(gone, "max-stack, killed: no process of record's left",
            leftovers(out))
    p.stdout.close()
    p.stderr.close()


def fixture(t):
    """(Rec,), and after the last case: nothing was written to ~/.debug
    (HOME is the scratch folder)."""
    py, env = jrtest.record_python(t)
    yield (Rec(t, py, env),)
    t.check(not os.path.exists(os.path.join(t.scratch, ".debug")),
            "nothing written to ~/.debug")


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
