# SPDX-License-Identifier: MIT
"""From samples to counts: summarize() classifies each distinct stack
once, counts the program's stacks per process and per Python function
(self and total), and keeps the cut statistics; folded_stack() is the
stack as stacks.folded keeps it."""

import functools

from jitring.profile.classify import (_kinds, command_of, own_work,
                                      program_stack)
from jitring.profile.cuts import CUT, MAX_STACK_DEFAULT, is_cut
from jitring.profile.model import CutStats, FunctionRow, ProcessRow, Summary
from jitring.profile.window import with_running


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


def summarize(samples, procs, top_pid, limit=MAX_STACK_DEFAULT, outer=None):
    """The Summary of @samples: its folded maps a root-first tuple (the
    process first) to its count; its cut counts the program's samples,
    those cut, those cut at perf's depth limit of @limit frames less the
    context markers it may count, and jitring's own samples left out,
    for cut_note().  @outer: record --pid's service (a Running), or
    None."""
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
