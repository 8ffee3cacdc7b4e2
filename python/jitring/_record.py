# SPDX-License-Identifier: MIT
"""python -m jitring record: from a program to a profile in one command.

Runs the program as a shell runs a job, with perf attached to it from
its first instruction, and every Python process it starts profiled too;
then turns the recording into a table, a flame graph and files
(jitring._report).

How the processes stand (a shell's job control, with perf beside it):

  record            the user's process group (the terminal's foreground)
  perf record -p    its own process group, so no terminal signal reaches
                    it; it dies with record (PR_SET_PDEATHSIG)
  the program       its own process group, made the terminal's foreground
                    while it runs (when record is in the foreground), so
                    Ctrl-C, Ctrl-Z and reads from the terminal reach it
                    exactly as without record; its children join it

The program is forked first and held at a gate (a pipe) before it execs
the interpreter; perf attaches to it with its events disabled, enables
them through its control descriptor, acknowledges, and only then does the
gate open: perf sees the program from exec on, and every process and
thread it starts (perf's events are inherited).  Python processes the
program starts get jitring through $JITRING_PROFILE (the package's .pth
hook) and write their dumps next to perf.data ($JITRING_DIR).

Signals: a signal that reaches record while the program runs (SIGINT,
SIGTERM, SIGHUP: from kill, from timeout(1), or from a terminal record
does not hand over) is passed on to the program's process group, once per
signal, as a terminal would deliver it.  Once the program has exited,
perf is stopped and the recording is finished; a signal then stops the
finishing, keeps perf.data and the dumps, and prints the command that
finishes them later (python -m jitring report DIR).
"""

import argparse
import errno
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

from jitring import _report
from jitring._report import (MAX_STACK, MAX_STACK_DEFAULT, META, PROCS,
                              STACK_MAX, STACK_SIZE, RecordError)

USAGE = ("python -m jitring record [options] [--] "
         "(script.py | -m module) [args...]\n"
         "       python -m jitring record [options] --pid PID "
         "[--duration S]")

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stack_size(s):
    n = positive(s)
    if n % 8 or n > STACK_MAX:
        raise argparse.ArgumentTypeError(
            "needs a multiple of 8 up to %d, not %r" % (STACK_MAX, s))
    return n


def max_stack_arg(s):
    n = positive(s)
    if n > MAX_STACK:
        raise argparse.ArgumentTypeError("needs a number of frames up to "
                                         "%d, not %r" % (MAX_STACK, s))
    return n


def positive(s):
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError("needs a positive number, not %r"
                                         % s)
    return n


def wait_freq(s):
    """--wait-freq: 0 (every switch) or a frequency perf's default limit
    (kernel.perf_event_max_sample_rate, 100000) takes."""
    try:
        n = int(s)
    except ValueError:
        n = -1
    if not 0 <= n <= 100000:
        raise argparse.ArgumentTypeError(
            "needs 0 (every switch) or samples a second up to 100000, "
            "not %r" % s)
    return n


def size_bytes(s):
    """--wait-budget: bytes, with K, M or G (powers of 1024), at least
    16M."""
    m = re.match(r"^(\d+)([KMG]?)B?$", s.strip().upper())
    n = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)] \
        if m else 0
    if n < 16 << 20:
        raise argparse.ArgumentTypeError(
            "needs a size of 16M or more (bytes, or with K, M or G), not "
            "%r" % s)
    return n


def parser():
    """record's command line, its options in the order --help lists
    them."""
    p = argparse.ArgumentParser(
        prog="python -m jitring record", usage=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a Python program under perf with jitring on, in "
        "every Python process it starts, then print its hottest Python "
        "functions and write an interactive flame graph.",
        epilog="Ctrl-C stops the program as it would without record; the "
        "profile is still finished.\nA second Ctrl-C while it is finished "
        "keeps the recording: `python -m jitring report DIR` finishes it.")
    add_run_args(p)
    add_stack_args(p)
    add_wait_args(p)
    p.add_argument("--engine", choices=("rings", "mutex"), default="rings",
                   help="jitring's engine (default rings; mutex is the "
                   "one-lock design kept as a yardstick)")
    return p


def add_run_args(p):
    """The options of what is run and sampled, and where it goes: the
    folder, the event and its frequency, the tables, --pid's window, the
    children, the browser, the build-id cache."""
    p.add_argument("-o", "--output", metavar="DIR",
                   help="the recording's folder (default: "
                   "jitring-record-DATE-TIME, never one that exists)")
    p.add_argument("--force", action="store_true",
                   help="write into -o DIR even if it holds other files")
    p.add_argument("-e", "--event", default="cpu-clock",
                   help="the perf event to sample (default cpu-clock; "
                   "e.g. cycles, cache-misses: `perf list`)")
    p.add_argument("-F", "--freq", type=positive, default=999,
                   metavar="HZ", help="samples per second (default 999)")
    p.add_argument("--top", type=positive, default=12, metavar="N",
                   help="rows of each table (default 12)")
    p.add_argument("--pid", type=positive, metavar="PID",
                   help="attach to a running Python process instead: "
                   "jitring on in it for the window, off after "
                   "(CPython 3.14+; older ones started with "
                   "JITRING_PROFILE=standby)")
    p.add_argument("--duration", type=seconds, metavar="S",
                   help="with --pid: the window's length (default: until "
                   "Ctrl-C)")
    p.add_argument("--no-children", action="store_true",
                   help="profile the top process only (child processes "
                   "run without jitring and are left out of the profile)")
    p.add_argument("--browser", action="store_true",
                   help="open the flame graph in a web browser")
    p.add_argument("--keep-debug", action="store_true",
                   help="let perf record build-ids and use ~/.debug as its "
                   "build-id cache (default: neither)")


def add_stack_args(p):
    """The options of how perf records stacks and what it keeps: fp or
    dwarf, the stack copy, the frame limit, perf script's text, perf
    inject, inlined frames, perf.data."""
    p.add_argument("--call-graph", choices=("auto", "dwarf", "fp"),
                   default="auto",
                   help="how perf records stacks: dwarf (a stack "
                   "copy per sample; perf unwinds through the "
                   "trampolines' ELF files, no perf inject), fp (frame "
                   "pointers: no copies, no inject; the interpreter must "
                   "keep them), auto (default): fp where the interpreter "
                   "was built with -fno-omit-frame-pointer, but dwarf "
                   "with --wait (a libc without frame pointers cuts the "
                   "waits' stacks)")
    p.add_argument("--stack-size", type=stack_size, default=STACK_SIZE,
                   metavar="BYTES",
                   help="dwarf mode: the bytes of each sample's stack "
                   "that perf copies (default %d; up to %d: deeper "
                   "stacks, bigger recordings)" % (STACK_SIZE, STACK_MAX))
    p.add_argument("--max-stack", type=max_stack_arg, metavar="N",
                   help="as root: raise kernel.perf_event_max_stack (the "
                   "most frames perf keeps of a stack, 127 by default: "
                   "about 30 Python frames in fp mode, N/4 at N) to N "
                   "for the "
                   "recording only; the old value is put back after, "
                   "also if record is killed (e.g. 1024; up to %d)"
                   % MAX_STACK)
    p.add_argument("--perf-script", action="store_true",
                   help="keep perf.script.txt, the samples' stacks as "
                   "perf script prints them (Firefox Profiler, speedscope)")
    p.add_argument("--inject", choices=("reduced", "full"),
                   default="reduced",
                   help="which functions perf inject makes images of: "
                   "those the samples reach (default), or every one the "
                   "dumps describe (slow at many functions; a yardstick)")
    p.add_argument("--memfd-trampolines", action="store_true",
                   help="dwarf mode: keep the trampolines in memfd "
                   "images and finish with perf inject, as before the "
                   "ELF files (slower; a yardstick)")
    p.add_argument("--inline", action="store_true",
                   help="list native functions inlined into others as "
                   "frames of their own (perf runs addr2line for them: "
                   "slow)")
    p.add_argument("--keep-perf-data", action="store_true",
                   help="keep perf.data next to perf.jit.data (by default "
                   "perf.jit.data, its copy with the JIT code, replaces it)")


def add_wait_args(p):
    """The options of --wait and --wall: the switches' stack copy, their
    sampling rate, perf.data's budget."""
    p.add_argument("--wait", action="store_true",
                   help="record where threads wait too: each context "
                   "switch with its stack, weighed by the time until the "
                   "thread runs again, by Python function and reason "
                   "(flame-wait.html)")
    from jitring._wait import STACK_SIZE as WAIT_STACK
    p.add_argument("--wait-stack-size", type=stack_size, default=WAIT_STACK,
                   metavar="BYTES",
                   help="with --wait in dwarf mode: the bytes of stack "
                   "perf copies at each context switch (default %d: "
                   "a program switching often loses fewer samples; up "
                   "to %d)" % (WAIT_STACK, STACK_MAX))
    from jitring._wait import FREQ as WAIT_FREQ
    p.add_argument("--wait-freq", type=wait_freq, default=WAIT_FREQ,
                   metavar="HZ",
                   help="with --wait: while the program switches more "
                   "than 5,000 times a second, take the stacks of about "
                   "HZ context switches a second a thread at most, each "
                   "weighing the switches it stands for (every switch is "
                   "still timed); 0: every switch's stack always "
                   "(default %d)" % WAIT_FREQ)
    from jitring._wait import BUDGET as WAIT_BUDGET
    p.add_argument("--wait-budget", type=size_bytes, default=WAIT_BUDGET,
                   metavar="SIZE",
                   help="with --wait: the most perf.data may take (e.g. "
                   "500M, 2G; default 1G): the switches' stacks stop at "
                   "half, perf at all of it, each said on stderr")
    p.add_argument("--wall", action="store_true",
                   help="--wait, and a line per thread: its CPU time and "
                   "its time off CPU by reason")


def seconds(s):
    from jitring._attach import DURATION_MAX
    try:
        v = float(s)
    except ValueError:
        v = 0.0
    # Not nan, inf, or past what a wait and the target's watcher can
    # take (a week: longer windows are whole recordings).
    if not 0 < v <= DURATION_MAX:
        raise argparse.ArgumentTypeError("needs a number of seconds "
                                         "above 0, up to %d (7 days), "
                                         "not %r" % (DURATION_MAX, s))
    return v


def split_argv(p, argv):
    """(record's options, the program's command): the program starts at
    the first argument that is neither an option nor an option's value,
    at -m, or after --."""
    takes_value = set()
    for a in p._actions:
        if a.option_strings and a.nargs != 0:
            takes_value.update(a.option_strings)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if a == "-m":
            return argv[:i], argv[i:]
        if not a.startswith("-") or a == "-":
            return argv[:i], argv[i:]
        i += 2 if a in takes_value else 1
    return argv, []


def parse(argv):
    p = parser()
    mine, target = split_argv(p, argv)
    opts = p.parse_args(mine)
    if opts.pid is not None:
        if target:
            p.error("--pid attaches to a running process: no program too")
        return opts, target
    if opts.duration is not None:
        p.error("--duration goes with --pid")
    if not target or (target[0] == "-m" and len(target) < 2):
        p.error("no program: give script.py or -m module")
    return opts, target


# ---- the folder --------------------------------------------------------

def clear(path, names):
    """Remove @names (the folder's manifest: files record or report
    wrote) from @path, then the manifest: each only where it is a regular
    file; a symlink or anything else in its place is left alone."""
    import stat
    for n in sorted(names) + [_report.MANIFEST]:
        f = os.path.join(path, n)
        try:
            st = os.lstat(f)
            if stat.S_ISREG(st.st_mode):
                os.unlink(f)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise RecordError("cannot remove the earlier recording's "
                              "%s: %s" % (f, e.strerror))


def default_out():
    base = "jitring-record-" + time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = os.path.abspath(base if not n else "%s-%d" % (base, n))
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise RecordError("cannot make the output folder %s: %s"
                              % (path, e.strerror))
    raise RecordError("no free name for the output folder %s-N" % base)


def out_dir(path, force):
    """The recording's folder: a new one, an empty one, or one whose
    manifest lists all it holds (an earlier recording, whose files are
    removed); with --force, one that holds the user's files too, which
    stay (all but the manifest's)."""
    if path is None:
        return default_out()
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
        names = os.listdir(path)
    except OSError as e:
        raise RecordError("cannot use %s as the output folder: %s"
                          % (path, e.strerror))
    if not os.access(path, os.W_OK | os.X_OK):
        raise RecordError("cannot write into the output folder %s"
                          % path)
    has_manifest = _report.MANIFEST in names
    mine = _report.claimed(path) if has_manifest else set()
    foreign = [n for n in names if n not in mine and
               n != _report.MANIFEST]
    if foreign and not force:
        if not has_manifest:
            raise RecordError("%s is not empty and holds no jitring "
                              "recording; choose another with -o, or "
                              "--force" % path)
        raise RecordError("%s holds files of its own (%s); choose another "
                          "with -o, or --force" % (path, sorted(foreign)[0]))
    clash = sorted(n for n in foreign if n in _report.NAMES or
                   _report.GROWN.match(n))
    if clash:
        raise RecordError("%s holds %s, which record did not write and "
                          "would replace; move it, or choose another "
                          "folder with -o" % (path, clash[0]))
    clear(path, mine)
    return path


# ---- the program -------------------------------------------------------

def missing_target(target):
    """Where python itself would refuse the program (no such script, no
    such top-level module), the argv that makes it say so: record then
    runs that, unrecorded, for python's own message and status."""
    if target[0] == "-m":
        import importlib.util
        top = target[1].split(".", 1)[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else [sys.executable, "-m", target[1]]
    if not os.path.exists(target[0]):
        return [sys.executable, target[0]]
    return None


def program_env(out, opts):
    env = dict(os.environ)
    if opts.no_children:
        env.pop("JITRING_PROFILE", None)
    else:
        env["JITRING_PROFILE"] = "1"
    env["JITRING_DIR"] = out
    # dwarf mode: the trampolines as ELF files perf unwinds through
    # itself, so the recording is finished without perf inject.
    if opts.call_graph == "dwarf" and not opts.memfd_trampolines:
        env["JITRING_TRAMPOLINE_ELF"] = "1"
    else:
        env.pop("JITRING_TRAMPOLINE_ELF", None)
    env["JITRING_RECORD_PROCS"] = os.path.join(out, PROCS)
    return env


def fork_gated(argv, env):
    """Fork @argv's process in a process group of its own, held before
    exec until gate_open(); returns (pid, gate)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            os.setpgid(0, 0)
            go = os.read(r, 1) == b"g"
            os.close(r)
            if go:
                for s in FORWARDED + (signal.SIGTTOU,):
                    signal.signal(s, signal.SIG_DFL)
                os.execve(argv[0], argv, env)
        except BaseException:
            pass
        os._exit(127)
    os.close(r)
    try:
        os.setpgid(pid, pid)        # both sides: whoever runs first
    except OSError:
        pass
    return pid, w


def gate_open(gate, ok):
    try:
        os.write(gate, b"g" if ok else b"x")
    except OSError:
        pass
    os.close(gate)


class Terminal:
    """The controlling terminal, when record is its foreground: handed to
    the program's process group while it runs, as a shell hands it to a
    job, and taken back after."""

    def __init__(self):
        self.fd = -1
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if os.tcgetpgrp(fd) == os.getpgrp():
                self.fd = fd
                return
        except OSError:
            pass
        os.close(fd)

    def give(self, pgid):
        if self.fd >= 0:
            try:
                os.tcsetpgrp(self.fd, pgid)
            except OSError:
                pass

    def take(self):
        if self.fd >= 0:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            try:
                os.tcsetpgrp(self.fd, os.getpgrp())
            except OSError:
                pass
            signal.signal(signal.SIGTTOU, old)


def pdeathsig():
    """In perf's child before exec: die with record (SIGINT: perf then
    writes what it has and exits)."""
    _report.die_with_parent(signal.SIGINT)


class Perf:
    """perf record -p PID, attached and enabled before PID runs."""

    def __init__(self, perf, out, opts, pid, gated=False):
        self.log = os.path.join(out, "perf-record.log")
        _report.claim(out, ["perf-record.log", "perf.data"])
        cr, cw = os.pipe()
        ar, aw = os.pipe()
        # A gated program has not exec'd yet: what perf would synthesize
        # from its maps is record's own image (the same interpreter, at
        # other addresses), which perf 6.1 keeps beside the real one
        # after exec and then fails to unwind most samples through.  The
        # program's own mappings all come as events after exec.
        synth = ["--synth", "no"] if gated else []
        # --no-bpf-event: with -p, perf opens its BPF side-band event on
        # the task itself, not inherited; the kernel then never takes two
        # threads' perf contexts for clones, and every context switch
        # between the program's threads takes the slow path (a cpu-clock
        # hrtimer cancelled and started again each time): 2-4x the time
        # of contended free-threaded code, as root.  Without it, -p costs
        # what 'perf record -- CMD' does (python/README.md).  Lost:
        # records of BPF programs loaded while recording.
        cmd = perf + ["record", "-k", "1", "--no-bpf-event", "-e",
                      opts.event, "-F",
                      str(opts.freq), "--call-graph", perf_call_graph(opts),
                      "-D", "-1", "--control", "fd:%d,%d" % (cr, aw),
                      "-p", str(pid)] + synth + [
                      "-o", os.path.join(out, "perf.data")]
        if opts.wait or opts.wall:
            from jitring import _wait
            cmd[cmd.index("-p"):cmd.index("-p")] = _wait.perf_args(
                opts.call_graph, opts.wait_stack_size, opts.wait_freq,
                opts.wait_budget)
        # --wait: the watch over perf.data's budget, from enable() on.
        self.budget = None
        self.out, self.waits = out, opts.wait or opts.wall
        self.wait_budget, self.wait_freq = opts.wait_budget, opts.wait_freq
        self.pid = pid
        if not opts.keep_debug:
            # No build-ids (no cache: a 5.4 MB copy of kallsyms a
            # recording, most of an fp recording's folder); it is finished
            # at once, from the files in place.  With build-ids in its
            # header, perf script looked the vDSO up in the cache, found
            # nothing and could neither name nor unwind a sample in it
            # (jitring._live's segments, which have none, could).
            cmd.insert(cmd.index("-p"), "--no-buildid")
        with open(self.log, "wb") as log:
            self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log,
                                      pass_fds=(cr, aw), process_group=0,
                                      preexec_fn=pdeathsig)
        os.close(cr)
        os.close(aw)
        self.ctl, self.ack = cw, ar

    def enable(self, timeout=60.0):
        """True once perf has its events on; False if it died first."""
        try:
            os.write(self.ctl, b"enable\n")
        except OSError:
            return False
        end = time.monotonic() + timeout
        got = b""
        while b"ack" not in got:
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.ack], [], [], left)
            if not r:
                return False
            chunk = os.read(self.ack, 64)
            if not chunk:
                return False
            got += chunk
        if self.waits and self.budget is None:
            from jitring import _wait
            self.budget = _wait.Budget(self.out, self.wait_budget,
                                       self.ctl, self.ack, self.p,
                                       self.pid, self.wait_freq)
        return True

    def stop(self):
        """SIGINT (perf writes its data and exits), then wait; SIGKILL if
        it has not ended in a minute.  The control descriptors close
        only after: perf 6.1 takes a hang-up on its control descriptor
        for a monitored thread's and gives up ("Thread and evlist pollfd
        index mismatch"), leaving perf.data without its header."""
        if self.budget is not None:
            self.budget.stop()
            self.budget = None
        if self.p.poll() is None:
            try:
                self.p.send_signal(signal.SIGINT)
            except OSError:
                pass
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        for fd in (self.ctl, self.ack):
            try:
                os.close(fd)
            except OSError:
                pass
        self.ctl = self.ack = -1
        return self.p.returncode

    def why(self):
        try:
            with open(self.log, errors="replace") as f:
                lines = [l.rstrip() for l in f if l.strip() and
                         not l.startswith(("Events ", "[ perf record"))]
        except OSError:
            lines = []
        return "\n  ".join(lines[-6:]) or "(perf said nothing)"


def perf_call_graph(opts):
    """perf record's --call-graph value: fp, or dwarf with the stack copy's
    size."""
    if opts.call_graph == "dwarf":
        return "dwarf,%d" % opts.stack_size
    return opts.call_graph


def status_of(ws):
    """A shell's exit status for a wait status: 128+N for signal N."""
    if os.WIFSIGNALED(ws):
        return 128 + os.WTERMSIG(ws)
    return os.WEXITSTATUS(ws)


class Job:
    """Waits for the program, passing on the signals record receives."""

    def __init__(self, pid, term):
        self.pid = pid
        self.term = term
        self.status = None

    def forward(self, signum, frame):
        try:
            os.killpg(self.pid, signum)
        except OSError:
            pass

    def wait(self):
        for s in FORWARDED:
            signal.signal(s, self.forward)
        try:
            while True:
                pid, ws = os.waitpid(self.pid, os.WUNTRACED)
                if os.WIFSTOPPED(ws):
                    # Ctrl-Z: stop with it, by the same signal (a shell
                    # reports 128+N of it: 148 for SIGTSTP), as a shell's
                    # job stops; on SIGCONT, continue it in the
                    # foreground.  Where the kernel drops the stop (an
                    # orphaned process group), record goes on at once,
                    # as python itself would.
                    self.term.take()
                    os.kill(os.getpid(), os.WSTOPSIG(ws))
                    self.term.give(self.pid)
                    self.forward(signal.SIGCONT, None)
                    continue
                self.status = status_of(ws)
                return self.status
        finally:
            self.term.take()


def keeps_frame_pointers():
    """Whether this interpreter was built with frame pointers (Debian
    sid's 3.15, CPython 3.15's default; not 3.13 or 3.14 by default)."""
    import sysconfig
    flags = " ".join(sysconfig.get_config_var(v) or ""
                     for v in ("CFLAGS", "PY_CFLAGS", "CONFIGURE_CFLAGS"))
    return "-fno-omit-frame-pointer" in flags.split()


def meta_of(opts, command):
    """What the finishing reads of how the recording was made."""
    return {"version": 1, "command": command, "python": sys.executable,
            "event": opts.event, "freq": opts.freq,
            "keep_debug": opts.keep_debug, "top_only": opts.no_children,
            "inject": opts.inject, "perf_script": opts.perf_script,
            "call_graph": opts.call_graph,
            "keep_perf_data": opts.keep_perf_data, "inline": opts.inline,
            "cwd": os.getcwd(), "started": time.time(),
            "max_stack": max_stack(), "stack_size": opts.stack_size,
            "wait": opts.wait or opts.wall, "wall": opts.wall,
            "wait_stack_size": opts.wait_stack_size,
            "wait_freq": opts.wait_freq,
            "wait_budget": opts.wait_budget,

            "trampoline_elf": (opts.call_graph == "dwarf" and
                               not opts.memfd_trampolines)}


def max_stack():
    """kernel.perf_event_max_stack: the most frames perf records of a
    stack (127 unless raised)."""
    try:
        with open("/proc/sys/kernel/perf_event_max_stack") as f:
            return int(f.read())
    except (OSError, ValueError):
        return MAX_STACK_DEFAULT


# ---- --max-stack: kernel.perf_event_max_stack for the recording -------

SYSCTL_MAX_STACK = "/proc/sys/kernel/perf_event_max_stack"
# How long record waits for the old value to be back before it goes on
# (the guardian goes on trying: another perf session recording call
# chains holds the value until it ends).
RESTORE_WAIT = 5.0


class StackGuard:
    """kernel.perf_event_max_stack raised for one recording by a guardian
    process, which puts the old value back once the pipe record holds is
    closed: by put_back(), or by the kernel when record dies in any way
    (SIGKILL included).  The guardian sits in a session of its own with
    the terminal's signals ignored; it retries while the kernel refuses
    (EBUSY: perf sessions still record call chains, record's own perf
    among them while it exits), and leaves a value someone else set
    meanwhile alone."""

    def __init__(self, n):
        if os.geteuid() != 0:
            raise RecordError("--max-stack changes kernel.perf_event_"
                              "max_stack for the whole system, which only "
                              "root may: run record as root, or without "
                              "--max-stack")
        self.old = self.pid = None
        self.hold = self.answer = -1
        old = max_stack()
        if old >= n:
            return              # already that deep: nothing to change
        hold_r, hold_w = os.pipe()
        ans_r, ans_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(hold_w)
            os.close(ans_r)
            guardian(old, n, hold_r, ans_w)     # never returns
        os.close(hold_r)
        os.close(ans_w)
        said = b""
        while True:
            chunk = os.read(ans_r, 512)
            said += chunk
            if not chunk or said.endswith(b"\n"):
                break
        if said != b"ok\n":
            os.close(ans_r)
            os.close(hold_w)
            os.waitpid(pid, 0)
            raise RecordError(said.decode(errors="replace").strip() or
                              "--max-stack: its guardian process failed")
        self.old, self.pid, self.hold, self.answer = old, pid, hold_w, ans_r

    def put_back(self):
        """The old value back (after perf has stopped), or a line on
        stderr saying when it will be."""
        if self.pid is None:
            return
        os.close(self.hold)
        r, _, _ = select.select([self.answer], [], [], RESTORE_WAIT)
        said = os.read(self.answer, 512) if r else b""
        os.close(self.answer)
        if r:
            os.waitpid(self.pid, 0)
        if said.startswith(b"restored"):
            pass
        elif said:
            sys.stderr.write("jitring record: %s\n"
                             % said.decode(errors="replace").strip())
        else:
            sys.stderr.write("jitring record: kernel.perf_event_max_stack "
                             "stays raised while another perf session "
                             "records call chains; process %d puts %d "
                             "back when it ends\n" % (self.pid, self.old))
        self.pid = None


def write_sysctl(n):
    """None, or the errno of writing @n into kernel.perf_event_max_stack."""
    try:
        fd = os.open(SYSCTL_MAX_STACK, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"%d\n" % n)
        finally:
            os.close(fd)
    except OSError as e:
        return e.errno
    return None


def guardian(old, n, hold, answer):
    """StackGuard's process: set @n, say so on @answer, wait for EOF on
    @hold, put @old back; never returns."""
    try:
        os.setsid()
        for s in FORWARDED + (signal.SIGTSTP, signal.SIGTTIN,
                              signal.SIGTTOU, signal.SIGPIPE):
            signal.signal(s, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        keep = {0, 1, 2, hold, answer}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        e = write_sysctl(n)
        if e is not None:
            why = ("another perf session records call chains, and the "
                   "kernel keeps the value until it ends" if
                   e == errno.EBUSY else "the kernel refused")
            os.write(answer, b"--max-stack: cannot set kernel.perf_event_"
                     b"max_stack to %d: %s (%s)\n"
                     % (n, why.encode(), os.strerror(e).encode()))
            os._exit(1)
        os.write(answer, b"ok\n")
        while os.read(hold, 64):
            pass
        os._exit(restore(old, n, answer))
    except BaseException:
        os._exit(3)


def restore(old, n, answer):
    """Put @old back unless someone else changed @n meanwhile, retrying
    while the kernel refuses with EBUSY; the outcome on @answer (record
    may be gone: then nobody reads it)."""
    pause = 0.01
    while True:
        if max_stack() != n:
            msg = b"restored\n"         # someone else's value: theirs
            break
        e = write_sysctl(old)
        if e is None:
            msg = b"restored\n"
            break
        if e != errno.EBUSY:
            msg = (b"--max-stack: could not put kernel.perf_event_max_"
                   b"stack back to %d (%s): it stays %d\n"
                   % (old, os.strerror(e).encode(), n))
            break
        time.sleep(pause)
        pause = min(1.0, pause * 2)
    try:
        os.write(answer, msg)
    except OSError:
        pass
    return 0 if msg.startswith(b"restored") else 1


def forget(out, fresh):
    """A refusal before the program ran leaves nothing behind: the files
    this run wrote, and the folder if it made it."""
    try:
        clear(out, _report.claimed(out))
        if fresh:
            os.rmdir(out)
    except (OSError, RecordError):
        pass


def record(opts, target, perf_bin):
    if os.geteuid() == 0:
        # root runs the program, perf and the finishing in the folder by
        # name: none of it where another user could swap a file.
        if opts.output is not None:
            opts.output = os.path.realpath(opts.output)
        why = unsafe_folder(opts.output if opts.output is not None else
                            os.path.join(os.getcwd(), "jitring-record-"))
        if why:
            raise RecordError(why)
    fresh = opts.output is None or not os.path.exists(opts.output)
    out = out_dir(opts.output, opts.force)
    before = set(os.listdir(out))
    perf = _report.perf_cmd(perf_bin, out, opts.keep_debug)
    env = program_env(out, opts)
    argv = [sys.executable, "-m", "jitring", "--dir", out, "--engine",
            opts.engine] + target
    meta = meta_of(opts, target)
    term = Terminal()
    pid, gate = fork_gated(argv, env)
    meta["pid"] = pid

    def refuse(msg):
        gate_open(gate, False)
        os.waitpid(pid, 0)
        forget(out, fresh)
        return RecordError(msg)
    try:
        # First: whatever happens later, report can finish the folder.
        _report.write_meta(out, meta)
    except OSError as e:
        raise refuse("cannot write %s: %s"
                     % (os.path.join(out, META), e.strerror))
    try:
        p = Perf(perf, out, opts, pid, gated=True)
    except OSError as e:
        raise refuse("cannot run perf: %s" % e)
    if not p.enable():
        p.stop()
        raise refuse("perf record could not profile (event %s):\n  %s"
                     % (opts.event, p.why()))
    term.give(pid)
    gate_open(gate, True)
    live = None
    if live_reading(opts, meta):
        from jitring import _live
        live = _live.Live(out, perf, opts.inline,
                          fp=opts.call_graph == "fp").start()
    job = Job(pid, term)
    try:
        status = job.wait()
    finally:
        perf_rc = p.stop()
    meta["status"] = status
    meta["seconds"] = time.time() - meta["started"]
    meta["perf_status"] = perf_rc
    try:
        _report.claim_grown(out, before)
        _report.write_meta(out, meta)
    except OSError as e:
        if e.errno not in _report.FULL:
            raise RecordError("cannot write in %s: %s" % (out, e.strerror))
        # A full disk: the meta written first stands; finish() says it.
    if not os.path.exists(os.path.join(out, "perf.data")):
        if live:
            live.discard()
        raise RecordError("perf record wrote no perf.data:\n  %s"
                          % p.why())
    return out, meta, live


def live_reading(opts, meta):
    """Whether the samples are read while the program runs
    (jitring._live): a recording perf script reads itself (dwarf mode
    through the trampolines' ELF files, or fp mode), not one perf inject
    rewrites first; --perf-script (the whole text kept) and --wait
    (which reads the switches in time order with the samples) finish
    after."""
    return bool(meta.get("trampoline_elf") or
                opts.call_graph == "fp") and not (
        opts.perf_script or opts.wait or opts.wall or
        os.environ.get("JITRING_PY_TEST_LIVE") == "0")


class WindowWait:
    """record --pid's wait: until the duration ends or a signal comes (the
    target is not told: it is not record's child)."""

    def __init__(self):
        self.signum = None

    def stop(self, signum, frame):
        self.signum = signum
        raise KeyboardInterrupt

    def wait(self, duration, win=None):
        """Until @duration (None: a signal) is over; with @win, whose
        start may still be unanswered, its late answer read meanwhile (an
        error ends the window: AttachError)."""
        import threading
        old = {s: signal.signal(s, self.stop) for s in FORWARDED}
        end = None if duration is None else time.monotonic() + duration
        try:
            while True:
                left = 3600.0 if end is None else end - time.monotonic()
                if left <= 0:
                    break
                if win is None or win.answer is not None:
                    threading.Event().wait(None if end is None else left)
                    break
                win.poll(min(left, 1.0))
        except KeyboardInterrupt:
            pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def attach(opts, perf_bin):
    """record --pid: perf on PID (its threads and what it starts), then
    jitring on in it for the window (so perf sees the dump's mapping),
    then off, then perf off."""
    from jitring import _attach
    try:
        info = _attach.probe(opts.pid)
        how = _attach.route(info)
        # Checked as resolved, and used so: no link on the way moves.
        if opts.output is not None:
            opts.output = os.path.realpath(opts.output)
        why = unsafe_folder(opts.output if opts.output is not None else
                            os.path.join(os.getcwd(), "jitring-record-"))
        if why:
            raise RecordError(why)
        lock = _attach.hold(opts.pid)
    except _attach.AttachError as e:
        raise RecordError(str(e))
    try:
        fresh = opts.output is None or not os.path.exists(opts.output)
        out = out_dir(opts.output, opts.force)
        try:
            return attach_window(opts, perf_bin, info, how, out)
        except RecordError:
            if fresh:       # a refusal leaves nothing behind
                shutil.rmtree(out, ignore_errors=True)
            raise
    finally:
        _attach.release(opts.pid, lock)


def unsafe_folder(path):
    """Why another user could change @path (the -o folder, there or to
    be made) under record, or None: record and the program or target
    write there by name, so every folder on the way must be this user's
    or root's, and writable by no one else (one above it may be shared if
    sticky, as /tmp is).  Checked for record --pid, and for root's
    record PROGRAM."""
    import pwd
    import stat
    euid, egid = os.geteuid(), os.getegid()
    full = os.path.realpath(path)
    d = "/"
    for part in [""] + full.strip("/").split("/"):
        d = os.path.join(d, part)
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return None         # record makes the rest
        except OSError as e:
            return "cannot check %s: %s" % (d, e.strerror)
        shared = st.st_mode & 0o002 or \
            (st.st_mode & 0o020 and st.st_gid != egid)
        if st.st_uid not in (0, euid):
            try:
                who = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                who = "uid %d" % st.st_uid
            why = "is owned by %s" % who
        elif shared and (d == full or not st.st_mode & stat.S_ISVTX):
            why = "is writable by other users"
        else:
            continue
        return ("the output folder %s cannot be used: %s %s, who could "
                "swap the files record writes there; choose one "
                "only you can write (-o)" % (path, d, why))
    return None


def attach_window(opts, perf_bin, info, how, out):
    from jitring import _attach
    perf = _report.perf_cmd(perf_bin, out, opts.keep_debug)
    meta = meta_of(opts, info["argv"])
    # The target's trampolines are whatever its jitring made (memfd
    # arenas): a dwarf window is finished with perf inject.
    meta.update(attached=True, route=how, pid=opts.pid, status=0,
                trampoline_elf=False)
    limit = (opts.duration + _attach.LIMIT_SLACK if opts.duration else
             _attach.LIMIT_UNBOUNDED)
    procs = os.path.join(out, PROCS)
    p = Perf(perf, out, opts, opts.pid)
    win = None
    try:
        if not p.enable():
            raise RecordError("perf record could not profile process %d "
                              "(event %s):\n  %s"
                              % (opts.pid, opts.event, p.why()))
        try:
            win = _attach.Window(info, out, limit, procs)
            a = win.start()
        except _attach.AttachError as e:
            raise RecordError(str(e))
        sys.stderr.write("jitring record: attached to process %d (%s); "
                         "%s%s\n" % (opts.pid, how,
                                     "for %g s" % opts.duration
                                     if opts.duration else
                                     "Ctrl-C ends the window",
                                     "; its answer is still to come (no "
                                     "thread of it runs Python yet)"
                                     if a.get("pending") else ""))
        late = None
        try:
            WindowWait().wait(opts.duration, win)
        except _attach.AttachError as e:
            late = e
        try:
            if win.stop() is not None:
                # Before close() removes the window's folder.
                run = win.running()
                if run is not None and run["pid"] == opts.pid:
                    try:
                        _report.write_running(out, run)
                    except OSError:
                        pass    # its frames stay unnamed, as without it
        except _attach.AttachError as e:
            sys.stderr.write("jitring record: %s (it stops by itself, "
                             "record being gone)\n" % e)
        if late is not None:
            raise RecordError(str(late))
        if win.answer is None:
            sys.stderr.write("jitring record: process %d ran no Python in "
                             "the window: jitring did not start there\n"
                             % opts.pid)
        meta["answered"] = win.answer is not None
        on = (win.answer or {}).get("on_ns")
        if type(on) is int and not win.answer.get("was_active"):
            meta["window_on_ns"] = on
    finally:
        if win:
            win.close()
        perf_rc = p.stop()
    meta["seconds"] = time.time() - meta["started"]
    meta["perf_status"] = perf_rc
    if how == "as-is":
        copy_live_dump(opts.pid, out)
    _report.claim_grown(out, ())
    _report.write_meta(out, meta)
    return out, meta


def copy_live_dump(pid, out):
    """A service whose jitring was on before record came writes its dump
    where it chose, and goes on writing it: the recording takes a copy of
    what it holds now (perf.data's marker is pointed at the copy when the
    recording is finished), so that finishing, and any later report,
    works on the copy and never on the service's file."""
    name = "jit-%d.dump" % pid
    try:
        with open("/proc/%d/maps" % pid) as f:
            paths = {l.split(None, 5)[5].strip() for l in f
                     if l.rstrip().endswith("/" + name)}
    except (OSError, IndexError):
        return
    for src in sorted(paths):
        dst = os.path.join(out, name)
        if os.path.exists(dst) or not os.path.isfile(src):
            continue
        try:
            shutil.copyfile(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
        except OSError:
            pass
        break


def main(argv):
    opts, target = parse(argv)
    if opts.wait or opts.wall:
        from jitring import _wait
        why = _wait.check()
        if why:
            sys.stderr.write("jitring record: %s\n" % why)
            return 2
    if opts.call_graph == "auto":
        # A wait's stack runs through libc's futex, sleep and I/O paths,
        # which keep no frame pointers in Debian's glibc: in fp mode the
        # frame that names the reason (the GIL's condition variable, a
        # lock's semaphore) is lost.  --wait unwinds by DWARF.
        opts.call_graph = "fp" if keeps_frame_pointers() and not (
            opts.wait or opts.wall) else "dwarf"
    if opts.pid is None:
        redo = missing_target(target)
        if redo:
            os.execv(redo[0], redo)
    guard = None
    try:
        perf_bin = _report.find_perf()
        if opts.max_stack:
            guard = StackGuard(opts.max_stack)
        if opts.pid is not None:
            out, meta = attach(opts, perf_bin)
            live = None
        else:
            out, meta, live = record(opts, target, perf_bin)
    except RecordError as e:
        sys.stderr.write("jitring record: %s\n" % e)
        return 2
    finally:
        if guard:
            guard.put_back()        # perf has stopped
    if opts.pid is not None:
        return _report.finish(out, meta, top=opts.top, browser=opts.browser)
    rc = _report.finish(out, meta, top=opts.top, browser=opts.browser,
                        live=live)
    # A full disk (1) keeps the recording to finish later, and the
    # program's status.
    return meta["status"] if rc in (0, 1) else rc
