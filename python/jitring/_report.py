# SPDX-License-Identifier: MIT
"""Finishing a recording: from perf.data and the dumps to a profile.

``python -m jitring record`` calls finish() once the program has exited
and perf has stopped; ``python -m jitring report DIR`` calls it on a
recording whose finishing was interrupted (or to see it again).

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

The stacks the table and the flame graph show are the program's: the
frames of jitring's runner and of runpy above the program's first Python
frame are left out, and so are the interpreter's own frames between two
Python frames (the call machinery of every Python call).  Native frames
below the innermost Python frame (C extensions, builtins, libc, the
kernel) stay.  Samples of jitring's own work (its start-up and stop, its
threads, its native code: own_work()) are left out altogether.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

META = "jitring-record.json"
PROCS = "processes.jsonl"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Outputs that finish() makes again (a partial one is removed first).
OUTPUTS = ("perf.jit.data", "perf.script.txt", "stacks.folded",
           "flame.html", "perf-inject.log")


class RecordError(Exception):
    """A reason to stop with a message and exit status 2."""


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


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
    """perf, with its build-id cache in OUT/.debug unless keep_debug
    (perf inject copies every jitted image into it)."""
    if keep_debug:
        return [perf]
    return [perf, "--buildid-dir", os.path.join(out, ".debug")]


def write_meta(out, meta):
    tmp = os.path.join(out, META + ".tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, os.path.join(out, META))


def read_meta(out):
    try:
        with open(os.path.join(out, META)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RecordError("%s is not a jitring recording (%s: %s)"
                          % (out, META, getattr(e, "strerror", e)))


class Steps:
    """Runs the finishing's subprocesses; a signal stops the one running
    (it is in record's process group, so a terminal's Ctrl-C reaches it
    too) and raises Interrupted."""

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

    def run(self, cmd, **kw):
        p = self.proc = subprocess.Popen(cmd, **kw)
        try:
            p.wait()
        except BaseException:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            raise
        finally:
            self.proc = None
        return p.returncode


def tail_of(path, n=5):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip()]
    except OSError:
        return ""
    return "\n  ".join(lines[-n:])


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
        raise RecordError("perf inject --jit failed (exit %d):\n  %s"
                          % (rc, tail_of(log)))
    if not meta.get("keep_perf_data"):
        os.unlink(os.path.join(out, "perf.data"))


HEAD = re.compile(r"^(.*?)\s+(\d+)/(\d+)\s+(?:(\d+)\.(\d{9}):)?")


def script(steps, perf, out, keep=False, inline=False, fp=False):
    """perf script into perf.script.txt (kept if @keep); returns [(pid,
    comm, frames)], frames a list of (symbol, dso) from the leaf to the
    root.  Without @inline, native functions inlined into others are not
    listed (perf runs addr2line per address for them: 13.5 s instead of
    1.3 s for 10,000 functions' recording).  With @fp (a frame-pointer
    recording, not injected), perf.data is read and the trampolines'
    frames are named by jitring._jitsyms.FPNames."""
    path = os.path.join(out, "perf.script.txt")
    err = os.path.join(out, "perf-script.log")
    with open(path, "w") as f, open(err, "w") as e:
        rc = steps.run(perf + ["script", "-i", "perf.data" if fp else
                               "perf.jit.data", "--ns", "-F",
                               "comm,pid,tid,time,event,ip,sym,dso"] +
                       ([] if inline else ["--no-inline"]),
                       cwd=out, stdout=f, stderr=e,
                       stdin=subprocess.DEVNULL)
    if rc != 0:
        raise RecordError("perf script failed (exit %d):\n  %s"
                          % (rc, tail_of(err)))
    names = None
    if fp:
        from jitring import _jitsyms, _perfdata
        try:
            names = _jitsyms.FPNames(os.path.join(out, "perf.data"))
        except (_perfdata.PerfDataError, _jitsyms.DumpError, OSError) as e:
            raise RecordError("cannot read %s/perf.data: %s" % (out, e))
    samples = []
    head, stack = None, []
    with open(path, errors="replace") as f:
        if not keep:
            os.unlink(path)     # read from the open file; nothing kept
        for line in f:
            if not line.strip():
                if head is not None:
                    if names:
                        stack = names.resolve(head[2], head[3], stack)
                    samples.append((head[0], head[1], _inlined(stack)))
                head, stack = None, []
            elif line[0] in " \t":
                parts = line.split(None, 1)
                rest = parts[1].rstrip("\n") if len(parts) > 1 else ""
                # "<ip> <sym> (<dso>)": the symbol may hold spaces.
                sym, _, dso = rest.rpartition(" (")
                if not _:
                    sym, dso = rest, ""
                stack.append((sym.strip() or "[unknown]",
                              dso.rstrip(")").strip()))
            else:
                m = HEAD.match(line)
                if m:
                    t = int(m.group(4)) * 10**9 + int(m.group(5)) \
                        if m.group(4) else 0
                    head = (int(m.group(2)), m.group(1).strip(),
                            int(m.group(3)), t)
                else:
                    head = (0, line.split(None, 1)[0] if line.strip()
                            else "?", 0, 0)
        if head is not None:
            if names:
                stack = names.resolve(head[2], head[3], stack)
            samples.append((head[0], head[1], _inlined(stack)))
    return samples


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
# and the library's flush and write threads.
OWN_THREADS = ("jitring-own", "jitring-flush", "jitring-write")


def _package_frame(name):
    """For a Python frame of jitring's package, (qualname, module file);
    else None."""
    qual, _, fn = name[4:].rpartition(":")
    parts = fn.rsplit("/", 2)
    if len(parts) == 3 and parts[1] == "jitring" and parts[2] in OWN:
        return qual, parts[2]
    return None


def _runner_frame(where):
    return where is not None and where[1] == "__main__.py" and \
        where[0] in RUNNER


def _own_frame(name):
    """A Python frame of jitring's package (its runner, its at-exit stop)
    or of runpy."""
    fn = name.rsplit(":", 1)[-1] if ":" in name else ""
    return (_package_frame(name) is not None or
            fn.endswith("/runpy.py") or fn == "<frozen runpy>")


def _own_dso(dso):
    """jitring's extension (libjitring is linked into it) or library."""
    return os.path.basename(dso).startswith(("_jitring.", "libjitring"))


def own_work(comm, frames):
    """Whether a sample (@frames leaf first) is jitring's own work, not
    the program's: python/README.md, "What the profile leaves out"."""
    if comm in OWN_THREADS:
        return True
    inner = None        # the innermost Python frame
    for i, (s, d) in enumerate(frames):
        if s.startswith("py::"):
            inner = i
            break
    if inner is None and comm[:1] == ":" and comm[1:].isdigit():
        # perf's name for a thread whose name it has not seen: record's
        # fork of the program, before it execs the interpreter.
        return True
    # jitring's native code below it (or anywhere, with no Python
    # frame): start, stop, flush, the hook's lookup of a function's copy.
    if any(_own_dso(d) for s, d in frames[:inner]):
        return True
    if inner is None:
        return False
    # A function of jitring's called by whatever (its at-exit stop, the
    # fork hooks), or the runner at work of its own.
    for s, d in frames[inner:]:
        where = s.startswith("py::") and _package_frame(s)
        if where and not _runner_frame(where):
            return True
    return _runner_frame(_package_frame(frames[inner][0]))


def _interp_dso(dso):
    base = os.path.basename(dso)
    return base.startswith(("python", "libpython"))


def label(sym, dso):
    """A frame's name: a Python function as jitring named it, a native
    one with its file's name (perf's "[unknown]", "[kernel]" as they
    are)."""
    if dso.startswith("[kernel"):
        return sym + " [kernel]"
    if sym.startswith("py::") or not dso or dso.startswith("["):
        return sym
    return "%s [%s]" % (sym, os.path.basename(dso))


def program_stack(frames):
    """The frames a user reads, root first (see the module's doc)."""
    root_first = frames[::-1]
    py = [i for i, (s, d) in enumerate(root_first) if s.startswith("py::")]
    user = [i for i in py if not _own_frame(root_first[i][0])]
    if not user:
        # No Python frame, or only the runner's (start-up): the native
        # frames, from below the runner's if any.
        start = py[-1] + 1 if py else 0
        return [label(s, d) for s, d in root_first[start:]] or \
            ["[interpreter start-up]"]
    first, last = user[0], py[-1]
    keep = []
    for i in range(first, len(root_first)):
        s, d = root_first[i]
        if s.startswith("py::"):
            if not _own_frame(s):
                keep.append(s)
        elif i < last and (_interp_dso(d) or _own_dso(d)):
            continue            # the call machinery between Python frames
        elif s == "_PyEval_EvalFrameDefault" and \
                root_first[i - 1][0].startswith("py::"):
            continue            # the Python frame's own body
        else:
            keep.append(label(s, d))
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
    r = procs.get(pid)
    if not r:
        # A Python process that never started jitring: its Python frames
        # have no names (the package is not in its interpreter, or
        # --no-children).
        return comm + (" (without jitring)" if comm.startswith("python")
                       else "")
    argv = program_argv(r.get("argv") or [])
    cmd = " ".join(os.path.basename(a) if i == 0 else " ".join(a.split())
                   for i, a in enumerate(argv)) or comm
    if len(cmd) > 70:
        cmd = cmd[:67] + "..."
    if r.get("how") == "fork":
        cmd += " (fork of %s)" % r.get("ppid")
    return cmd


def summarize(samples, procs, top_pid):
    """(stacks, per_process, total, rows): stacks maps a root-first tuple
    (the process first) to its count."""
    stacks, per_pid, comms = {}, {}, {}
    self_n, total_n = {}, {}
    for pid, comm, frames in samples:
        if top_pid is not None and pid != top_pid:
            continue
        if own_work(comm, frames):
            continue
        per_pid[pid] = per_pid.get(pid, 0) + 1
        comms.setdefault(pid, comm)
        st = program_stack(frames)
        key = tuple(st)
        stacks[(pid, key)] = stacks.get((pid, key), 0) + 1
        py = [s for s in st if s.startswith("py::")]
        if py:
            self_n[py[-1]] = self_n.get(py[-1], 0) + 1
            for name in set(py):
                total_n[name] = total_n.get(name, 0) + 1
    total = sum(per_pid.values())
    names = {pid: "%s [%d]" % (command_of(pid, comms[pid], procs), pid)
             for pid in per_pid}
    folded = {}
    for (pid, key), n in stacks.items():
        k = (names[pid],) + key
        folded[k] = folded.get(k, 0) + n
    rows = [(total_n[n], self_n.get(n, 0), n) for n in total_n]
    per = sorted(((n, pid, command_of(pid, comms[pid], procs))
                  for pid, n in per_pid.items()), key=lambda r: -r[0])
    return folded, per, total, rows


def lost_line(out):
    """One line for perf's warnings about lost data, or None."""
    lost = []
    for log in ("perf-record.log", "perf-inject.log", "perf-script.log"):
        try:
            with open(os.path.join(out, log), errors="replace") as f:
                for line in f:
                    if "lost" in line.lower() or "LOST" in line:
                        lost.append(line.strip())
        except OSError:
            pass
    if not lost:
        return None
    return "perf warned: %s%s (details: %s/perf-*.log)" % (
        lost[0], " (and %d more)" % (len(lost) - 1) if len(lost) > 1
        else "", out)


LIBDIR = re.compile(r"^.*/lib/python3\.\d+t?/(?:(?:site|dist)-packages/)?")


def fmt_name(name, cwd=None):
    """A table's name for a function: qualname:file, the file relative to
    the standard library, site-packages or the program's folder."""
    if not name.startswith("py::"):
        return name
    qual, _, fn = name[4:].rpartition(":")
    short = LIBDIR.sub("", fn)
    if short == fn and cwd and fn.startswith(cwd.rstrip("/") + "/"):
        short = fn[len(cwd.rstrip("/")) + 1:]
    return "%s:%s" % (qual, short)


def print_tables(meta, per, total, rows, top, out):
    event = meta.get("event", "cpu-clock")
    print()
    if not total:
        print("jitring record: no samples (did the program run long "
              "enough?)")
        return
    print("%d samples of %s at %s Hz in %d process%s:"
          % (total, event, meta.get("freq", "?"), len(per),
             "" if len(per) == 1 else "es"))
    print("%8s %8s  %s" % ("pid", "samples", "command"))
    for n, pid, cmd in per[:max(top, 8)]:
        print("%8d %7.1f%%  %s" % (pid, 100.0 * n / total, cmd))
    if len(per) > max(top, 8):
        print("%8s %8s  (%d more in %s)" % ("", "", len(per) - max(top, 8),
                                           os.path.join(out,
                                                        "stacks.folded")))
    if not rows:
        print("\nno sample has a Python function on its stack")
        return
    by_total = sorted(rows, key=lambda r: (-r[0], -r[1], r[2]))[:top]
    by_self = sorted(rows, key=lambda r: (-r[1], -r[0], r[2]))[:top]
    by_self = [r for r in by_self if r[1]]
    for title, view in (("Hottest Python functions by total (the "
                         "function and all it calls; share of all "
                         "samples):", by_total),
                        ("By self (the innermost Python function; native "
                         "code it calls counts to it):", by_self)):
        print("\n" + title)
        print("%8s %8s  %s" % ("total", "self", "function"))
        for t, s, name in view:
            print("%7.1f%% %7.1f%%  %s"
                  % (100.0 * t / total, 100.0 * s / total,
                     fmt_name(name, meta.get("cwd"))))


def write_outputs(out, meta, folded, total):
    from jitring import _flame
    stacks = sorted(((list(k), n) for k, n in folded.items()),
                    key=lambda r: r[0])
    _flame.write_folded(os.path.join(out, "stacks.folded"), stacks)
    cmd = " ".join(meta.get("command") or [])
    _flame.write_html(os.path.join(out, "flame.html"), stacks,
                      title="jitring: " + cmd,
                      subtitle="%d samples of %s at %s Hz, %s"
                      % (total, meta.get("event", "cpu-clock"),
                         meta.get("freq", "?"),
                         time.strftime("%Y-%m-%d %H:%M",
                                       time.localtime(meta.get("started",
                                                               0)))))


def finish(out, meta, top=12, browser=False):
    """Inject, read the samples, print the tables, write the files.
    Returns 0, 2 (an error, said) or 128+N (stopped by signal N, the
    recording kept)."""
    try:
        with Steps() as steps:
            done = injected(out)
            for name in OUTPUTS:
                if done and name == "perf.jit.data":
                    continue
                try:
                    os.unlink(os.path.join(out, name))
                except OSError:
                    pass
            perf = perf_cmd(find_perf(), out, meta.get("keep_debug"))
            fp = meta.get("call_graph") == "fp"
            if not done and not meta.get("exec_fixed"):
                # Before perf reads it: processes that exec'd unwind
                # (jitring._execfix).  Once: finish() may run again.
                from jitring import _execfix
                if _execfix.fix(os.path.join(out, "perf.data")) >= 0:
                    meta["exec_fixed"] = True
                    write_meta(out, meta)
            if not done and not fp:
                inject(steps, perf, out, meta)
            samples = script(steps, perf, out, meta.get("perf_script"),
                             meta.get("inline"), fp)
            procs = processes(out)
            top_pid = meta.get("pid") if meta.get("top_only") else None
            folded, per, total, rows = summarize(samples, procs, top_pid)
            write_outputs(out, meta, folded, total)
    except Interrupted as e:
        done = injected(out)
        for name in OUTPUTS:
            if done and name == "perf.jit.data":
                continue        # the recording itself now
            try:
                os.unlink(os.path.join(out, name))
            except OSError:
                pass
        sys.stderr.write(
            "\njitring record: stopped before the profile was finished; "
            "%s and the dumps are kept in %s.\nTo finish it: %s -m "
            "jitring report %s\n" % ("perf.jit.data" if done else "perf.data",
                                     out, os.path.basename(sys.executable),
                                     out))
        return 128 + e.signum
    except RecordError as e:
        sys.stderr.write("jitring record: %s\n" % e)
        return 2
    print_tables(meta, per, total, rows, top, out)
    print()
    lost = lost_line(out)
    if lost:
        print(lost)
    html = os.path.join(out, "flame.html")
    print("flame graph: %s" % html)
    print("perf report: perf%s report -i %s --children --sort sym"
          % ("" if meta.get("keep_debug") else " --buildid-dir " +
             os.path.join(out, ".debug"),
             os.path.join(out, "perf.data" if meta.get("call_graph") ==
                          "fp" else "perf.jit.data")))
    if meta.get("perf_script"):
        print("stacks:      %s (folded), %s (perf script)"
              % (os.path.join(out, "stacks.folded"),
                 os.path.join(out, "perf.script.txt")))
    else:
        print("stacks:      %s (folded)" % os.path.join(out,
                                                        "stacks.folded"))
    status = meta.get("status")
    if status:
        print("(the program exited with status %d)" % status)
    sys.stdout.flush()
    if browser:
        import webbrowser
        if not webbrowser.open("file://" + html):
            sys.stderr.write("jitring record: no web browser found; open "
                             "%s\n" % html)
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
        meta["inject"] = opts.inject
    return finish(out, meta, top=opts.top, browser=opts.browser)
