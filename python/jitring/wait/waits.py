# SPDX-License-Identifier: MIT
"""record --wait: where the program's threads wait, by Python function,
and why.

Besides its CPU samples, perf records every context switch of the
program's threads, twice:

  - a sample of the software event context-switches, taken as the
    thread leaves its CPU, with the whole stack (kernel, native and
    Python frames: the trampolines name the Python ones as in the CPU
    profile): at every switch, or, while the program switches more than
    RATE times a second, at about --wait-freq a second a thread (perf's
    frequency mode); record's watch (Budget) enables one or the other,
    and stops them both where perf.data reaches half its --wait-budget;
  - PERF_RECORD_SWITCH records (--switch-events): OUT as the thread
    leaves its CPU, flagged PREEMPT where it was still runnable (the
    scheduler took the CPU; or the thread yielded it), IN as it runs
    again.

The records time every switch, so each thread's time blocked and its
time preempted (by the OUT's flag) are exact; the samples only split
them by stack.  A switch sample stands for the switches of its thread
and kind (the OUT's flag) since the previous sample of that thread and
kind, up to its own (one where every switch is sampled), and weighs
their time off CPU: from each OUT to the thread's next IN.  A thread's
switches after its last sample of a kind (perf lost the samples, the
stacks were sampled or stopped) weigh nothing in the tables and are
counted as "no sampled stack"; a sample whose OUT is missing is
counted apart.  What perf lost (its LOST_SAMPLES, by event) is said
after the tables.  A switch is voluntary (the thread
blocked) unless its OUT is flagged PREEMPT and its stack does not show
sched_yield (PyMutex spins with sched_yield before it parks: that thread
waits for the lock, not for a CPU); involuntary ones ("preempted") are
shown apart.

Why a thread waits is read from the native frames under its innermost
Python frame (reason()): the innermost frame that names a reason (a
syscall, take_gil, a critical section, threading's lock, ...) wins; the
generic machinery under those (futex, _PySemaphore_Wait, the parking
lot, PyMutex) names the reason only where nothing above it does, with its
caller.  Python frames of threading and queue refine a lock's reason
(Event.wait, Condition.wait, Queue.get).  A Python-level wait in C
(SimpleQueue.get) is named as that call, or as the pool's idleness where
the innermost Python frame is a pool's worker waiting for work (IDLE);
a lock of the interpreter's own (the biased-refcount merge, the thread
list, the type lock, ...) as "interpreter (...)".

Shares are of thread time: the sum of the lives of the program's
threads in the recording (FORK to EXIT, or their first and last
record), jitring's own threads left out; switches of jitring's own work
are left out as its CPU samples are (jitring.profile.classify.own_work()).

The folder gets stacks-wait.folded and flame-wait.html (counts in
microseconds of waiting; a frame "[wait: REASON]" under the innermost
Python frame), drawn by the same page as flame.html (jitring.output.flame).
"""

from typing import NamedTuple

from jitring.common.errors import RecordError
from jitring.perf.data import PerfDataError
from jitring.profile.classify import (OWN_THREADS, command_of, own_work,
                                      program_stack)
from jitring.profile.cuts import CUT, is_cut
from jitring.profile.window import window_on, with_running
from jitring.wait.reasons import reason
from jitring.wait.setup import PREEMPTED, UNSAMPLED, budget_of
from jitring.wait.threads import Threads


# ---- the model ---------------------------------------------------------
WAIT_FRAME = "[wait: %s]"


class Stack(NamedTuple):
    """What a switch sample's stack says (Waits._classify())."""
    key: tuple          # the flame stack, root first, "[wait: REASON]"
                        # under the innermost Python frame
    reason: str
    py: list            # the program's Python frames, root first
    first: str          # the thread's first frame of the program, or None
    cut: bool           # its outer frames not recorded


class Weighed(NamedTuple):
    """A switch sample matched to its switch, and the time off CPU of the
    switches it stands for (Waits._match())."""
    pid: int
    comm: str
    tid: int
    preempt: bool       # its OUT record's flag
    ns: int
    stack: Stack


class Matched(NamedTuple):
    """Waits._match()'s result."""
    rows: list          # [Weighed] of the program's switch samples
    covered: dict       # (tid, preempted) -> ns its samples weigh
    sampled: set        # the tids with a sample for more than one switch


class Blocked(NamedTuple):
    """A key of Waits.self_: the innermost Python function, and why it
    waits."""
    function: str
    reason: str


def _by_time(sample):
    return sample.time


class Waits:
    """The waits of a recording (the model): each thread's time by
    reason, the functions' waits by reason (total and self), the folded
    wait stacks, and the facts the notes give.  WaitFolded, WaitFlame
    and WaitTables (in jitring.output.WRITERS) write and print it."""

    @classmethod
    def read(cls, out, meta, samples, procs, top_pid, data, outer=None):
        """The waits of the switch @samples (script()'s of the switch
        events: split()) and of the switch records of perf.data at @data,
        its processes @procs (jitring.common.folder.processes()); @top_pid: the
        program's process alone (record --top-only), or None."""
        try:
            th = Threads.read(data, window_on(meta))
        except PerfDataError as e:
            raise RecordError("cannot read the context switches "
                                      "of %s: %s" % (data, e))
        return cls.of(out, meta, samples, procs, top_pid, th, budget_of(out),
                      outer)

    @classmethod
    def of(cls, out, meta, samples, procs, top_pid, threads, budget,
           outer=None):
        """The model alone, from switches already read (@threads: a
        Threads; @budget: what Budget noted, as budget_of() gives it):
        no file read or written."""
        self = cls.__new__(cls)
        self._compute(out, meta, samples, procs, top_pid, threads, budget,
                      outer)
        return self

    def _compute(self, out, meta, samples, procs, top_pid, th, budget,
                 outer):
        """The model of @samples on the switches of @th (Threads)."""
        self.out, self.meta = out, meta
        self.procs = procs
        self.threads = th
        self.budget = budget
        self.unmatched = 0
        self.own = 0
        self.samples = len(samples)
        self.cut_ns = 0
        got = self._match(samples, top_pid, outer)
        stacks, comms = self._tally(got.rows)
        self._program(top_pid, comms, procs)
        # Sampled: a sample stood for more than one switch, or the
        # watch sampled the stacks for a while (perf's frequency mode
        # may have taken none there).
        self.sampled = bool(got.sampled) or bool(self.budget.get("fast"))
        self._unsampled(got.covered)
        self.folded = self._fold(stacks, comms, procs)

    def _match(self, samples, top_pid, outer):
        """Pass 1: each sample stands for the switches of its thread and
        kind (the OUT records' preemption flag) since the one its
        previous sample of that kind was taken at, to its own (one, at
        every switch; about its period, sampled at a frequency), and
        weighs their time off CPU, timed by the records.  A thread's
        switches of a kind after its last sample of it have no stack:
        UNSAMPLED."""
        th = self.threads
        sampled = set()     # the tids with a sample for more than one
        rows = []
        covered = {}        # (tid, preempted) -> ns the samples weigh
        seen = {}
        marks = {}          # (tid, kind) -> its last sampled OUT's index
        # record --pid: the frames each thread of the service ran
        # throughout the window (jitring.profile.window.with_running()).
        o_pid, o_tids = outer or (None, {})
        for pid, comm, frames, tid, t, _ in sorted(samples,
                                                   key=_by_time):
            if top_pid is not None and pid != top_pid:
                continue
            if th.period.get((tid, t), 1) > 1:
                sampled.add(tid)
            i = th.out_index(tid, t)
            if i is None:
                self.unmatched += 1
                continue
            _, preempt = th.outs[tid][i]
            j = marks.get((tid, preempt), -1)
            if i <= j:
                continue        # the same switch's other event
            marks[(tid, preempt)] = i
            ns = th.span(tid, j, i).get(preempt, 0)
            covered[(tid, preempt)] = covered.get((tid, preempt), 0) + ns
            o = o_tids.get(tid) if pid == o_pid else None
            k = (comm, tuple(frames), preempt, o)
            c = seen.get(k)
            if c is None:
                c = seen[k] = self._classify(comm, frames, preempt, o)
            if c is False:
                self.own += 1
                continue
            rows.append(Weighed(pid, comm, tid, preempt, ns, c))
        return Matched(rows, covered, sampled)

    def _tally(self, rows):
        """Pass 2: the weighed samples (@rows) by thread, reason,
        function and stack; returns ({(pid, flame stack): ns}, {pid: its
        first command})."""
        total, self_, stacks = {}, {}, {}
        pre_self = {}
        per_thread = {}     # tid -> {reason: ns}
        entry = {}          # tid -> {first user Python frame: n}
        self.comm = {}      # tid -> its name in its samples
        comms = {}
        for row in rows:
            pid, tid, ns, c = row.pid, row.tid, row.ns, row.stack
            why, py = c.reason, c.py
            if c.cut:
                self.cut_ns += ns
            comms.setdefault(pid, row.comm)
            self.comm[tid] = row.comm
            r = per_thread.setdefault(tid, {})
            r[why] = r.get(why, 0) + ns
            if c.first:
                e = entry.setdefault(tid, {})
                e[c.first] = e.get(c.first, 0) + ns
            stacks[(pid, c.key)] = stacks.get((pid, c.key), 0) + ns
            if why == PREEMPTED:
                if py:
                    pre_self[py[-1]] = pre_self.get(py[-1], 0) + ns
                continue
            inner = py[-1] if py else "(no Python frame)"
            k2 = (inner, why)
            self_[k2] = self_.get(k2, 0) + ns
            for name in set(py) or (inner,):
                d = total.setdefault(name, {})
                d[why] = d.get(why, 0) + ns
        # Named once summed: a named tuple costs more to make than a
        # tuple, and this loop runs once a sample.
        self.self_ = {Blocked(*k): ns for k, ns in self_.items()}
        self.total, self.pre_self = total, pre_self
        self.per_thread, self.entry = per_thread, entry
        return stacks, comms

    def _program(self, top_pid, comms, procs):
        """The program's threads: those of its processes, jitring's own
        left out; their lives are the shares' whole."""
        th = self.threads
        self.tids = [tid for tid, pid in th.pid.items()
                     if (top_pid is None or pid == top_pid) and
                     th.name(tid) not in OWN_THREADS and
                     (tid in self.per_thread or
                      pid in comms or pid in procs)]
        self.thread_ns = sum(th.life(t).end - th.life(t).start
                             for t in self.tids)
        # Every context switch of the program's threads, by the records.
        self.switches = sum(len(th.outs.get(t, ())) for t in self.tids)

    def _unsampled(self, covered):
        """Time off CPU of a kind of which a thread has no sample at all
        (no stack to give it), beyond what its samples weigh (@covered):
        UNSAMPLED."""
        self.unsampled_ns = 0
        for t in self.tids:
            for kind, ns in self.threads.off_cpu(t).items():
                ns -= covered.get((t, kind), 0)
                if ns > 0:
                    self.unsampled_ns += ns
                    r = self.per_thread.setdefault(t, {})
                    r[UNSAMPLED] = r.get(UNSAMPLED, 0) + ns

    def _fold(self, stacks, comms, procs):
        """The folded wait stacks: {(process, frames...): microseconds}
        of @stacks' {(pid, flame stack): ns}."""
        names = {pid: "%s [%d]" % (command_of(pid, comms[pid],
                                                      procs), pid)
                 for pid in comms}
        folded = {}
        for (pid, key), ns in stacks.items():
            us = (ns + 500) // 1000
            if us <= 0:
                continue
            k = (names[pid],) + key
            folded[k] = folded.get(k, 0) + us
        return folded

    def _classify(self, comm, frames, preempt, outer=None):
        """The Stack of a switch sample, or False for jitring's own work.
        @outer: the frames the thread ran throughout the window (record
        --pid), as the CPU samples have them."""
        if own_work(comm, frames):
            return False
        if outer:
            st, cut = with_running(frames, outer)
        else:
            st = program_stack(frames)
            cut = is_cut(frames)
            if cut:
                st.insert(0, CUT)
        why = reason(frames, preempt)
        py = [s for s in st if s.startswith("py::")]
        at = max((i for i, s in enumerate(st) if s.startswith("py::")),
                 default=-1)
        st.insert(at + 1, WAIT_FRAME % why)
        first = next((s for s in py if not s.endswith("/threading.py")),
                     None)
        return Stack(tuple(st), why, py, first, cut)

    def stacks(self):
        """The folded wait stacks as jitring.output.flame writes them:
        [([frame, ...], microseconds)], in the stacks' order."""
        return sorted(((list(k), n) for k, n in self.folded.items()),
                      key=lambda r: r[0])

    def share(self, ns):
        return 100.0 * ns / self.thread_ns if self.thread_ns else 0.0

    def cell(self, ns):
        return "%7.3fs %5.1f%%" % (ns / 1e9, self.share(ns))

    def shown(self, ns):
        """Whether a row is worth a line: 0.05% of thread time or more
        (the rest print as 0.0%)."""
        return ns * 2000 >= self.thread_ns
