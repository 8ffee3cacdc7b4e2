# SPDX-License-Identifier: MIT
"""record --pid: a window on a running process (jitring.attach.window),
recorded by perf for its --duration or until Ctrl-C, then finished as
any recording."""

import os
import shutil
import signal
import sys
import time

from jitring.common.errors import RecordError
from jitring.common.folder import PROCS, claim_grown, write_meta, write_running
from jitring.perf.driver import perf_cmd
from jitring.record.job import FORWARDED
from jitring.record.out import out_dir, unsafe_folder
from jitring.record.perf import Perf, meta_of


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
    from jitring._target import hold, release
    from jitring.attach.probe import probe, route
    from jitring.common.errors import AttachError
    try:
        info = probe(opts.pid)
        how = route(info)
        # Checked as resolved, and used so: no link on the way moves.
        if opts.output is not None:
            opts.output = os.path.realpath(opts.output)
        why = unsafe_folder(opts.output if opts.output is not None else
                            os.path.join(os.getcwd(), "jitring-record-"))
        if why:
            raise RecordError(why)
        lock = hold(opts.pid)
    except AttachError as e:
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
        release(opts.pid, lock)


def attach_window(opts, perf_bin, info, how, out):
    from jitring._target import LIMIT_SLACK, LIMIT_UNBOUNDED
    from jitring.attach.window import Window
    from jitring.common.errors import AttachError
    perf = perf_cmd(perf_bin, out, opts.keep_debug)
    meta = meta_of(opts, info["argv"])
    # The target's trampolines are whatever its jitring made (memfd
    # arenas): a dwarf window is finished with perf inject.
    meta.update(attached=True, route=how, pid=opts.pid, status=0,
                trampoline_elf=False)
    limit = (opts.duration + LIMIT_SLACK if opts.duration else
             LIMIT_UNBOUNDED)
    procs = os.path.join(out, PROCS)
    p = Perf(perf, out, opts, opts.pid)
    win = None
    try:
        if not p.enable():
            raise RecordError("perf record could not profile process %d "
                              "(event %s):\n  %s"
                              % (opts.pid, opts.event, p.why()))
        try:
            win = Window(info, out, limit, procs)
            a = win.start()
        except AttachError as e:
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
        except AttachError as e:
            late = e
        try:
            if win.stop() is not None:
                # Before close() removes the window's folder.
                run = win.running()
                if run is not None and run["pid"] == opts.pid:
                    try:
                        write_running(out, run)
                    except OSError:
                        pass    # its frames stay unnamed, as without it
        except AttachError as e:
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
    claim_grown(out, ())
    write_meta(out, meta)
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
