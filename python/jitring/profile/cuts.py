# SPDX-License-Identifier: MIT
"""Stacks perf did not record whole: a stack whose root is not a
thread's start is cut (perf's depth limit, or a stack copy too small to
unwind), marked CUT at its root; cut_note() says how many and what to do
about it."""

import os

from jitring.profile.classify import _own_frame


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
