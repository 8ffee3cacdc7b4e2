# SPDX-License-Identifier: MIT
"""python -m jitring record's command line: its options, their checks
(sizes, rates, stack limits), and main(), which hands the parsed options
to the run (jitring.record.run), the attach window (jitring.record.attach)
or the finishing (jitring.record.finish)."""

import argparse
import os
import re
import sys

from jitring.common.errors import RecordError
from jitring.perf.driver import find_perf
from jitring.profile.cuts import MAX_STACK, STACK_MAX, STACK_SIZE
from jitring.record.attach import attach
from jitring.record.finish import finish
from jitring.record.maxstack import StackGuard
from jitring.record.out import missing_target
from jitring.record.perf import keeps_frame_pointers
from jitring.record.run import record


USAGE = ("python -m jitring record [options] [--] "
         "(script.py | -m module) [args...]\n"
         "       python -m jitring record [options] --pid PID "
         "[--duration S]")


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
    from jitring.wait.setup import (BUDGET as WAIT_BUDGET, FREQ as WAIT_FREQ,
                                    STACK_SIZE as WAIT_STACK)
    p.add_argument("--wait-stack-size", type=stack_size, default=WAIT_STACK,
                   metavar="BYTES",
                   help="with --wait in dwarf mode: the bytes of stack "
                   "perf copies at each context switch (default %d: "
                   "a program switching often loses fewer samples; up "
                   "to %d)" % (WAIT_STACK, STACK_MAX))
    p.add_argument("--wait-freq", type=wait_freq, default=WAIT_FREQ,
                   metavar="HZ",
                   help="with --wait: while the program switches more "
                   "than 5,000 times a second, take the stacks of about "
                   "HZ context switches a second a thread at most, each "
                   "weighing the switches it stands for (every switch is "
                   "still timed); 0: every switch's stack always "
                   "(default %d)" % WAIT_FREQ)
    p.add_argument("--wait-budget", type=size_bytes, default=WAIT_BUDGET,
                   metavar="SIZE",
                   help="with --wait: the most perf.data may take (e.g. "
                   "500M, 2G; default 1G): the switches' stacks stop at "
                   "half, perf at all of it, each said on stderr")
    p.add_argument("--wall", action="store_true",
                   help="--wait, and a line per thread: its CPU time and "
                   "its time off CPU by reason")


def seconds(s):
    from jitring._target import DURATION_MAX
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


def main(argv):
    opts, target = parse(argv)
    if opts.wait or opts.wall:
        from jitring.wait.setup import check
        why = check()
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
        perf_bin = find_perf()
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
        return finish(out, meta, top=opts.top, browser=opts.browser)
    rc = finish(out, meta, top=opts.top, browser=opts.browser,
                        live=live)
    # A full disk (1) keeps the recording to finish later, and the
    # program's status.
    return meta["status"] if rc in (0, 1) else rc
