# SPDX-License-Identifier: MIT
"""record --pid's window: samples from before jitring started in the
process left out (window_on(), in_window()), and the Python frames that
ran throughout the window put at the root of each sample of their thread
(with_running()): perf saw them only as the interpreter's eval loop."""

from jitring.profile.classify import (_interp_dso, _own_frame, label,
                                      program_stack)
from jitring.profile.cuts import CUT, _thread_start, is_cut


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
