# SPDX-License-Identifier: MIT
"""Finishing a recording: from perf.data and the dumps to a profile.

``python -m jitring record`` calls finish() once the program has exited
and perf has stopped; ``python -m jitring report DIR`` calls it on a
recording whose finishing was interrupted (or to see it again).  Two
finishings of one folder take its lock (LOCK) in turn; every file either
writes there is listed in its manifest (MANIFEST) first, the only files
``record --force`` removes; a full disk keeps the recording for later.

Steps, each a file in the recording's folder:

  perf.data        fixed first (jitring._execfix), so that perf unwinds
                   the processes that exec'd

  perf.jit.data    ``perf inject --jit``: perf.data with the JIT code of
                   the dumps as ELF images (``perf report -i``); it
                   replaces perf.data.  perf inject is given only the
                   functions the samples can reach (jitring._jitsyms), so
                   its cost and its jitted-*.so follow the samples
  perf.script.txt  with --perf-script only: ``perf script`` text of the
                   samples with their stacks (Firefox Profiler and
                   speedscope load it)
  stacks.folded    one line per stack, root first, ``a;b;c COUNT``
  flame.html       an interactive flame graph, self-contained
  stacks-wait.folded, flame-wait.html
                   with record --wait: the same of where threads waited
                   off CPU, in microseconds (jitring._wait)

The stacks the table and the flame graph show are the program's: the
frames of jitring's runner and of runpy above the program's first Python
frame are left out, and so are the interpreter's own frames between two
Python frames (the call machinery of every Python call).  Native frames
below the innermost Python frame (C extensions, builtins, libc, the
kernel) stay.  In a recording of record --pid, the Python frames that ran
throughout the window in a thread (RUNNING, from the service) are put at
the root of each of its samples: they never went through a trampoline,
so perf has them as the interpreter's eval loop only, unnamed.  Samples
of jitring's own work (its start-up and stop, its threads, its native
code: own_work()) are left out altogether.
"""

import errno
import fcntl
import functools
import io
import json
import operator
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from typing import NamedTuple

META = "jitring-record.json"
PROCS = "processes.jsonl"
# record --pid: the Python frames that ran throughout the window, per
# thread (jitring._attach._running_threads(), checked: running()).
RUNNING = "running-frames.json"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Outputs that finish() makes again (a partial one is removed first).
OUTPUTS = ("perf.jit.data", "perf.script.txt", "stacks.folded",
           "flame.html", "perf-inject.log", "stacks-wait.folded",
           "flame-wait.html")
# The folder's list of the files record and report wrote in it (the only
# ones --force removes), and the lock two finishings take in turn.
MANIFEST = ".jitring-files"
LOCK = ".jitring-lock"
# The names record and report write under (a user's file of one of them
# would be overwritten); besides, the dumps and images of GROWN.
NAMES = (META, PROCS, RUNNING, MANIFEST, LOCK, "perf.data",
         "perf-record.log", "perf-script.log") + OUTPUTS
GROWN = re.compile(r"^(jit-\d+\.dump(\.full)?|jitted-\d+-\d+\.so|"
                   r"jitring-tramp-\d+-[0-9a-f]+\.so|"
                   + re.escape(PROCS) + r")$")
# What a full disk raises: the recording is kept, the finishing waits.
FULL = (errno.ENOSPC, errno.EDQUOT)


class RecordError(Exception):
    """A reason to stop with a message and exit status 2."""


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def die_with_parent(sig):
    """In a child before exec (a preexec_fn): signal @sig to it when the
    thread that started it ends (PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)
    except Exception:
        pass


def find_perf():
    perf = shutil.which("perf")
    if not perf:
        raise RecordError("perf not found on PATH (Debian: apt install "
                          "linux-perf)")
    # Debian's /usr/bin/perf is a wrapper that fails at run time when no
    # perf matches the running kernel: ask it once.
    p = subprocess.run([perf, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RecordError("perf does not run here: %s"
                          % (p.stderr.strip() or p.stdout.strip()))
    return perf


def perf_cmd(perf, out, keep_debug):
    """perf, with no build-id cache unless keep_debug (~/.debug): perf
    inject would copy every file it sees into it (the interpreter, libc,
    kallsyms, each jitted image: 48 MB for a small 3.13t program, half of
    inject's time), and every step reads the files in place."""
    if keep_debug:
        return [perf]
    return [perf, "--buildid-dir", os.devnull]


def claimed(out):
    """The names the folder's manifest lists (plain names: one with a
    slash is not record's)."""
    try:
        with open(os.path.join(out, MANIFEST), errors="replace") as f:
            return {n for n in f.read().split("\n")
                    if n and "/" not in n and n not in (".", "..")}
    except OSError:
        return set()


def claim(out, names):
    """Add @names to the folder's manifest before they are written: a
    listed name never written costs nothing, a file written unlisted
    would be kept as the user's."""
    new = sorted(set(names) - claimed(out))
    if not new:
        return
    fd = os.open(os.path.join(out, MANIFEST), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, "".join(n + "\n" for n in new).encode())
    finally:
        os.close(fd)


def claim_grown(out, before):
    """Claim the dumps, images and processes.jsonl that appeared in the
    folder since @before (its names then): the program's processes and
    perf inject write them."""
    try:
        names = os.listdir(out)
    except OSError:
        return
    claim(out, [n for n in names if n not in before and GROWN.match(n)])


def no_space(out):
    """Whether the folder's file system has no block left for us (one
    that counts no blocks at all, as some FUSE ones do, is not full)."""
    try:
        st = os.statvfs(out)
    except OSError:
        return False
    return st.f_blocks > 0 and \
        (st.f_bfree if os.geteuid() == 0 else st.f_bavail) == 0


def write_json(out, name, data, indent=None):
    """@data as the file @name of the folder @out, whole or not at all
    (written beside, then renamed over it; never through a link)."""
    claim(out, [name])
    tmp = os.path.join(out, name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                     os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=indent)
        os.replace(tmp, os.path.join(out, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_meta(out, meta):
    write_json(out, META, meta, indent=1)


def checked_running(data):
    """The service's list of the frames that ran throughout the window
    ({"pid", "threads": [{"tid", "frames": [[qualname, file, line],
    ...]}]}, outermost frame first) with what is not of that form left
    out, bounded as the target bounds it; None where nothing is left."""
    from jitring._attach import RUNNING_DEPTH, RUNNING_THREADS
    if not isinstance(data, dict) or not isinstance(data.get("threads"),
                                                    list):
        return None
    threads = []
    for th in data["threads"][:RUNNING_THREADS]:
        if not isinstance(th, dict):
            continue
        tid, frames = th.get("tid"), th.get("frames")
        if type(tid) is not int or tid <= 0 or \
                not isinstance(frames, list):
            continue
        ok = []
        for fr in frames[:RUNNING_DEPTH]:
            if not (isinstance(fr, list) and len(fr) == 3 and
                    isinstance(fr[0], str) and isinstance(fr[1], str) and
                    type(fr[2]) is int):
                break
            ok.append(fr)
        if ok:
            threads.append({"tid": tid, "frames": ok})
    if not threads or type(data.get("pid")) is not int:
        return None
    return {"pid": data["pid"], "threads": threads}


def write_running(out, data):
    """@data (checked_running()) as the recording's RUNNING."""
    write_json(out, RUNNING, data)


def running(out, pid):
    """{tid: (frame names, outermost first)} of process @pid's threads
    from the recording's RUNNING, the names as script() gives frames
    ("py::qualname:file", escaped); {} where there is none."""
    from jitring._flame import escape
    try:
        with open(os.path.join(out, RUNNING), errors="replace") as f:
            data = checked_running(json.loads(f.read(64 << 20)))
    except (OSError, ValueError):
        return {}
    if data is None or data["pid"] != pid:
        return {}
    return {th["tid"]: tuple(escape("py::%s:%s" % (q, fn))
                             for q, fn, _ in th["frames"])
            for th in data["threads"]}


def _key(name, doc, default=None):
    """A property of Meta: the key @name, @default where absent."""
    def get(self):
        return self.get(name, default)

    def put(self, value):
        self[name] = value
    return property(get, put, doc=doc)


class Meta(dict):
    """The recording's metadata (META), as record wrote it and the
    finishing adds to it: a dict, so that a key this version does not
    know is written back as it was read, with a property for each key
    the finishing reads."""

    # How record ran.
    version = _key("version", "the layout of the file (1)")
    command = _key("command", "the program's argv after `record --` "
                   "(record --pid: the service's argv)")
    python = _key("python", "the interpreter record ran in")
    cwd = _key("cwd", "the folder record ran in")
    started = _key("started", "when record started (time.time())", 0)
    pid = _key("pid", "the program's first process (record --pid: the "
               "service's)")
    attached = _key("attached", "a recording of record --pid")
    route = _key("route", "how record --pid reached the service")
    answered = _key("answered", "record --pid: whether the service "
                    "answered the request to stop")
    window_on_ns = _key("window_on_ns", "record --pid: the service's "
                        "clock (perf's) when its jitring started")
    status = _key("status", "the program's exit status")
    seconds = _key("seconds", "how long the recording took")
    perf_status = _key("perf_status", "perf record's exit status")
    # What perf recorded.
    event = _key("event", "perf's event", "cpu-clock")
    freq = _key("freq", "samples a second", "?")
    call_graph = _key("call_graph", "how perf took the stacks: fp or "
                      "dwarf")
    max_stack = _key("max_stack", "the most frames perf recorded of a "
                     "stack (kernel.perf_event_max_stack then)")
    stack_size = _key("stack_size", "dwarf mode's copy of each sample's "
                      "stack, in bytes")
    trampoline_elf = _key("trampoline_elf", "dwarf mode's trampolines "
                          "were ELF files perf unwinds through (no "
                          "inject)")
    top_only = _key("top_only", "--no-children: the first process's "
                    "samples alone")
    wait = _key("wait", "record --wait or --wall: where threads waited "
                "off CPU too")
    wall = _key("wall", "record --wall: a line per thread of its CPU "
                "time and its waits")
    wait_freq = _key("wait_freq", "--wait: the switches' stacks a "
                     "second a thread at most while it switches often")
    wait_stack_size = _key("wait_stack_size", "--wait: the switches' "
                           "stack copy, in bytes")
    wait_budget = _key("wait_budget", "--wait: the most perf.data may "
                       "take, in bytes")
    # How to finish it.
    inject = _key("inject", "perf inject the functions the samples "
                  "reach (reduced) or all (full)", "reduced")
    keep_debug = _key("keep_debug", "perf keeps its build-id cache "
                      "(~/.debug)")
    keep_perf_data = _key("keep_perf_data", "perf.data is kept once "
                          "injected")
    inline = _key("inline", "perf script lists inlined native functions")
    perf_script = _key("perf_script", "perf.script.txt is kept")
    # What a finishing did (one may run again).
    exec_fixed = _key("exec_fixed", "perf.data's exec'd processes were "
                      "fixed (jitring._execfix)")
    live_segments = _key("live_segments", "how many segments of "
                         "perf.data were read while the program ran", 0)
    live_failed = _key("live_failed", "why the live reading failed, or "
                       "None")


def read_meta(out):
    """The recording's metadata (a Meta); RecordError where the folder
    has none."""
    try:
        with open(os.path.join(out, META)) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise RecordError("%s is not a jitring recording (%s: %s)"
                          % (out, META, getattr(e, "strerror", None) or e))
    if not isinstance(meta, dict):
        raise RecordError("%s is not a jitring recording (%s holds no "
                          "object)" % (out, META))
    return Meta(meta)


class Steps:
    """Runs the finishing's subprocesses; a signal stops the one running
    (it is in record's process group, so a terminal's Ctrl-C reaches it
    too) and raises Interrupted.  A step that leaves the disk of its
    folder (cwd) full raises OSError(ENOSPC): perf script does not check
    its writes, and its output would be cut short unsaid."""

    def __init__(self):
        self.proc = None
        self.old = {}

    def __enter__(self):
        for s in SIGNALS:
            self.old[s] = signal.signal(s, self.stop)
        return self

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)

    def stop(self, signum, frame):
        raise Interrupted(signum)

    def start_all(self, cmds, outs, errs, cwd):
        """Start @cmds at once, each's stdout into its file of @outs (a
        pipe where that is None) and stderr into its file of @errs;
        their processes.  wait_all() waits for them."""
        procs = []
        try:
            for cmd, o, e in zip(cmds, outs, errs):
                with open(e, "w") as g:
                    if o is None:
                        procs.append(subprocess.Popen(
                            cmd, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=g, stdin=subprocess.DEVNULL))
                        continue
                    with open(o, "w") as f:
                        procs.append(subprocess.Popen(
                            cmd, cwd=cwd, stdout=f, stderr=g,
                            stdin=subprocess.DEVNULL))
        except BaseException:
            end_procs(procs)
            raise
        return procs

    def wait_all(self, procs, cwd):
        """Wait for @procs (start_all()); their return codes."""
        try:
            for p in procs:
                p.wait()
        except BaseException:
            end_procs(procs)
            raise
        if no_space(cwd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                          "perf script")
        return [p.returncode for p in procs]

    def run_all(self, cmds, outs, errs, cwd):
        """Run @cmds at once, each's stdout and stderr into its file of
        @outs and @errs; their return codes."""
        return self.wait_all(self.start_all(cmds, outs, errs, cwd), cwd)

    def run(self, cmd, **kw):
        p = self.proc = subprocess.Popen(cmd, **kw)
        try:
            p.wait()
        except BaseException:
            end_procs([p])
            raise
        finally:
            self.proc = None
        if kw.get("cwd") and no_space(kw["cwd"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                          "perf " + next((a for a in cmd if a in
                                          ("inject", "script")), "?"))
        return p.returncode


def end_procs(procs):
    """End the processes @procs that still run (a signal stopped the
    finishing): SIGTERM, then SIGKILL to any still there 10 s later."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tail_of(path, n=5):
    """The last @n lines of @path, control characters escaped (perf may
    print a name in them)."""
    from jitring._flame import escape
    try:
        with open(path, errors="replace", newline="\n") as f:
            lines = [escape(l.rstrip()) for l in f if l.strip()]
    except OSError:
        return ""
    return "\n  ".join(lines[-n:])


def failed(what, rc, log):
    """One line: @what failed with status @rc, its last words in @log."""
    if rc < 0:
        try:
            how = "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            how = "killed by signal %d" % -rc
    else:
        how = "exit %d" % rc
    last = tail_of(log, 1)
    return "%s failed (%s)%s (the whole log: %s)" % (
        what, how, ": " + last if last else "", log)


def injected(out):
    """Whether perf.jit.data is complete and perf.data gone (inject
    replaces it once it has succeeded)."""
    return (not os.path.exists(os.path.join(out, "perf.data")) and
            os.path.exists(os.path.join(out, "perf.jit.data")))


def inject(steps, perf, out, meta):
    """perf inject --jit, perf.data -> perf.jit.data; unless the recording
    asks for the whole dumps (--inject full), perf inject reads dumps of
    only the functions the samples can reach (the full ones are put back
    after).  perf.data is removed once perf.jit.data is written."""
    from jitring import _jitsyms, _perfdata
    log = os.path.join(out, "perf-inject.log")
    paths = []
    with open(log, "w") as f:
        try:
            _jitsyms.restore(out)   # a finishing stopped half-way
            if meta.get("inject", "reduced") != "full":
                try:
                    stats = _jitsyms.reduce(out,
                                            os.path.join(out, "perf.data"))
                    paths = list(stats)
                    for p, (n, k) in sorted(stats.items()):
                        f.write("jitring: %s: %d of %d functions reached "
                                "by the samples\n"
                                % (os.path.basename(p), k, n))
                except (_perfdata.PerfDataError, _jitsyms.DumpError,
                        OSError) as e:
                    _jitsyms.restore(out, paths)
                    paths = []
                    f.write("jitring: the whole dumps (%s)\n" % e)
                f.flush()
            rc = steps.run(perf + ["inject", "--jit", "-i", "perf.data",
                                   "-o", "perf.jit.data"], cwd=out,
                           stdout=f, stderr=f, stdin=subprocess.DEVNULL)
        finally:
            _jitsyms.restore(out, paths)
    if rc != 0:
        said = tail_of(log, 1000)
        for e in FULL:
            if os.strerror(e) in said:
                raise OSError(e, os.strerror(e), "perf inject")
        raise RecordError(failed("perf inject --jit", rc, log))
    if not meta.get("keep_perf_data"):
        os.unlink(os.path.join(out, "perf.data"))


# perf script's limit on the frames it reads of each sample (its default is
# kernel.perf_event_max_stack, 127 unless raised: about 25 Python frames).
# The kernel's limit when recording is that sysctl's value at the time,
# copied into each event's sample_max_stack, 16 bits: record --max-stack
# raises it up to this bound, and perf script reads every frame recorded.
# The kernel keeps a buffer of (N + 8) * 8 bytes per CPU for each of its
# four contexts while any perf session records call chains.
MAX_STACK = 65535
# kernel.perf_event_max_stack's default (perf's PERF_MAX_STACK_DEPTH): the
# limit of a recording whose metadata does not say it.
MAX_STACK_DEFAULT = 127

# The most stack perf copies for a sample in dwarf mode (--stack-size,
# --wait-stack-size): the kernel takes a multiple of 8 below 65535 (a
# sample's size is 16 bits), perf says "max 65528".
STACK_MAX = 65528
# dwarf mode's stack copy per sample: record's default (perf's is 8 KiB,
# about 15 Python frames of 3.13t; 32 KiB held docutils' deepest).
STACK_SIZE = 32768
# perf's own (--call-graph dwarf without a size): what record copied
# before its metadata said the size.
PERF_STACK_SIZE = 8192

# A frame in a trampolines' ELF file (jitring._jitsyms.TRAMP_NAME).
TRAMP_DSO = "jitring-tramp-"

HEAD = re.compile(r"^(.*?)\s+(\d+)/(\d+)\s+(?:(\d+)\.(\d{9}):)?")
FRAME = re.compile(r"^[ \t]+[0-9a-f]+(?: (.*))?$")


def sample_keys(path):
    """{(pid, tid, time): count} of the samples of perf.data @path, or
    None where it cannot be read here (script() then trusts the text's
    layout alone)."""
    from jitring import _perfdata
    keys = {}
    try:
        with _perfdata.PerfData(path) as pd:
            for pid, tid, t, *_ in pd.samples():
                k = (pid, tid, t)
                keys[k] = keys.get(k, 0) + 1
    except (_perfdata.PerfDataError, OSError):
        return None
    return keys


# perf script runs in parallel over this many time slices at most (one a
# CPU): its DWARF unwinding of each sample is most of a dwarf recording's
# finishing, and the slices' outputs, in order, are its output whole.
SCRIPT_SLICES = 4
# ... with at least this many samples a slice (fewer: one perf script).
SLICE_MIN = 1000


def slices(keys, n):
    """The perf script --time ranges ("start,stop" in s.ns, inclusive,
    open at both ends) of @n slices of about as many samples of @keys
    ({(pid, tid, time): count}), cut between two distinct times."""
    times = sorted({t for _, _, t in keys})

    def ts(t):
        return "%d.%09d" % divmod(t, 10**9)
    cuts = []
    for i in range(1, n):
        c = times[len(times) * i // n]
        if (not cuts or c > cuts[-1]) and c > times[0]:
            cuts.append(c)
    bounds = [None] + cuts + [None]
    return ["%s,%s" % ("" if a is None else ts(a),
                       "" if b is None else ts(b - 1))
            for a, b in zip(bounds, bounds[1:])]


def script_logs(n, tag=""):
    """The logs of run_script()'s @n slices: perf-script.log holds the
    first one's messages (perf warns of lost events in each, alike),
    perf-script-N.log the rest's; @tag goes before each name."""
    return [tag + ("perf-script.log" if i == 0 else "perf-script-%d.log" % i)
            for i in range(n)]


def run_script(steps, perf, out, data, keys, inline, stream=False,
               most=SCRIPT_SLICES, tag=""):
    """perf script of @data (in @out) into files, in parallel over up to
    @most time slices where there are CPUs and samples for it; returns
    the files, in order.  The logs are script_logs()'s (with @tag before
    each name, as before the files'), the slices' after the first kept
    only until they succeed.  With @stream, each slice's output is a
    pipe, read as it runs: returns (the processes, [None] a slice);
    check_script() checks them once read."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    least = int(os.environ.get("JITRING_PY_TEST_SLICE_MIN") or SLICE_MIN)
    n = min(most, cpus,
            max(1, sum(keys.values()) // max(1, least)) if keys else 1)
    ranges = slices(keys, n) if n > 1 else [None]
    parts = [os.path.join(out, "%sperf.script.txt.%d" % (tag, i))
             for i in range(len(ranges))]
    if stream:
        parts = [None] * len(parts)
    logs = [os.path.join(out, n) for n in script_logs(len(ranges), tag)]
    claim(out, [os.path.basename(p) for p in parts + logs if p])
    cmds = [perf + ["script", "-i", data, "--ns", "-F",
                    "comm,pid,tid,time,event,ip,sym,dso",
                    "--max-stack", str(MAX_STACK)] +
            ([] if inline else ["--no-inline"]) +
            (["--time", r] if r else []) for r in ranges]
    procs = steps.start_all(cmds, parts, logs, cwd=out)
    if stream:
        return procs, parts
    check_script(steps, procs, out, tag)
    return parts


def check_script(steps, procs, out, tag=""):
    """Wait for run_script()'s @procs and raise RecordError where one
    failed; drops the logs of the slices after the first."""
    rcs = steps.wait_all(procs, out)
    logs = [os.path.join(out, n) for n in script_logs(len(procs), tag)]
    for rc, log in zip(rcs, logs):
        if rc != 0:
            raise RecordError(failed("perf script", rc, log))
    for log in logs[1:]:
        os.unlink(log)


class Sample(NamedTuple):
    """One sample as script() read it (the CPU event's, or with record
    --wait a switch event's: jitring._wait tells them apart by event)."""
    pid: int
    comm: str           # the thread's command, escaped
    frames: tuple       # ((symbol, dso), ...) leaf first, escaped; one
                        # tuple shared by the samples of a stack
    tid: int
    time: int           # ns since boot (perf's clock); 0 where unknown
    event: str


class ProcessRow(NamedTuple):
    """A process of the profile: the tables' line of it."""
    samples: int
    pid: int
    command: str        # command_of()'s


class FunctionRow(NamedTuple):
    """A Python function of the profile: its samples."""
    total: int          # those with it on the stack
    self: int           # those with it the innermost Python frame
    name: str           # "py::qualname:/path/file.py"


class CutStats(NamedTuple):
    """The samples summarize() counted, for cut_note()."""
    samples: int        # the program's
    cut: int            # those whose stack was cut (is_cut())
    deep: int           # ... at perf's depth limit
    own: int            # jitring's own work, left out (own_work())


class Summary(NamedTuple):
    """What summarize() makes of the samples."""
    folded: dict        # stack (root first, the process first) -> samples
    processes: list     # ProcessRow, most samples first
    total: int          # the program's samples
    functions: list     # FunctionRow, in no order
    cut: CutStats


class Profile:
    """What every writer is handed: the recording folder's profile, built
    once by finish() from perf's output (summarize()'s @summary), and
    how the user asked to see it (@top lines a table, @browser opens the
    flame graph, @prog names the command in messages)."""

    def __init__(self, out, meta, summary, top=12, browser=False,
                 prog="record"):
        self.out = out          # the recording's folder
        # The recording's metadata (META): a Meta, made of a plain dict.
        self.meta = meta if isinstance(meta, Meta) else Meta(meta)
        self.folded = summary.folded
        self.processes = summary.processes
        self.functions = summary.functions
        self.total = summary.total
        self.cut = summary.cut
        self.no_python = no_python(summary.folded)
        self.early = 0          # samples before record --pid's window
        self.waits = None       # record --wait's jitring._wait.Waits
        self.top = top
        self.browser = browser
        self.prog = prog
        self._sorted = None

    def stacks(self):
        """The folded stacks as [(list of frames, samples)], in order."""
        if self._sorted is None:
            self._sorted = sorted(((list(k), n) for k, n in
                                   self.folded.items()),
                                  key=lambda r: r[0])
        return self._sorted


class Writer:
    """One output of a profile: a file in the folder or text on stdout.
    Each output is one subclass; finish() (record's and report's) runs
    the table of them (WRITERS) in order: those with files under the
    folder's lock, then those that print."""
    name = ""           # what the user selects it by
    files = ()          # the files it writes in the folder

    def wanted(self, profile):
        """Whether @profile has what this output shows (record --wait's
        outputs: its waits)."""
        return True

    def write(self, profile):
        raise NotImplementedError


# ScriptReader reads perf script's text this many characters at a time.
READ_CHUNK = 1 << 22


class ScriptReader:
    """Reads perf script's text, as script() has perf print it, into
    samples (feed(), end(), then samples): keys ({(pid, tid, time):
    count} of the samples perf.data holds, sample_keys()'s) or None,
    with names (jitring._jitsyms.FPNames, or with elf ELFNames) the
    trampolines' frames named, with raw the samples as read (emit()).

    perf prints a symbol as the dump or map gave it, line breaks
    included, so the text alone cannot tell a sample's first line from
    a name's: a line starts a sample only if its pid, tid and time are
    those of a sample perf.data holds (each taken once; where perf.data
    cannot be read here, only a line after a blank one); any other line
    that is not a frame's continues the name before it.  A block of
    lines between two blank lines whose first line starts a sample and
    whose every other line is a frame's is read whole (perf prints a
    sample so); any other block line by line, with the same result.
    Names and commands come back as jitring._flame.escape() writes
    them.  Samples of one stack share one tuple of frames."""

    def __init__(self, keys, names=None, elf=False, raw=False):
        from jitring._flame import escape
        self.keys = keys        # {(pid, tid, time): count}, or None
        self.names = names      # the trampolines' namer (fp, elf) or None
        self.elf = elf          # frames in a trampolines' ELF file
        self.raw = raw          # samples as (head, frames read)
        self.escape = escape
        self.samples = []       # the samples read, in order
        # A deep program's recording is millions of frame lines, most of
        # them repeats (the same return addresses): each distinct line is
        # matched, split and escaped once (lrests: line -> its "rest";
        # frames: rest -> (symbol, dso[, address])), and each distinct
        # stack is named, escaped and given its hosts' files once
        # (finals), a tuple shared by its samples.
        self.lrests, self.frames, self.escaped, self.finals = {}, {}, {}, {}
        self.lframes = {}       # a frame line -> its frame
        self.named = {}         # (pid, stack) -> (since, until, its final)
        self.uniq = {}          # raw: a stack as read -> its one tuple
        # The reader's state between lines: the sample being read (head),
        # its rests as read (rests) and, where it was read whole as one
        # block of frame lines, its frames (fast) with the blank line
        # after it not yet in rests (tail; rests holds its frame lines
        # then); whether the line before was blank.
        self.head = None
        self.rests = []
        self.fast = None
        self.tail = False
        self.blank = True

    def _frame(self, rest):
        # "<sym> (<dso>)": the symbol may hold spaces.  A frame in a
        # trampolines' ELF file comes as (address, "<sym> (<dso>)") and
        # keeps its address for ELFNames.
        text = rest[1] if type(rest) is tuple else rest
        sym, sep, dso = text.rpartition(" (")
        if not sep:
            sym, dso = text, ""
        fr = (sym.strip() or "[unknown]", dso.rstrip(")").strip())
        if text is not rest:
            fr += (rest[0],)
        self.frames[rest] = fr
        return fr

    def _line_rest(self, line):
        """The rest of frame line @line, or None for any other line."""
        m = FRAME.match(line)
        if not m:
            return None
        rest = m.group(1) or ""
        if self.elf and TRAMP_DSO in rest:
            rest = (int(line.split(None, 1)[0], 16), rest)
        self.lrests[line] = rest
        return rest

    def _escaped_frame(self, fr):
        escape = self.escape
        e = self.escaped[fr] = (escape(fr[0]), escape(fr[1]))
        return e

    def _final(self, stack):
        # @stack: frames (symbol, dso) as resolved, a tuple.
        escaped, escaped_frame = self.escaped, self._escaped_frame
        f = self.finals[stack] = tuple(_inlined(
            [escaped.get(fr) or escaped_frame(fr) for fr in stack]))
        return f

    def emit(self, h, stack):
        """Adds the sample of head @h (pid, comm, tid, time in ns, event)
        and frames @stack as read (a tuple): a Sample, its frames named
        and escaped, or with raw (h, stack) as they are."""
        if self.raw:
            self.samples.append((h, self.uniq.setdefault(stack, stack)))
            return
        finals, final = self.finals, self._final
        if self.elf:
            # Named once per stack and process while no frame of it
            # changes its name (a trampoline's copy given to another
            # function).
            k = (h[0], stack)
            c = self.named.get(k)
            t = h[3]
            if c is None or not c[0] <= t < c[1]:
                pos = [i for i, fr in enumerate(stack) if len(fr) == 3]
                nm, lo, hi = self.names.named(h[0], t, [stack[i][1:]
                                                         for i in pos])
                st = list(stack)
                for i, n in zip(pos, nm):
                    st[i] = (n, "") if n else st[i][:2]
                st = tuple(st)
                c = self.named[k] = (lo, hi, finals.get(st) or final(st))
            f = c[2]
        elif self.names:
            st = tuple(self.names.resolve(h[2], h[3], list(stack)))
            f = finals.get(st) or final(st)
        else:
            f = finals.get(stack) or final(stack)
        self.samples.append(Sample(h[0], self.escape(h[1]), f, h[2], h[3],
                                   h[4]))

    def _starts(self, line, after_blank):
        """The head (pid, comm, tid, time, event) of @line where it starts
        a sample (its pid, tid and time a sample's of keys, each taken
        once; without keys, @after_blank), else None."""
        m = HEAD.match(line)
        if not m:
            return None
        t = int(m.group(4)) * 10**9 + int(m.group(5)) \
            if m.group(4) else 0
        h = (int(m.group(2)), m.group(1).strip(), int(m.group(3)), t,
             line[m.end():].strip().rstrip(":"))
        keys = self.keys
        if keys is None:
            return h if after_blank else None
        k = (h[0], h[2], t)
        if not keys.get(k):
            return None
        keys[k] -= 1
        return h

    def _done(self):
        """Emits the sample read last."""
        if self.fast is not None:
            self.emit(self.head, self.fast)
            return
        rests = self.rests
        if rests:
            last = rests[-1]      # the blank line after it
            rests[-1] = (last[0], last[1].rstrip("\n")) \
                if type(last) is tuple else last.rstrip("\n")
        frames, frame = self.frames, self._frame
        self.emit(self.head, tuple([frames.get(rest) or frame(rest)
                                    for rest in rests]))

    def _line_by_line(self, lines, h0=None):
        """Reads @lines one at a time (a block the fast way cannot
        take: a name's line breaks); @h0: the first line's head, where
        it was already taken."""
        lrests = self.lrests
        for j, line in enumerate(lines):
            h = None
            if j == 0 and h0 is not None:
                h = h0
            elif line and line[0] not in " \t":
                h = self._starts(line, self.blank or self.head is None)
            self.blank = not line.strip()
            if h is not None:
                if self.head is not None:
                    self._done()
                self.head, self.rests, self.fast, self.tail = \
                    h, [], None, False
                continue
            if self.head is None:
                continue        # nothing perf.data knows of
            if self.tail:
                # A block read whole goes on: its rests as read line by
                # line, with the blank line after it.
                rests = self.rests = [lrests[x] for x in self.rests]
                self.fast, self.tail = None, False
                rests[-1] = (rests[-1][0], rests[-1][1] + "\n") \
                    if type(rests[-1]) is tuple else rests[-1] + "\n"
            else:
                rests = self.rests
                self.fast = None
            rest = lrests.get(line)
            if rest is None:
                rest = self._line_rest(line)
            if rest is not None:
                rests.append(rest)
            elif rests:
                if type(rests[-1]) is tuple:
                    rests[-1] = (rests[-1][0], rests[-1][1] + "\n" + line)
                else:
                    rests[-1] += "\n" + line     # a name's next line

    def _block(self, text):
        """A block of lines perf script printed between blank lines,
        with the blank line after it: a sample read whole where its
        first line starts one and every other is a frame's, else line
        by line."""
        lines = text.split("\n")
        first = lines[0]
        h = None
        if first and first[0] not in " \t":
            h = self._starts(first, self.blank or self.head is None)
            if h is not None and len(lines) > 1:
                rest = lines[1:]
                lframes = self.lframes
                fr = list(map(lframes.get, rest))
                if None in fr:
                    lrests, frames = self.lrests, self.frames
                    for j, x in enumerate(rest):
                        if fr[j] is None:
                            r = lrests.get(x)
                            if r is None:
                                r = self._line_rest(x)
                            if r is None:
                                break
                            fr[j] = lframes[x] = frames.get(r) or \
                                self._frame(r)
                if None not in fr:
                    if self.head is not None:
                        self._done()
                    self.head, self.rests, self.tail, self.blank = \
                        h, rest, True, True
                    self.fast = tuple(fr)
                    return
        self._line_by_line(lines + [""], h)

    def feed(self, source):
        """Reads @source, perf script's output (a slice of it) whole: a
        text file (read READ_CHUNK characters at a time) or an iterable
        of chunks of text, cut anywhere.  end() ends it."""
        if hasattr(source, "read"):
            source = iter(functools.partial(source.read, READ_CHUNK), "")
        block = self._block
        left = ""
        for chunk in source:
            text = left + chunk
            cut = text.rfind("\n\n")
            if cut < 0:
                left = text
                continue
            left = text[cut + 2:]
            for b in text[:cut].split("\n\n"):
                block(b)
        if left:
            lines = left.split("\n")
            self._line_by_line(lines[:-1] if left.endswith("\n")
                               else lines)

    def end(self):
        """Ends the text fed (a slice of perf script's output): emits the
        sample read last; what is fed next starts anew."""
        if self.head is not None:
            self._done()
        self.head, self.rests, self.fast, self.tail, self.blank = \
            None, [], None, False, True


def script(steps, perf, out, keep=False, inline=False, fp=False, elf=False,
           data=None, raw=False, pre=(), tag="", most=SCRIPT_SLICES):
    """perf script into perf.script.txt (kept if @keep); returns
    [Sample], frames (symbol, dso) from the leaf to the root (record
    --wait tells its two events apart by the event: jitring._wait).
    Without
    @inline, native functions inlined into others are not listed (perf
    runs addr2line per address for them: 13.5 s instead of
    1.3 s for 10,000 functions' recording).  With @fp (a frame-pointer
    recording, not injected), perf.data is read and the trampolines'
    frames are named by jitring._jitsyms.FPNames; with @elf (a dwarf
    recording whose trampolines were an ELF file perf unwinds through,
    not injected either), by jitring._jitsyms.ELFNames.

    The text is read by ScriptReader (its rules there).

    @data names the file read (in @out) where it is not perf.data (fp,
    elf) or perf.jit.data, @tag goes before the names of perf script's
    files and logs, and @most bounds its slices.  With @raw (the reading
    of a segment while the program runs: jitring._live), the samples
    come back as (head, frames read) to be pickled: no frame named, no
    name escaped.  @pre: files of such samples, named and escaped here
    with the rest, as if read from @data's text."""
    direct = fp or elf
    data = os.path.join(out, data or ("perf.data" if direct
                                      else "perf.jit.data"))
    path = os.path.join(out, "perf.script.txt")
    keys = sample_keys(data)
    if keep:
        parts = run_script(steps, perf, out, os.path.basename(data), keys,
                           inline, most=most, tag=tag)
        procs = []
    else:
        # Each slice read from its pipe as perf writes it.
        procs, parts = run_script(steps, perf, out, os.path.basename(data),
                                  keys, inline, stream=True, most=most,
                                  tag=tag)
    if keep:
        with open(path, "wb") as f:
            for p in parts:
                with open(p, "rb") as g:
                    shutil.copyfileobj(g, f, 1 << 20)
    names = None
    if direct and not raw:
        from jitring import _jitsyms, _perfdata
        try:
            names = (_jitsyms.FPNames if fp else _jitsyms.ELFNames)(
                os.path.join(out, "perf.data"))
        except (_perfdata.PerfDataError, _jitsyms.DumpError, OSError) as e:
            raise RecordError("cannot read %s/perf.data: %s" % (out, e))
    reader = ScriptReader(keys, names, elf, raw)
    _read_slices(reader, procs, parts, keep)
    if procs:
        check_script(steps, procs, out, tag)
    import pickle
    for p in pre:
        with open(p, "rb") as f:
            for h, stack in pickle.load(f):
                reader.emit(h, stack)
    return reader.samples


def _read_slices(reader, procs, parts, keep):
    """@reader reads run_script()'s slices @parts, in order: files, or
    where None the pipes of @procs (perf script's processes), the
    slices after the first each in a process of its own."""
    kids = []
    try:
        if len(parts) > 1 and not keep:
            # The slices after the first each read in a process of its
            # own, forked now with the reader's state: the text's reading
            # is as much CPU as perf script's unwinding, and it is
            # Python's, one CPU a process.
            for i in range(1, len(parts)):
                kids.append(_fork_reader(functools.partial(
                    _child_read, reader, procs, parts, i)))
                procs[i].stdout.close()     # the child's now
            _read_slice(reader, procs, parts, 0)
            while kids:
                pid, fd = kids.pop(0)
                got = _reader_result(pid, fd)
                reader.samples.extend(got if reader.raw
                                      else map(_as_sample, got))
        else:
            for i in range(len(parts)):
                _read_slice(reader, procs, parts, i)
    except BaseException:
        _end_readers(kids)
        end_procs(procs)
        raise


def _read_slice(reader, procs, parts, i):
    """@reader reads slice @i: @parts[i], a file (deleted once open), or
    where None the pipe of @procs[i]."""
    p = parts[i]
    if p is None:
        with io.TextIOWrapper(procs[i].stdout, errors="replace",
                              newline="\n") as f:
            reader.feed(f)
    else:
        if procs:
            procs[i].wait()     # its file is whole
        with open(p, errors="replace", newline="\n") as f:
            os.unlink(p)    # read from the open file; nothing kept
            reader.feed(f)
    # A slice ends with its last sample (slices are cut between two
    # samples' times).
    reader.end()


def _child_read(reader, procs, parts, i):
    """_read_slice() in a forked reader: its samples, to return."""
    # The other slices' pipes closed here: a reader that fails leaves
    # its perf script none to block on.
    for j, p in enumerate(procs):
        if j != i and not p.stdout.closed:
            p.stdout.close()
    _read_slice(reader, procs, parts, i)
    if reader.raw:
        return reader.samples
    # As plain tuples: a Sample pickles through Python code, 6 times a
    # tuple's time (1.2 s for 300,000), and the parent loads them all.
    return list(map(tuple, reader.samples))


# A tuple of a Sample's fields, a forked reader's, made a Sample again
# (without Sample()'s Python code).
_as_sample = functools.partial(tuple.__new__, Sample)


def _fork_reader(read):
    """(pid, fd) of a child process that runs @read() and leaves what it
    returns, pickled, in a memfd (fd) for _reader_result(); it ends by
    itself, whatever happens, and a signal ends it as it would a
    program."""
    import pickle
    fd = os.memfd_create("jitring-script", os.MFD_CLOEXEC)
    pid = os.fork()
    if pid:
        return pid, fd
    code = 1
    try:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        try:
            got = ("ok", read())
        except RecordError as e:
            got = ("error", str(e))
        with os.fdopen(fd, "wb", closefd=False) as f:
            pickle.dump(got, f, pickle.HIGHEST_PROTOCOL)
        code = 0
    finally:
        os._exit(code)


def _reader_result(pid, fd):
    """What _fork_reader()'s child @pid returned; RecordError where it
    failed."""
    import pickle
    _, status = os.waitpid(pid, 0)
    try:
        if os.waitstatus_to_exitcode(status) != 0:
            raise RecordError("reading perf script's output failed in "
                              "process %d (status %d)"
                              % (pid, os.waitstatus_to_exitcode(status)))
        os.lseek(fd, 0, os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as f:
            what, got = pickle.load(f)
    finally:
        os.close(fd)
    if what != "ok":
        raise RecordError(got)
    return got


def _end_readers(kids):
    """Ends _fork_reader()'s children @kids [(pid, fd)] still there."""
    for pid, fd in kids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        os.close(fd)


def _inlined(stack):
    """perf lists a function inlined into another before it, at the same
    address, with "(inlined)" for its file: give it its host's file."""
    host = ""
    for i in range(len(stack) - 1, -1, -1):
        s, d = stack[i]
        if d == "inlined":
            stack[i] = (s, host)
        else:
            host = d
    return stack


def processes(out):
    """{pid: (command, how)} of the Python processes jitring profiled."""
    procs = {}
    try:
        with open(os.path.join(out, PROCS), errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    procs[int(r["pid"])] = r
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return procs


# The package's modules: their frames are jitring's, never the program's.
OWN = ("__init__.py", "__main__.py", "_autostart.py", "_record.py",
       "_report.py", "_flame.py", "_attach.py")
# The runner's frames (python -m jitring PROGRAM) that call the program:
# in a sample of the program, they are above its first frame.
RUNNER = ("<module>", "main", "run_script", "run_module")
# Names of threads at work for jitring: jitring.OWN_NAME (a thread while
# it starts or stops jitring, and the runner's until the program begins)
# and the library's flush, write and reaper threads.
OWN_THREADS = ("jitring-own", "jitring-flush", "jitring-write",
               "jitring-reaper")


# The function of the request record --pid has a target run
# (_attach.REQUEST): a thread asked after jitring started (one that woke
# late) runs it inside the window.  sys.remote_exec runs the script's text
# as "<string>" (3.14, 3.15); its file is in record's runtime folder.
REQUEST_FUNC = "_jitring_request"
REQUEST_FILE = re.compile(r"^(<string>|/tmp/jitring-\d+/attach-\d+\.py)$")


# Pure, and called for every frame of every sample: cached.
@functools.lru_cache(maxsize=None)
def _package_frame(name):
    """For a Python frame of jitring's package, or of the attach request
    script, (qualname, module file); else None."""
    qual, _, fn = name[4:].rpartition(":")
    parts = fn.rsplit("/", 2)
    if len(parts) == 3 and parts[1] == "jitring" and parts[2] in OWN:
        return qual, parts[2]
    if qual == REQUEST_FUNC and REQUEST_FILE.match(fn):
        return qual, "attach-request"
    return None


def _runner_frame(where):
    return where is not None and where[1] == "__main__.py" and \
        where[0] in RUNNER


@functools.lru_cache(maxsize=None)
def _own_frame(name):
    """A Python frame of jitring's package (its runner, its at-exit stop)
    or of runpy."""
    fn = name.rsplit(":", 1)[-1] if ":" in name else ""
    return (_package_frame(name) is not None or
            fn.endswith("/runpy.py") or fn == "<frozen runpy>")


@functools.lru_cache(maxsize=None)
def _own_dso(dso):
    """jitring's extension (libjitring is linked into it) or library."""
    return os.path.basename(dso).startswith(("_jitring.", "libjitring"))


# A frame's kind for own_work() and program_stack(), as bits: every
# sample's frames are classified, the same few thousand frames again and
# again (_KIND caches each).
_PY = 1         # a Python frame
_OWN = 2        # ... of jitring's package or runpy (_own_frame())
_PKG = 4        # ... of jitring's package, not its runner's
_RUNNER = 8     # ... of jitring's runner (_runner_frame())
_GLUE = 16      # a native frame of the interpreter or jitring
_OWN_DSO = 32   # ... of jitring (_own_dso())
_EVAL = 64      # the interpreter's eval loop
_KIND = {}


def _kind(fr):
    s, d = fr
    k = 128
    if s.startswith("py::"):
        k |= _PY
        if _own_frame(s):
            k |= _OWN
        where = _package_frame(s)
        if _runner_frame(where):
            k |= _RUNNER
        elif where:
            k |= _PKG
    if _own_dso(d):
        k |= _OWN_DSO | _GLUE
    elif _interp_dso(d):
        k |= _GLUE
    if s == "_PyEval_EvalFrameDefault":
        k |= _EVAL
    _KIND[fr] = k
    return k


# The bits any of a list of kinds has (a loop in C: a stack has a hundred
# frames and more).
_any_bits = functools.partial(functools.reduce, operator.or_)


def _kinds(frames):
    ks = list(map(_KIND.get, frames))
    if None in ks:
        ks = [k or _kind(fr) for k, fr in zip(ks, frames)]
    return ks


def own_work(comm, frames, ks=None):
    """Whether a sample (@frames leaf first; @ks: _kinds(@frames) where
    the caller has them) is jitring's own work, not the program's:
    python/README.md, "What the profile leaves out"."""
    if comm in OWN_THREADS:
        return True
    if ks is None:
        ks = _kinds(frames)
    inner = None        # the innermost Python frame
    for i, k in enumerate(ks):
        if k & _PY:
            inner = i
            break
    if inner is None and comm[:1] == ":" and comm[1:].isdigit():
        # perf's name for a thread whose name it has not seen: record's
        # fork of the program, before it execs the interpreter.
        return True
    # jitring's native code below it (or anywhere, with no Python
    # frame): start, stop, flush, the hook's lookup of a function's copy.
    if any(k & _OWN_DSO for k in ks[:inner]):
        return True
    if inner is None:
        return False
    # A function of jitring's called by whatever (its at-exit stop, the
    # fork hooks), or the runner at work of its own.
    if _any_bits(ks[inner:]) & _PKG:
        return True
    return bool(ks[inner] & _RUNNER)


@functools.lru_cache(maxsize=None)
def _interp_dso(dso):
    base = os.path.basename(dso)
    return base.startswith(("python", "libpython"))


@functools.lru_cache(maxsize=None)
def label(sym, dso):
    """A frame's name: a Python function as jitring named it, a native
    one with its file's name (perf's "[unknown]", "[kernel]" as they
    are)."""
    if dso.startswith("[kernel"):
        return sym + " [kernel]"
    if sym.startswith("py::") or not dso or dso.startswith("["):
        return sym
    return "%s [%s]" % (sym, os.path.basename(dso))


def program_stack(frames, ks=None):
    """The frames a user reads, root first (see the module's doc); @ks:
    _kinds(@frames) where the caller has them."""
    root_first = frames[::-1]
    ks = _kinds(root_first) if ks is None else ks[::-1]
    py = [i for i, k in enumerate(ks) if k & _PY]
    user = [i for i in py if not ks[i] & _OWN]
    if not user:
        # No Python frame, or only the runner's (start-up): the native
        # frames, from below the runner's if any.
        start = py[-1] + 1 if py else 0
        return [label(s, d) for s, d in root_first[start:]] or \
            ["[interpreter start-up]"]
    first, last = user[0], py[-1]
    keep = []
    for i in range(first, len(root_first)):
        k = ks[i]
        if k & _PY:
            if not k & _OWN:
                keep.append(root_first[i][0])
        elif i < last and k & _GLUE:
            continue            # the call machinery between Python frames
        elif k & _EVAL and ks[i - 1] & _PY:
            continue            # the Python frame's own body
        else:
            keep.append(label(*root_first[i]))
    return keep


def program_argv(argv):
    """@argv without jitring's runner: python -m jitring --dir D --engine
    E prog args -> python prog args."""
    if argv[1:3] != ["-m", "jitring"]:
        return argv
    i = 3
    while i + 1 < len(argv) and argv[i] in ("--dir", "--engine"):
        i += 2
    return argv[:1] + argv[i:]


def command_of(pid, comm, procs):
    """The command line shown for @pid, each control character escaped
    (jitring._flame.escape())."""
    from jitring._flame import escape
    r = procs.get(pid)
    if not r:
        # A Python process that never started jitring: its Python frames
        # have no names (the package is not in its interpreter, or
        # --no-children).
        return escape(comm) + (" (without jitring)"
                               if comm.startswith("python") else "")
    argv = r.get("argv")
    argv = program_argv([str(a) for a in argv]
                        if isinstance(argv, list) else [])
    cmd = escape(" ".join(os.path.basename(a) if i == 0 else
                          " ".join(a.split())
                          for i, a in enumerate(argv))) or escape(comm)
    if len(cmd) > 70:
        cmd = cmd[:67] + "..."
    if r.get("how") == "fork":
        cmd += " (fork of %s)" % r.get("ppid")
    return cmd


# A thread's first frames: glibc's, the interpreter's main and its
# threads' start.  A stack that reaches one is whole; frame-pointer
# unwinding often stops in garbage just below them (glibc keeps no frame
# pointers), so they are looked for anywhere in the stack, not only at its
# end.
ROOTS = frozenset(("_start", "__libc_start_main", "__libc_start_call_main",
                   "clone", "clone3", "__clone", "__clone3",
                   "__clone_internal", "start_thread", "main",
                   "Py_BytesMain", "Py_Main", "Py_RunMain", "pymain_main",
                   "thread_run", "pythread_wrapper"))

# The frame that stands for what a cut stack lost, at its root.
CUT = "[stack cut: outer frames not recorded]"


def _root_like(sym):
    """A Python frame a thread's Python stack starts with: a module's body
    (the program's, or one run by -m or exec) or threading's bootstrap."""
    return sym.startswith("py::<module>:") or \
        sym.startswith("py::Thread._bootstrap")


def is_cut(frames):
    """Whether a sample's stack (leaf first) stops before its thread's
    first frame (perf's depth limit, dwarf mode's stack copy, or code perf
    cannot unwind) and before its outermost Python frame: a stack that
    lost only the interpreter's start-up frames under the program's
    <module> is whole to the reader.  A stack with no user frame at all is
    whole."""
    user = False
    for sym, dso in frames:
        if sym in ROOTS:
            return False
        user = user or not dso.startswith("[kernel")
    if not user:
        return False
    for sym, dso in reversed(frames):
        if sym.startswith("py::") and not _own_frame(sym):
            return not _root_like(sym)
    return True


def cut_note(meta, n, cut, deep, own=0):
    """The lines that say how many samples were left out as jitring's
    own work, and how many stacks were cut and what would record them
    whole; [] when neither."""
    lines = []
    if own:
        lines.append("%d sample%s of jitring's own work (its start, stop "
                     "and bookkeeping in the program's processes) left "
                     "out." % (own, "" if own == 1 else "s"))
    if not n or cut * 1000 < n:         # under 0.1 %
        return lines
    limit = meta.get("max_stack") or MAX_STACK_DEFAULT
    lines.append("%.1f%% of samples have a cut stack (%s at the root of "
                 "the flame graph): the totals of the outer functions are "
                 "too low by up to that share." % (100.0 * cut / n, CUT))
    if meta.get("call_graph") == "fp":
        if deep:
            # About 4 native frames a Python call (sid's 3.15): 1024
            # held 256 Python frames of deep_prog.py, 127 held 32.
            more = max(1024, 4 * limit)
            lines.append(
                "  %.1f%% hit perf's limit of %d frames (each Python call "
                "is several native frames); to record deeper stacks, %s "
                "--max-stack %d (kernel.perf_event_max_stack=%d for the "
                "recording only), or with --call-graph dwarf --stack-size "
                "%d (no frame limit; stack copies make a far bigger "
                "folder)"
                % (100.0 * deep / n, limit,
                   "record with" if os.geteuid() == 0 else
                   "root can record with", more, more, STACK_MAX))
        if cut > deep:
            lines.append(
                "  %.1f%% stop in native code perf cannot unwind without "
                "frame pointers (--call-graph dwarf reads those)"
                % (100.0 * (cut - deep) / n))
    else:
        size = meta.get("stack_size") or PERF_STACK_SIZE
        if size < STACK_MAX:
            lines.append(
                "  dwarf mode copied %d bytes of each sample's stack; "
                "record with --stack-size %d for deeper stacks (perf.data "
                "grows with it)"
                % (size, min(STACK_MAX, max(STACK_SIZE, 2 * size))))
    return lines


def _thread_start(sym, dso):
    """A frame a thread's stack starts in: one of ROOTS, or libc's (where
    its symbols are not known: a stripped libc's start_thread and
    __libc_start_main are "[unknown]")."""
    return sym in ROOTS or os.path.basename(dso).startswith("libc.so")


def window_on(meta):
    """Where record --pid's window starts, in perf's clock (ns), or 0:
    record enables perf before it asks the service to start jitring
    (perf must see the start's mappings), so the samples until the
    service has started it name no Python function; the service's clock
    at its start (window_on_ns, CLOCK_MONOTONIC as perf's -k 1) starts
    the window."""
    on = meta.get("window_on_ns")
    return on if type(on) is int and meta.get("attached") else 0


def in_window(samples, meta):
    """(@samples, how many left out): those before window_on() left
    out."""
    on = window_on(meta)
    if not on:
        return samples, 0
    kept = [s for s in samples if s[4] >= on]
    return kept, len(samples) - len(kept)


def with_running(frames, outer):
    """The program stack (root first) of a sample (@frames leaf first)
    of a thread whose Python frames @outer (root first) ran throughout
    the window, and whether it was cut.

    @outer never went through a trampoline: perf has them as the
    interpreter's eval loop, unnamed, outside the sample's outermost
    named frame, and they are its outermost Python frames (they ran
    before and after it).  So they are put above its outermost named
    frame; a frame of its that was running at the window's open and had
    returned by its close (unnamed too) is left out.  The stack counts as
    cut only where it stops before the thread's start (_thread_start())
    outside its outermost named frame: [stack cut] then stands between
    @outer and what it has (named frames may be lost there).  A sample
    with no named frame is @outer's innermost frame (or one it called
    before the window) at work: @outer and the native frames inside the
    innermost eval loop (a sleep, a C call), or, where the interpreter's
    symbols are not known, the native frames outside the interpreter at
    the leaf (all but the thread's start where the sample has no frame
    of the interpreter)."""
    named = [i for i, (s, d) in enumerate(frames)
             if s.startswith("py::") and not _own_frame(s)]
    if named:
        st = program_stack(frames)
        cut = is_cut(frames) and \
            not any(_thread_start(s, d) for s, d in frames[named[-1]:])
        return list(outer) + ([CUT] if cut else []) + st, cut
    at_eval = at_interp = None
    for i, (s, d) in enumerate(frames):
        if s == "_PyEval_EvalFrameDefault":
            at_eval = i
            break
        if at_interp is None and _interp_dso(d):
            at_interp = i
    inner = at_eval if at_eval is not None else at_interp
    leaf = frames[:inner] if inner is not None else \
        [(s, d) for s, d in frames if not _thread_start(s, d)]
    return list(outer) + [label(s, d) for s, d in reversed(leaf)], False


def _classify(comm, frames, limit, outer=None):
    """(the sample's program stack as a tuple, whether it was cut, whether
    at perf's depth limit), or None for jitring's own work.  @outer: the
    frames that ran throughout the window in the sample's thread."""
    ks = _kinds(frames)
    if own_work(comm, frames, ks):
        return None
    if outer:
        st, cut = with_running(frames, outer)
    else:
        st = program_stack(frames, ks)
        cut = is_cut(frames)
        if cut:
            st.insert(0, CUT)
    return tuple(st), cut, cut and len(frames) >= limit - 2


def summarize(samples, procs, top_pid, limit=127, outer=None):
    """The Summary of @samples: its folded maps a root-first tuple (the
    process first) to its count; its cut counts the program's samples,
    those cut, those cut at perf's depth limit of @limit frames less the
    context markers it may count, and jitring's own samples left out,
    for cut_note().  @outer: (pid, running(out, pid)) of record --pid's
    service, or None."""
    o_pid, o_tids = outer or (None, {})
    stacks, per_pid, comms = {}, {}, {}
    self_n, total_n = {}, {}
    cut = deep = own = 0
    # Samples of one stack are classified once: their frames are shared
    # tuples (script()), and a profile repeats its stacks.
    seen = {}
    for pid, comm, frames, tid, _, _ in samples:
        if top_pid is not None and pid != top_pid:
            continue
        o = o_tids.get(tid) if pid == o_pid else None
        k = (comm, tuple(frames), o)
        c = seen.get(k, seen)
        if c is seen:
            c = seen[k] = _classify(comm, frames, limit, o)
        if c is None:
            own += 1
            continue
        key, was_cut, at_limit = c
        cut += was_cut
        deep += at_limit
        per_pid[pid] = per_pid.get(pid, 0) + 1
        comms.setdefault(pid, comm)
        stacks[(pid, key)] = stacks.get((pid, key), 0) + 1
    for (pid, key), n in stacks.items():
        py = [s for s in key if s.startswith("py::")]
        if py:
            self_n[py[-1]] = self_n.get(py[-1], 0) + n
            for name in set(py):
                total_n[name] = total_n.get(name, 0) + n
    total = sum(per_pid.values())
    names = {pid: "%s [%d]" % (command_of(pid, comms[pid], procs), pid)
             for pid in per_pid}
    folded = {}
    for (pid, key), n in stacks.items():
        k = (names[pid],) + key
        folded[k] = folded.get(k, 0) + n
    rows = [FunctionRow(total_n[n], self_n.get(n, 0), n) for n in total_n]
    per = sorted((ProcessRow(n, pid, command_of(pid, comms[pid], procs))
                  for pid, n in per_pid.items()), key=lambda r: -r.samples)
    return Summary(folded, per, total, rows,
                   CutStats(total, cut, deep, own))


def lost_line(out):
    """One line for perf's warnings about lost data, or None.  perf
    script's own ("Processed N events and lost M chunks!") counts the
    records of the file it read, which record may have read in segments
    (jitring._live): what perf lost is counted from the recording's
    records instead, the same however it was read."""
    lost = []
    for log in ("perf-record.log", "perf-inject.log"):
        try:
            with open(os.path.join(out, log), errors="replace") as f:
                for line in f:
                    if "lost" in line.lower() or "LOST" in line:
                        lost.append(line.strip())
        except OSError:
            pass
    chunks, events, samples = lost_records(out)
    if chunks or samples:
        # perf record's LOST_SAMPLES count the kernel's LOST events'
        # samples: the one or the other.
        lost.append("lost %d %s%s (its buffers were full: check IO/CPU "
                    "overload)" % (samples or events,
                                   "samples" if samples else "events",
                                   " in %d chunks" % chunks if chunks
                                   else ""))
    if not lost:
        return None
    return "perf warned: %s%s (details: %s/perf-*.log)" % (
        lost[0], " (and %d more)" % (len(lost) - 1) if len(lost) > 1
        else "", out)


def lost_records(out):
    """(chunks, events, samples): the LOST records of the recording in
    @out and the events they lost, and the samples its LOST_SAMPLES
    records lost; zeros where it cannot be read."""
    from jitring import _perfdata
    chunks = events = samples = 0
    for name in ("perf.jit.data", "perf.data"):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        try:
            with _perfdata.PerfData(path) as pd:
                for typ, _, off, size in pd.records_of(
                        _perfdata.PERF_RECORD_LOST,
                        _perfdata.PERF_RECORD_LOST_SAMPLES):
                    if typ == _perfdata.PERF_RECORD_LOST and size >= 24:
                        chunks += 1
                        events += struct.unpack_from("<Q", pd.m, off + 16)[0]
                    elif typ == _perfdata.PERF_RECORD_LOST_SAMPLES and \
                            size >= 16:
                        samples += struct.unpack_from("<Q", pd.m, off + 8)[0]
        except (_perfdata.PerfDataError, OSError):
            return 0, 0, 0
        break
    return chunks, events, samples


# The standard library and site-packages (Debian's dist-packages for
# every 3.X: /usr/lib/python3/dist-packages).
LIBDIR = re.compile(r"^.*/lib/python3(?:\.\d+t?)?/"
                    r"(?:(?:site|dist)-packages/)?")


def fmt_name(name, cwd=None):
    """A table's name for a function: qualname:file, the file relative to
    the standard library, site-packages or the program's folder (@cwd: a
    folder, or program_dirs()'s, the first that holds the file)."""
    if not name.startswith("py::"):
        return name
    qual, _, fn = name[4:].rpartition(":")
    short = LIBDIR.sub("", fn)
    if short == fn and cwd:
        for d in (cwd,) if isinstance(cwd, str) else cwd:
            d = d.rstrip("/")
            if d and fn.startswith(d + "/"):
                short = fn[len(d) + 1:]
                break
    return "%s:%s" % (qual, short)


def program_dirs(meta):
    """The folders the tables give file names relative to, the most
    specific first: a script's folder as python names the script (its
    path joined to the working folder, not resolved) and as the modules
    beside it are found (resolved: sys.path[0]), whether the script was
    given by a relative or an absolute path; then the working folder
    (python -m's sys.path[0]).  record --pid: the working folder."""
    cwd = meta.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return ()
    cmd = meta.get("command") or []
    dirs = []
    if cmd and isinstance(cmd[0], str) and cmd[0] != "-m" and \
            not meta.get("attached"):
        path = os.path.join(cwd, cmd[0])
        dirs = [os.path.dirname(path),
                os.path.dirname(os.path.realpath(path))]
    return tuple(dirs + [cwd])


# The tables' line for the samples with no Python frame on their stack.
NO_PYTHON = ("(no Python frame: the interpreter's start-up and exit, "
             "threads in native code)")


def no_python(folded):
    """The samples of @folded (summarize()'s) with no Python frame."""
    return sum(n for k, n in folded.items()
               if not any(f.startswith("py::") for f in k[1:]))


class Tables(Writer):
    """The tables on stdout: the processes, then the hottest Python
    functions by total and by self; the samples with no Python frame
    (no_python()) are the last line of each functions' table, so that
    the self column adds up."""
    name = "tables"

    def write(self, profile):
        meta, total, top = profile.meta, profile.total, profile.top
        per, rows, nopy = profile.processes, profile.functions, \
            profile.no_python
        print()
        if not total:
            print("jitring record: no samples (did the program run long "
                  "enough?)")
            return
        print("%d samples of %s at %s Hz in %d process%s:"
              % (total, meta.event, meta.freq, len(per),
                 "" if len(per) == 1 else "es"))
        print("%8s %8s  %s" % ("pid", "samples", "command"))
        for r in per[:max(top, 8)]:
            print("%8d %7.1f%%  %s" % (r.pid, 100.0 * r.samples / total,
                                       r.command))
        if len(per) > max(top, 8):
            print("%8s %8s  (%d more in %s)"
                  % ("", "", len(per) - max(top, 8),
                     os.path.join(profile.out, "stacks.folded")))
        if not rows:
            print("\nno sample has a Python function on its stack")
            return
        by_total = sorted(rows, key=lambda r: (-r.total, -r.self,
                                               r.name))[:top]
        by_self = sorted(rows, key=lambda r: (-r.self, -r.total,
                                              r.name))[:top]
        by_self = [r for r in by_self if r.self]
        dirs = program_dirs(meta)
        for title, view in (("Hottest Python functions by total (the "
                             "function and all it calls; share of all "
                             "samples):", by_total),
                            ("By self (the innermost Python function; "
                             "native code it calls counts to it):",
                             by_self)):
            print("\n" + title)
            print("%8s %8s  %s" % ("total", "self", "function"))
            for r in view:
                print("%7.1f%% %7.1f%%  %s"
                      % (100.0 * r.total / total, 100.0 * r.self / total,
                         fmt_name(r.name, dirs)))
            if nopy:
                share = 100.0 * nopy / total
                print("%7.1f%% %7.1f%%  %s" % (share, share, NO_PYTHON))


@functools.lru_cache(maxsize=None)
def _interp_label(name):
    """Whether a program stack's frame name is a native function of the
    interpreter (label() of a frame in python*/libpython*)."""
    if name.startswith("py::") or not name.endswith("]"):
        return False
    return name.rpartition(" [")[2].startswith(("python", "libpython"))


def folded_stack(frames):
    """@frames (a program stack, root first) as stacks.folded has it: the
    interpreter's own native frames under the innermost Python frame
    (attribute lookups, calls, allocation, its collector, its regex
    engine) left out, their samples that function's own, as the tables
    count them; native frames of other files there (extension modules,
    libc, the kernel) kept.  A deep program's stacks differ most in those
    frames: rst2html's 45 MB of folded stacks became a fifth.
    flame.html keeps them."""
    last = -1
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].startswith("py::"):
            last = i
            break
    if last < 0 or last == len(frames) - 1:
        return frames
    return list(frames[:last + 1]) + [f for f in frames[last + 1:]
                                      if not _interp_label(f)]


class FoldedFile(Writer):
    """stacks.folded: a line per stack, root first (folded_stack())."""
    name = "folded"
    files = ("stacks.folded",)

    def write(self, profile):
        from jitring import _flame
        _flame.write_folded(os.path.join(profile.out, "stacks.folded"),
                            [(folded_stack(f), n)
                             for f, n in profile.stacks()])


class FlamePage(Writer):
    """flame.html: the interactive flame graph of the stacks."""
    name = "flame"
    files = ("flame.html",)

    def write(self, profile):
        from jitring import _flame
        meta = profile.meta
        cmd = " ".join(str(a) for a in meta.command or [])
        _flame.write_html(os.path.join(profile.out, "flame.html"),
                          profile.stacks(),
                          title="jitring: " + cmd,
                          subtitle="%d samples of %s at %s Hz, %s"
                          % (profile.total, meta.event, meta.freq,
                             time.strftime("%Y-%m-%d %H:%M",
                                           time.localtime(meta.started))))


class Notes(Writer):
    """The lines after the tables: the samples left out (jitring's own,
    cut stacks, before record --pid's window), what perf lost, where the
    files are and perf report's command, the program's exit status; then
    the flame graph in a web browser, where asked."""
    name = "notes"

    def write(self, profile):
        out, meta, c = profile.out, profile.meta, profile.cut
        print()
        for line in cut_note(meta, c.samples, c.cut, c.deep, c.own):
            print(line)
        early = profile.early
        if early:
            print("%d sample%s from before jitring started in process %d "
                  "(perf is on first, to see the start) left out"
                  % (early, "" if early == 1 else "s", meta.pid))
        lost = lost_line(out)
        if lost:
            print(lost)
        html = os.path.join(out, "flame.html")
        print("flame graph: %s" % html)
        if profile.waits:
            print("waits:       %s" % os.path.join(out, "flame-wait.html"))
        print("perf report: %s report -i %s --children --sort sym"
              % (" ".join(["perf"] + perf_cmd("perf", out,
                                              meta.keep_debug)[1:]),
                 os.path.join(out, "perf.jit.data" if os.path.exists(
                     os.path.join(out, "perf.jit.data")) else "perf.data")))
        if meta.perf_script:
            print("stacks:      %s (folded), %s (perf script)"
                  % (os.path.join(out, "stacks.folded"),
                     os.path.join(out, "perf.script.txt")))
        else:
            print("stacks:      %s (folded)" % os.path.join(out,
                                                            "stacks.folded"))
        status = meta.status
        if status:
            print("(the program exited with status %d)" % status)
        sys.stdout.flush()
        if profile.browser:
            import webbrowser
            if not webbrowser.open("file://" + html):
                sys.stderr.write("jitring %s: no web browser found; open "
                                 "%s\n" % (profile.prog, html))


# The outputs of a profile, in order: finish() runs those that write files
# under the folder's lock, then those that print.
WRITERS = (FoldedFile(), FlamePage(), _wait.WaitFolded(), _wait.WaitFlame(),
           Tables(), _wait.WaitTables(), Notes())


def lock(out, prog):
    """Hold the folder's lock (released when the returned descriptor is
    closed): a second finishing of one recording waits for the first,
    then finishes from what it left."""
    claim(out, [LOCK])
    fd = os.open(os.path.join(out, LOCK), os.O_RDWR | os.O_CREAT |
                 os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write("jitring %s: waiting for the other finishing "
                             "of %s\n" % (prog, out))
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


SCRIPT_PART = re.compile(r"^(perf\.script\.txt\.\d+|perf-script-\d+\.log)$")


def drop_partial(out):
    """Remove the outputs a stopped finishing may have left half
    written."""
    done = injected(out)
    for name in os.listdir(out):
        if SCRIPT_PART.match(name):
            try:
                os.unlink(os.path.join(out, name))
            except OSError:
                pass
    for name in OUTPUTS:
        if done and name == "perf.jit.data":
            continue        # the recording itself now
        try:
            os.unlink(os.path.join(out, name))
        except OSError:
            pass
    return done


def perf_lost(out):
    """Whether perf record itself ran out of space (perf.data is then
    cut short, its samples lost)."""
    said = tail_of(os.path.join(out, "perf-record.log"), 1000)
    return any(os.strerror(e) in said for e in FULL)


class Source(NamedTuple):
    """Where the samples are read from (prepare()'s)."""
    perf: list          # perf's command (perf_cmd())
    fp: bool            # a frame-pointer recording (not injected)
    elf: bool           # a dwarf recording perf unwinds through its ELF
                        # trampolines itself (not injected)
    pre: tuple          # the segments record read while the program ran
    data: str           # ... and the rest's perf.data, or None (all of
                        # perf.data or perf.jit.data)


def take_outputs(out, meta, live):
    """Under the folder's lock: what a finishing that held it before did
    taken over (its exec fix; its half-written outputs removed), the
    outputs claimed.  Returns (the folder's names before, whether
    perf.data is injected already)."""
    from jitring import _live
    try:
        # What a finishing that held the lock before wrote.
        meta.exec_fixed = read_meta(out).exec_fixed
    except RecordError:
        pass
    if live is None:
        _live.drop(out)     # a stopped record's
    before = set(os.listdir(out))
    done = drop_partial(out)
    claim(out, OUTPUTS + ("perf-script.log",))
    return before, done


def live_tail(out, meta, live, usable):
    """(the segments record's @live read while the program ran, the
    rest's perf.data), or ((), None) where it read none or they cannot
    be used (not @usable: the recording is injected); the metadata says
    how many were read, and why none where the live reading failed."""
    # The samples record read while the program ran, and the rest
    # (taken before prepare()'s rewrites move perf.data's records).
    pre, data = (), None
    if live is not None and usable:
        got = live.finish()
        if got:
            pre, data = got
            # The tail's processes that exec'd unwind, as in the
            # segments (jitring._live.main()).
            from jitring import _execfix
            _execfix.fix(os.path.join(out, data))
    elif live is not None:
        live.discard()
    # How many segments were read while the program ran, and why
    # none, where the live reading failed.
    why = live.failed if live is not None else None
    if meta.live_segments != len(pre) or meta.live_failed != why:
        meta.live_segments, meta.live_failed = len(pre), why
        write_meta(out, meta)
    return pre, data


def prepare(steps, perf, out, meta, live, before, done):
    """perf.data made ready for perf script (unless @done: injected
    already): the live reading's segments taken, the dumps' names made
    relative, the processes that exec'd fixed, perf inject --jit where
    perf cannot unwind the trampolines itself.  @before: the folder's
    names before the finishing.  Returns the Source of the samples."""
    fp = meta.call_graph == "fp"
    # A dwarf recording whose trampolines were ELF files: perf
    # unwinds through them itself (no inject).
    elf = not fp and bool(meta.trampoline_elf)
    if elf and not done:
        # A process whose set fell back to the memfd image (a
        # folder others can write, a noexec mount): perf cannot
        # unwind through those, so inject, as without ELF files.
        from jitring import _jitsyms
        elf = not _jitsyms.memfd_arenas(
            os.path.join(out, "perf.data"))
    pre, data = live_tail(out, meta, live, (elf or fp) and not done)
    if not done:
        # perf opens the dumps by the names of their mmaps, made
        # relative to the folder: a moved folder finishes.
        from jitring import _jitsyms
        _jitsyms.relative_markers(os.path.join(out, "perf.data"))
    if not done and not meta.exec_fixed:
        # Before perf reads it: processes that exec'd unwind
        # (jitring._execfix).  Once: finish() may run again.
        from jitring import _execfix
        if _execfix.fix(os.path.join(out, "perf.data")) >= 0:
            meta.exec_fixed = True
            write_meta(out, meta)
    if not done and not fp and not elf:
        try:
            inject(steps, perf, out, meta)
        finally:
            claim_grown(out, before)
    return Source(perf, fp, elf, pre, data)


def read_samples(steps, out, meta, src):
    """The recording's samples (perf script of @src) in record --pid's
    window (window_on()), and how many were before it."""
    samples = script(steps, src.perf, out, meta.perf_script, meta.inline,
                     src.fp, src.elf, data=src.data, pre=src.pre)
    return in_window(samples, meta)


def build_profile(out, meta, samples, src, **view):
    """The Profile of @samples (read_samples()'s); with record --wait,
    of the CPU's, with the waits of the context switches' (jitring._wait).
    @view: how to show it (Profile's top, browser, prog)."""
    procs = processes(out)
    top_pid = meta.pid if meta.top_only else None
    if meta.wait:       # record --wait
        from jitring import _wait
        samples, switches = _wait.split(samples)
    outer = None
    if meta.attached and type(meta.pid) is int:
        outer = (meta.pid, running(out, meta.pid))
    profile = Profile(out, meta, summarize(samples, procs, top_pid,
                                           meta.max_stack or 127, outer),
                      **view)
    if meta.wait:
        profile.waits = _wait.Waits.read(out, meta, switches, procs, top_pid,
                                    os.path.join(out, "perf.data" if
                                                 src.fp or src.elf else
                                                 "perf.jit.data"),
                                    outer)
    return profile


def stopped(out, prog, locked, signum):
    """Say that signal @signum stopped the finishing (the recording is
    kept); 128 + @signum.  @locked: it held the folder's lock."""
    # Stopped while waiting for the lock: the outputs are the other
    # finishing's.
    done = drop_partial(out) if locked else injected(out)
    sys.stderr.write(
        "\njitring %s: stopped before the profile was finished; "
        "%s and the dumps are kept in %s.\nTo finish it: %s -m "
        "jitring report %s\n" % (prog, "perf.jit.data" if done
                                 else "perf.data", out,
                                 os.path.basename(sys.executable), out))
    return 128 + signum


def not_finished(out, prog, locked, e):
    """Say why the finishing failed (@e, an OSError or RecordError): 1
    where the disk is full (the recording is kept to finish later), else
    2.  @locked: it held the folder's lock."""
    if not (getattr(e, "errno", None) in FULL or no_space(out)):
        if isinstance(e, OSError):
            e = "cannot write in %s: %s" % (out, e.strerror)
        sys.stderr.write("jitring %s: %s\n" % (prog, e))
        return 2
    done = drop_partial(out) if locked else injected(out)
    if perf_lost(out):
        sys.stderr.write("jitring %s: no space left on the disk of %s: "
                         "perf record could not write perf.data, and "
                         "the profile is lost\n" % (prog, out))
    else:
        sys.stderr.write(
            "jitring %s: no space left on the disk of %s: the profile "
            "is not finished (%s and the dumps are kept); once there "
            "is space: %s -m jitring report %s\n"
            % (prog, out, "perf.jit.data" if done else "perf.data",
               os.path.basename(sys.executable), out))
    return 1


def finish(out, meta, top=12, browser=False, prog="record", live=None,
           writers=None):
    """Inject, read the samples, build the profile and write its files
    under the folder's lock; print the tables and notes after it: the
    writers of @writers (WRITERS) in order, those with files under the
    lock.  @live: record's jitring._live.Live, the samples it read while
    the program ran.  @meta: the recording's metadata (a dict or a Meta;
    what the finishing adds goes to a Meta of its own).  Returns 0, 1
    (the disk is full: said, the recording kept to finish later), 2 (an
    error, said) or 128+N (stopped by signal N, the recording kept).
    @prog names the command in messages."""
    meta = meta if isinstance(meta, Meta) else Meta(meta)
    writers = WRITERS if writers is None else writers
    lockfd = -1
    from jitring import _perfdata
    try:
        # The readers of perf.data below share one walk of it.
        with Steps() as steps, _perfdata.kept_indexes():
            lockfd = lock(out, prog)
            before, done = take_outputs(out, meta, live)
            perf = perf_cmd(find_perf(), out, meta.keep_debug)
            src = prepare(steps, perf, out, meta, live, before, done)
            # The reading makes millions of objects that all live to the
            # end: the free-threaded build's collector walks the whole
            # heap each time it runs (it doubled the reading's CPU).
            from jitring._jitsyms import no_gc
            with no_gc():
                samples, early = read_samples(steps, out, meta, src)
                profile = build_profile(out, meta, samples, src, top=top,
                                        browser=browser, prog=prog)
                profile.early = early
                for w in writers:
                    if w.files and w.wanted(profile):
                        w.write(profile)
    except Interrupted as e:
        return stopped(out, prog, lockfd >= 0, e.signum)
    except (OSError, RecordError) as e:
        return not_finished(out, prog, lockfd >= 0, e)
    finally:
        if live is not None:
            live.discard()
        if lockfd >= 0:
            os.close(lockfd)
    for w in writers:
        if not w.files and w.wanted(profile):
            w.write(profile)
    return 0


def main(argv):
    """python -m jitring report [--top N] [--browser] DIR."""
    import argparse
    p = argparse.ArgumentParser(
        prog="python -m jitring report",
        description="Finish (or show again) a recording made by `python "
        "-m jitring record`: perf inject, the tables, the flame graph.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--top", type=int, default=12, metavar="N")
    p.add_argument("--browser", action="store_true")
    p.add_argument("--inject", choices=("reduced", "full"),
                   help="perf inject the functions the samples reach "
                   "(reduced) or all (full); default: as recorded")
    opts = p.parse_args(argv)
    if opts.top <= 0:
        p.error("--top needs a positive number")
    out = os.path.abspath(opts.dir)
    try:
        meta = read_meta(out)
        if not (os.path.exists(os.path.join(out, "perf.data")) or
                injected(out)):
            raise RecordError("%s has no perf.data" % out)
    except RecordError as e:
        sys.stderr.write("jitring report: %s\n" % e)
        return 2
    if opts.inject:
        meta.inject = opts.inject
    try:
        return finish(out, meta, top=opts.top, browser=opts.browser,
                      prog="report")
    except Exception as e:
        # A recording's files are data: whatever a damaged or foreign one
        # makes a reader raise ends in one line, never a traceback.
        from jitring._flame import escape
        sys.stdout.flush()
        sys.stderr.write("jitring report: cannot finish %s: %s (%s)\n"
                         % (escape(out), escape(str(e) or "-"),
                            type(e).__name__))
        return 2
