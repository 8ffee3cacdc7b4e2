# SPDX-License-Identifier: MIT
"""Finishing a recording: from perf.data and the dumps to a profile.

``python -m jitring record`` calls finish() once the program has exited
and perf has stopped; ``python -m jitring report DIR`` calls it on a
recording whose finishing was interrupted (or to see it again).  Two
finishings of one folder take its lock (LOCK) in turn; every file either
writes there is listed in its manifest (MANIFEST) first, the only files
``record --force`` removes; a full disk keeps the recording for later.

Steps, each a file in the recording's folder:

  perf.data        fixed first (jitring.perf.execfix), so that perf unwinds
                   the processes that exec'd

  perf.jit.data    ``perf inject --jit``: perf.data with the JIT code of
                   the dumps as ELF images (``perf report -i``); it
                   replaces perf.data.  perf inject is given only the
                   functions the samples can reach (jitring.perf.jitsyms), so
                   its cost and its jitted-*.so follow the samples
  perf.script.txt  with --perf-script only: ``perf script`` text of the
                   samples with their stacks (Firefox Profiler and
                   speedscope load it)
  stacks.folded    one line per stack, root first, ``a;b;c COUNT``
  flame.html       an interactive flame graph, self-contained
  stacks-wait.folded, flame-wait.html
                   with record --wait: the same of where threads waited
                   off CPU, in microseconds (jitring.wait.waits)

The stacks the table and the flame graph show are the program's: the
frames of jitring's runner above the program's first Python frame and
runpy's wherever they are (how a main module is run: python -m,
multiprocessing's spawn) are left out, and so are the interpreter's own
frames between two Python frames (the call machinery of every Python
call).  Native frames
below the innermost Python frame (C extensions, builtins, libc, the
kernel) stay.  In a recording of record --pid, the Python frames that ran
throughout the window in a thread (RUNNING, from the service) are put at
the root of each of its samples: they never went through a trampoline,
so perf has them as the interpreter's eval loop only, unnamed.  Samples
of jitring's own work (its start-up and stop, its threads, its native
code: own_work()) are left out altogether.
"""

import os
import sys
from typing import NamedTuple

from jitring.common.errors import Interrupted, RecordError
from jitring.common.folder import (FULL, OUTPUTS, claim, claim_grown,
                                   drop_partial, injected, lock, no_space,
                                   processes, read_meta, running, write_meta)
from jitring.common.meta import Meta
from jitring.output import WRITERS
from jitring.perf.driver import Steps, find_perf, inject, perf_cmd
from jitring.perf.lost import perf_lost
from jitring.perf.script import script
from jitring.profile.aggregate import summarize
from jitring.profile.cuts import MAX_STACK_DEFAULT
from jitring.profile.model import Profile, Running
from jitring.profile.window import in_window


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
    from jitring.perf.live import drop
    try:
        # What a finishing that held the lock before wrote.
        meta.exec_fixed = read_meta(out).exec_fixed
    except RecordError:
        pass
    if live is None:
        drop(out)     # a stopped record's
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
            # segments (jitring.perf.live.main()).
            from jitring.perf.execfix import fix
            fix(os.path.join(out, data))
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
        from jitring.perf.jitsyms import memfd_arenas, relative_markers
        elf = not memfd_arenas(
            os.path.join(out, "perf.data"))
    pre, data = live_tail(out, meta, live, (elf or fp) and not done)
    if not done:
        # perf opens the dumps by the names of their mmaps, made
        # relative to the folder: a moved folder finishes.
        from jitring.perf.jitsyms import memfd_arenas, relative_markers
        relative_markers(os.path.join(out, "perf.data"))
    if not done and not meta.exec_fixed:
        # Before perf reads it: processes that exec'd unwind
        # (jitring.perf.execfix).  Once: finish() may run again.
        from jitring.perf.execfix import fix
        if fix(os.path.join(out, "perf.data")) >= 0:
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
    of the CPU's, with the waits of the context switches' (jitring.wait.waits).
    @view: how to show it (Profile's top, browser, prog)."""
    procs = processes(out)
    top_pid = meta.pid if meta.top_only else None
    if meta.wait:       # record --wait
        from jitring.wait.threads import split
        from jitring.wait.waits import Waits
        samples, switches = split(samples)
    outer = None
    if meta.attached and type(meta.pid) is int:
        outer = Running(meta.pid, running(out, meta.pid))
    profile = Profile(out, meta, summarize(samples, procs, top_pid,
                                           meta.max_stack or MAX_STACK_DEFAULT,
                                           outer),
                      **view)
    if meta.wait:
        profile.waits = Waits.read(out, meta, switches, procs, top_pid,
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
    lock.  @live: record's jitring.perf.live.Live, the samples it read while
    the program ran.  @meta: the recording's metadata (a dict or a Meta;
    what the finishing adds goes to a Meta of its own).  Returns 0, 1
    (the disk is full: said, the recording kept to finish later), 2 (an
    error, said) or 128+N (stopped by signal N, the recording kept).
    @prog names the command in messages."""
    meta = meta if isinstance(meta, Meta) else Meta(meta)
    writers = WRITERS if writers is None else writers
    lockfd = -1
    from jitring.perf.data import kept_indexes
    try:
        # The readers of perf.data below share one walk of it.
        with Steps() as steps, kept_indexes():
            lockfd = lock(out, prog)
            before, done = take_outputs(out, meta, live)
            perf = perf_cmd(find_perf(), out, meta.keep_debug)
            src = prepare(steps, perf, out, meta, live, before, done)
            # The reading makes millions of objects that all live to the
            # end: the free-threaded build's collector walks the whole
            # heap each time it runs (it doubled the reading's CPU).
            from jitring.perf.jitsyms import no_gc
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
