# SPDX-License-Identifier: MIT
"""python -m jitring record: from a program to a profile in one command.

Runs the program as a shell runs a job, with perf attached to it from
its first instruction, and every Python process it starts profiled too;
then turns the recording into a table, a flame graph and files
(jitring.record.finish).

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

import os
import sys
import time

from jitring.common.errors import RecordError
from jitring.common.folder import FULL, META, claim_grown, write_meta
from jitring.perf.driver import perf_cmd
from jitring.record.job import (Job, Terminal, fork_gated, gate_open,
                                program_env)
from jitring.record.maxstack import forget
from jitring.record.out import out_dir, unsafe_folder
from jitring.record.perf import Perf, meta_of


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
    perf = perf_cmd(perf_bin, out, opts.keep_debug)
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
        write_meta(out, meta)
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
        from jitring.perf.live import Live
        live = Live(out, perf, opts.inline,
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
        claim_grown(out, before)
        write_meta(out, meta)
    except OSError as e:
        if e.errno not in FULL:
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
    (jitring.perf.live): a recording perf script reads itself (dwarf mode
    through the trampolines' ELF files, or fp mode), not one perf inject
    rewrites first; --perf-script (the whole text kept) and --wait
    (which reads the switches in time order with the samples) finish
    after."""
    return bool(meta.get("trampoline_elf") or
                opts.call_graph == "fp") and not (
        opts.perf_script or opts.wait or opts.wall or
        os.environ.get("JITRING_PY_TEST_LIVE") == "0")
