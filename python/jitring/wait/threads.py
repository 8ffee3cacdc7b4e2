# SPDX-License-Identifier: MIT
"""The context switches of a --wait recording, read from perf.data:
per thread, each interval off CPU with its kind (blocked or preempted)
and the switch samples that name it."""

import bisect
import struct
from typing import NamedTuple

from jitring.common.text import escape
from jitring.perf import data as perfdata
from jitring.perf.data import (PERF_RECORD_COMM, PERF_RECORD_COMPRESSED,
                               PERF_RECORD_EXIT, PERF_RECORD_FORK,
                               PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES,
                               PERF_RECORD_SAMPLE, PERF_RECORD_SWITCH,
                               PerfData, PerfDataError, S_TID, S_TIME)
from jitring.perf.jitsyms import no_gc
from jitring.wait.setup import (EVENT, NAME, PERF_COUNT_SW_CONTEXT_SWITCHES,
                                PERF_TYPE_SOFTWARE)


MISC_SWITCH_OUT = 1 << 13


MISC_SWITCH_OUT_PREEMPT = 1 << 14


# An OUT record follows its switch sample within microseconds (both come
# from the same call of the scheduler); one further away is another
# switch's (this one's was lost).
PAIR_NS = 1000000


# ---- the recording -----------------------------------------------------
def split(samples):
    """(the CPU samples, the switch samples) of script()'s."""
    cpu, waits = [], []
    for s in samples:
        (waits if s.event.startswith((NAME, EVENT)) else cpu).append(s)
    return cpu, waits


class Life(NamedTuple):
    """A thread's life in the recording (Threads.life()), in ns."""
    start: int
    end: int


class Threads:
    """Each thread's switches, life and name, read from perf.data (or
    perf.jit.data: perf inject keeps the records)."""

    def __init__(self, since=0):
        """No switch yet: read() fills them from perf.data, a test from
        its own lists (then sort())."""
        self.since = since  # records before it left out (record --pid)
        self.outs = {}      # tid -> [(time, preempt)], sorted
        self.ins = {}       # tid -> [time], sorted
        self.first = {}     # tid -> time of its first record
        self.last = {}
        self.start = {}     # tid -> time of its FORK
        self.end = {}       # tid -> time of its EXIT
        self.pid = {}       # tid -> pid
        self.comm = {}      # tid -> (time, comm): its latest name
        # (tid, time) -> the switches a switch sample stands for, where
        # more than one (sampled at a frequency: --wait-freq)
        self.period = {}
        self._off = {}      # tid -> _sums()
        self._end = None    # the last record's time
        # What perf lost (its buffers were full), by the event it was
        # of: "switch" (switch samples), "cpu" (the CPU event's samples),
        # "records" (the tracking event's: the switch, fork, exit and
        # map records), from its LOST_SAMPLES records; "any": all the
        # events', from its LOST records.
        self.lost = {}

    @classmethod
    def read(cls, path, since=0):
        """The threads of perf.data at @path."""
        self = cls(since)
        # Two lists' items a switch: no collection while they are made
        # (each walks the whole heap: 7.1 s for 1.4 million records with
        # it, 1.3 s without).
        with PerfData(path) as pd, no_gc():
            self._read(pd)
        self.sort()
        return self

    def sort(self):
        """Each thread's switches in time order, and its first and last
        record counting them."""
        first, last = self.first, self.last
        for d in (self.outs, self.ins):
            for tid, v in d.items():
                v.sort()
                a = v[0][0] if d is self.outs else v[0]
                b = v[-1][0] if d is self.outs else v[-1]
                if a < first.get(tid, a + 1):
                    first[tid] = a
                if b > last.get(tid, -1):
                    last[tid] = b

    def _read(self, pd):
        st = pd.attr.sample_type
        if len({a.sample_type for a in pd.attrs}) != 1 or \
                not st & S_TID or not st & S_TIME:
            raise PerfDataError(
                "%s: the events' layouts differ, or have no tid or time"
                % pd.path)
        S = perfdata
        # The sample_id trailer of other records: tid, time, id,
        # stream_id, cpu, identifier, as sample_type has them.
        tail = 8 * bin(st & (S.S_TID | S.S_TIME | S.S_ID | S.S_STREAM_ID |
                             S.S_CPU | S.S_IDENTIFIER)).count("1")
        # A sample's tid and time: after its identifier and ip; its
        # period after those, addr, id, stream_id and cpu.
        s_tid = 8 + 8 * bool(st & S.S_IDENTIFIER) + 8 * bool(st & S.S_IP)
        s_period = 8 + 8 * bin(st & (S.S_IDENTIFIER | S.S_IP | S.S_TID |
                                     S.S_TIME | S.S_ADDR | S.S_ID |
                                     S.S_STREAM_ID | S.S_CPU)).count("1")
        # The switch event's samples, by their id (the identifier first in
        # a sample, or the id after its addr).
        s_id = 8 if st & S.S_IDENTIFIER else \
            8 + 8 * bin(st & (S.S_IP | S.S_TID | S.S_TIME |
                              S.S_ADDR)).count("1")
        switch_ids = set()
        if st & (S.S_IDENTIFIER | S.S_ID) and st & S.S_PERIOD:
            for a in pd.attrs:
                if (a.type, a.config) == (PERF_TYPE_SOFTWARE,
                                          PERF_COUNT_SW_CONTEXT_SWITCHES):
                    switch_ids.update(a.ids)
        kind = {i: "cpu" for i in pd.attrs[0].ids or ()}
        kind.update((i, "records") for a in pd.attrs[1:]
                    for i in a.ids or () if i not in switch_ids)
        kind.update((i, "switch") for i in switch_ids)
        # An id in a record's sample_id trailer: the last word
        # (identifier), or after its tid and time.
        t_id = -8 if st & S.S_IDENTIFIER else \
            -tail + 8 * bin(st & (S.S_TID | S.S_TIME)).count("1") \
            if st & S.S_ID else None
        m = pd.m
        since = self.since
        outs, ins, seen = self.outs, self.ins, self.pid
        sw_out, sw_pre = MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT
        hdr = struct.Struct("<IHH").unpack_from
        # A switch record's trailer starts with its pid, tid and time
        # (sample_type has both, checked above).
        pidtidt = struct.Struct("<IIQ").unpack_from
        other = self._other(m, tail, kind, t_id, switch_ids, s_tid, s_id,
                            s_period)
        # The walk of jitring.perf.data.PerfData.records(), inline: the
        # switch records are most of a --wait recording (two a switch),
        # and each costs here what the generator alone would.
        off, stop = pd.data
        while off + 8 <= stop:
            typ, misc, size = hdr(m, off)
            if size < 8 or off + size > stop:
                raise PerfDataError(
                    "%s: a record of size %d at %#x" % (pd.path, size, off))
            if typ == PERF_RECORD_SWITCH:
                if size >= 8 + tail:
                    pid, tid, t = pidtidt(m, off + size - tail)
                    if t >= since and t and tid:
                        d = outs if misc & sw_out else ins
                        lst = d.get(tid)
                        if lst is None:
                            lst = d[tid] = []
                            seen.setdefault(tid, pid)
                        lst.append((t, (misc & sw_pre) != 0)
                                   if d is outs else t)
            elif typ == PERF_RECORD_COMPRESSED:
                raise PerfDataError(
                    "%s holds compressed records (-z)" % pd.path)
            else:
                other(typ, misc, off, size)
            off += size

    def _other(self, m, tail, kind, t_id, switch_ids, s_tid, s_id,
               s_period):
        """_read()'s reader of the records other than switches: samples
        (their periods), names, forks and exits (the threads' lives), and
        what perf lost."""
        pidtid = struct.Struct("<II")
        u64 = struct.Struct("<Q")
        first, last = self.first, self.last
        period, lost = self.period, self.lost

        def one(typ, misc, off, size):
            if typ in (PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES):
                # LOST: id, lost; LOST_SAMPLES: lost, then the trailer.
                if size < 24 or typ == PERF_RECORD_LOST_SAMPLES and (
                        t_id is None or size < 16 + tail):
                    return
                # A LOST record's id is of the event that wrote it, not
                # of those lost: only LOST_SAMPLES (perf record's, from
                # each event's count) say whose.
                if typ == PERF_RECORD_LOST:
                    k = "any"
                    n, = u64.unpack_from(m, off + 16)
                else:
                    n, = u64.unpack_from(m, off + 8)
                    i, = u64.unpack_from(m, off + size + t_id)
                    k = kind.get(i, "records")
                lost[k] = lost.get(k, 0) + n
                return
            if typ == PERF_RECORD_SAMPLE:
                if size < max(s_tid + 16, s_period + 8):
                    return
                pid, tid = pidtid.unpack_from(m, off + s_tid)
                t, = u64.unpack_from(m, off + s_tid + 8)
                if switch_ids and u64.unpack_from(m, off + s_id)[0] in \
                        switch_ids:
                    n, = u64.unpack_from(m, off + s_period)
                    if n > 1:
                        period[(tid, t)] = n
            elif typ == PERF_RECORD_COMM:
                if size < 8 + tail:
                    return
                p = off + size - tail
                pid, tid = pidtid.unpack_from(m, p)
                t, = u64.unpack_from(m, p + 8)
                end = m.find(b"\0", off + 16, p)
                name = m[off + 16:end if end >= 0 else p].decode(
                    errors="replace")
                if t >= self.comm.get(tid, (-1,))[0]:
                    self.comm[tid] = (t, name)
            elif typ in (PERF_RECORD_FORK, PERF_RECORD_EXIT):
                if size < 32:
                    return
                pid, _, tid, _ = struct.unpack_from("<IIII", m, off + 8)
                t, = u64.unpack_from(m, off + 24)
                if t >= self.since:
                    (self.start if typ == PERF_RECORD_FORK else
                     self.end)[tid] = t
            else:
                return
            if t == 0 or tid == 0:
                return
            self.pid.setdefault(tid, pid)
            if t < self.since:
                return
            if t < first.get(tid, t + 1):
                first[tid] = t
            if t > last.get(tid, -1):
                last[tid] = t
        return one

    def life(self, tid):
        """The Life of the thread in the recording: a thread with no EXIT
        (alive when perf stopped) lives to the recording's last record."""
        a = self.start.get(tid, self.first.get(tid, 0))
        if self._end is None:
            self._end = max(self.last.values(), default=0)
        b = self.end.get(tid, self._end if tid in self.last else a)
        return Life(a, max(a, b))

    def name(self, tid):
        """The thread's latest name; a thread that never set one has its
        process's."""
        c = self.comm.get(tid) or self.comm.get(self.pid.get(tid))
        return escape(c[1] if c else "?")

    def out_index(self, tid, t):
        """The index in self.outs[@tid] of the switch a switch sample at
        @t was taken at (its OUT record follows within PAIR_NS), or None
        where that record is missing."""
        outs = self.outs.get(tid)
        if not outs:
            return None
        i = bisect.bisect_left(outs, (t, False))
        if i == len(outs) or outs[i][0] - t > PAIR_NS:
            return None
        return i

    def span(self, tid, j, i):
        """{preempted: ns} off CPU of the thread's switches j+1 to i (its
        OUTs, by index)."""
        sums = self._sums(tid)
        return {k: v[i + 1] - v[j + 1] for k, v in sums.items()
                if v[i + 1] > v[j + 1]}

    def _sums(self, tid):
        """{preempted: prefix sums}: item k of a list is the time off CPU
        of the thread's first k switches of that kind, from each OUT to
        the IN after it (or the thread's end)."""
        got = self._off.get(tid)
        if got is None:
            b = self.life(tid).end
            ins = self.ins.get(tid, [])
            n = len(ins)
            sums = {False: [0], True: [0]}
            f, p = sums[False], sums[True]
            a = c = j = 0
            # Both lists sorted: the first IN after each OUT only moves
            # forward.
            for t, pre in self.outs.get(tid, []):
                while j < n and ins[j] <= t:
                    j += 1
                d = (ins[j] if j < n and ins[j] < b else b) - t
                if d > 0:
                    if pre:
                        c += d
                    else:
                        a += d
                f.append(a)
                p.append(c)
            got = self._off[tid] = sums
        return got

    def off_cpu(self, tid):
        """{preempted: ns} the thread was off its CPU, by the OUT
        records' preemption flag."""
        return {k: v[-1] for k, v in self._sums(tid).items() if v[-1]}

    def on_cpu(self, tid):
        """ns the thread ran: its lifetime less its time off CPU."""
        a, b = self.life(tid)
        return max(0, b - a - sum(self.off_cpu(tid).values()))
