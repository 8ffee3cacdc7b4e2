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
are left out as its CPU samples are (jitring._report.own_work()).

The folder gets stacks-wait.folded and flame-wait.html (counts in
microseconds of waiting; a frame "[wait: REASON]" under the innermost
Python frame), drawn by the same page as flame.html (jitring._flame).
"""

import bisect
import json
import os
import re
import select
import struct
import sys
import threading
import time
from typing import NamedTuple

from jitring import _flame, _perfdata, _report
from jitring._perfdata import (PERF_RECORD_COMM, PERF_RECORD_EXIT,
                               PERF_RECORD_FORK, PERF_RECORD_LOST,
                               PERF_RECORD_LOST_SAMPLES, PERF_RECORD_SAMPLE,
                               PERF_RECORD_SWITCH)
from jitring._jitsyms import no_gc

# The event perf samples as a thread leaves its CPU, and the name perf
# gives it (perf script's event column; perf's control descriptor
# disables it by this name: Budget).
EVENT = "context-switches"
NAME = "jitring-wait"
FREQ_NAME = "jitring-wait-freq"
# --wait-freq: where the program switches faster than RATE a second,
# Budget trades the switch event taken at every switch (NAME) for one in
# perf's frequency mode (FREQ_NAME): at most about HZ switch samples
# (each with its stack) a second a thread, the kernel setting each
# thread's period from its rate as it runs, each sample carrying its
# period.  The cost then follows the threads' running time, not their
# switches (and the kernel gives fewer samples than HZ to a thread that
# switches in bursts: a thread yielding 7,000 times a second got about
# 10 a second at 250).  Every switch still has its records
# (--switch-events), so each thread's time blocked and preempted stays
# exact; only its split by stack is sampled: a sample stands for the
# switches of its thread and kind since its previous one and weighs
# their time.  A rare long wait in a busy thread may have no sample of
# its own, and a thread's switches after its last sample have none:
# their time is "no sampled stack", in the header line, the --wall lines
# and a note.  0: every switch's stack however fast the program switches
# (bounded by --wait-budget alone).  Only one of the two is on at a
# time: with two sampling context-switches events on a task, perf 6.1
# here wrote a sample of every switch for each, with a period of 1.
FREQ = 250
# Where the program's threads switch more than RATE times a second,
# their switches' stacks are sampled (FREQ_NAME) rather than all taken
# (at 8 KiB a stack, 5,000 a second is 40 MB a second for perf to write
# and for perf script to unwind after); below RATE_LOW, all taken again.
RATE = 5000
RATE_LOW = 2500


# dwarf mode's stack copy per switch sample (--wait-stack-size): perf
# writes each sample's whole copy, and at 20,000 switches a second 32 KiB
# copies (660 MB/s) lost 41-69% of the samples here, 8 KiB none or a
# few.  The innermost frames (the reason, the self table) are always in
# the copy; a stack it cuts loses its outer frames.
STACK_SIZE = 8192
# --wait-budget: the most bytes perf.data may take.  perf itself stops
# the session at the cap (--max-size); record's watch (Budget) stops the
# switches' stacks at half of it, so that the switch records (two of 32
# bytes a switch: 19 MB a second at 300,000 switches) and the CPU samples
# go on in the other half.
BUDGET = 1 << 30
# perf's ring buffer for --wait (a CPU's; root only: another user's limit
# is perf_event_mlock_kb, 516 KiB by default, and perf would refuse): a
# program switching 300,000 times a second writes 19 MB a second of
# switch records, which overrun perf's default (512 KiB) at once.  perf
# checks its cap after each ring's write, so a ring is at most a
# sixteenth of the budget over the CPUs: the cap less one ring a CPU is
# never passed.
MMAP_MAX = 32 << 20
MMAP_MIN = 1 << 20


def ring(budget, cpus=None):
    """perf's ring buffer a CPU for @budget, in bytes: a power of two."""
    n = budget // (16 * (cpus or os.cpu_count() or 1))
    r = MMAP_MIN
    while r * 2 <= min(n, MMAP_MAX):
        r *= 2
    return r


def data_cap(budget, cpus=None):
    """perf record's --max-size for @budget: what perf may write before it
    stops (it checks after each ring's write, so one ring a CPU is kept
    back; and 1/16 for the folder's other files: dumps, pages)."""
    cpus = cpus or os.cpu_count() or 1
    r = ring(budget, cpus) if os.geteuid() == 0 else 520 << 10
    return max(budget - budget // 16 - r * cpus, budget // 4)


PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
MISC_SWITCH_OUT = 1 << 13
MISC_SWITCH_OUT_PREEMPT = 1 << 14

# An OUT record follows its switch sample within microseconds (both come
# from the same call of the scheduler); one further away is another
# switch's (this one's was lost).
PAIR_NS = 1000000

PREEMPTED = "preempted"
# A thread's time off CPU of a kind (blocked, preempted) none of whose
# switches has a sample.
UNSAMPLED = "no sampled stack"


def perf_args(call_graph, stack_size=STACK_SIZE, freq=FREQ, budget=BUDGET):
    """What perf record is given besides its CPU event: -F stays that
    event's; the switch event twice, each with its own stack copy in
    dwarf mode: NAME at every switch (a period of 1), FREQ_NAME at about
    @freq a second a thread (perf's frequency mode; none at @freq 0),
    Budget enabling one at a time; -P records the period in every sample,
    so that the events' samples have one layout (jitring._perfdata reads
    one) and each switch sample says how many switches it stands for;
    --max-size keeps perf.data inside @budget."""
    stack = ",call-graph=dwarf,stack-size=%d" % stack_size \
        if call_graph == "dwarf" else ""
    args = ["-e", "%s/period=1,name=%s%s/" % (EVENT, NAME, stack)]
    if freq:
        args += ["-e", "%s/freq=%d,name=%s%s/" % (EVENT, freq, FREQ_NAME,
                                                 stack)]
    args += ["--switch-events", "-P",
             "--max-size", "%dK" % (data_cap(budget) >> 10)]
    if os.geteuid() == 0:
        args += ["-m", "%dK" % (ring(budget) >> 10)]
    return args


class Seen(NamedTuple):
    """The program's switches as Budget last read them."""
    time: float         # time.monotonic() of the reading
    switches: dict      # tid -> its context switches so far (switches())


# What Budget leaves for the finishing: when the stacks stopped, when perf
# stopped at its cap.
BUDGET_FILE = "wait-budget.json"
LIMIT_LINE = "perf size limit reached"


class Budget:
    """record's watch over the recording while the program runs.

    Stacks: perf starts with both switch events on; at once the watch
    disables FREQ_NAME, so that the program starts with every switch's
    stack (NAME).  Every RATE_EVERY it reads the program's switches from
    /proc: above RATE a second it samples their stacks (FREQ_NAME on,
    NAME off: about --wait-freq a second a thread), and after CALM such
    windows below RATE_LOW it takes every switch's again.  A program that
    switches fast from its start floods perf's buffers for one window
    (some samples and records lost, counted in the tables).  Size: at
    half the cap, it disables both (no more stacks; the switch records,
    the CPU samples and perf's other records go on); at the cap perf
    stops the session itself (--max-size) and the program runs on
    unrecorded.  Each says so on stderr as it happens (the first time
    the program switches faster than RATE), and in BUDGET_FILE for the
    tables."""

    POLL = 0.02
    RATE_EVERY = 0.05
    CALM = 10

    ACK_WAIT = 1.0

    def __init__(self, out, budget, ctl, ack, proc, pid, freq):
        self.out, self.budget, self.ctl, self.proc = out, budget, ctl, proc
        self.ack = ack
        self.pid, self.freq = pid, freq
        self.cap = data_cap(budget)
        self.path = os.path.join(out, "perf.data")
        self.t0 = time.monotonic()
        # What the tables say: the budget; the seconds of the program
        # its stacks were sampled, and its switches in them.
        self.got = {"budget": budget, "cap": self.cap, "freq": freq,
                    "sampled_s": 0.0, "sampled_n": 0}
        self.done = threading.Event()
        _report.claim(out, [BUDGET_FILE])
        self.sampling = False
        self.calm = 0
        if freq:
            self.command("disable", FREQ_NAME)
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name="jitring-wait-budget")
        self.thread.start()

    def command(self, verb, name):
        """Send perf one command and wait for its ack: perf reads its
        control descriptor a read at a time and acts on the first
        command of a read only."""
        try:
            os.write(self.ctl, ("%s %s\n" % (verb, name)).encode())
            end = time.monotonic() + self.ACK_WAIT
            got = b""
            while b"ack" not in got:
                left = end - time.monotonic()
                if left <= 0 or not select.select([self.ack], [], [],
                                                  left)[0]:
                    return False
                chunk = os.read(self.ack, 64)
                if not chunk:
                    return False
                got += chunk
            return True
        except OSError:
            return False

    def adapt(self, last):
        """Sample the stacks or take them all, by the rate of switches
        since @last (a Seen); returns the new last."""
        now, seen = time.monotonic(), switches(self.pid)
        # Each thread's switches since it was last read (a new one's
        # since it started); one /proc could not read this time keeps
        # its count for the next.
        before = last.switches
        k = sum(n - before.get(tid, 0) for tid, n in seen.items())
        before.update(seen)
        rate = max(0, k) / (now - last.time)
        got = self.got
        if self.sampling:
            got["sampled_s"] += now - last.time
            got["sampled_n"] += max(0, k)
        if rate > RATE and "fast" not in got:
            got["fast_rate"] = rate     # (note() keeps the time in "fast")
            self.note("fast", "the program switches %d times a second, "
                      "more than %d: the stacks of its switches are "
                      "sampled while it does, about %d a second a thread "
                      "at most (every switch is still timed)"
                      % (rate, RATE, self.freq))
        # Back to every stack only after CALM windows below RATE_LOW: a
        # window at every switch of a fast program floods perf's buffers
        # (its samples and records lost).
        self.calm = self.calm + 1 if rate < RATE_LOW else 0
        if self.sampling and self.calm >= self.CALM:
            self.sampling = not (self.command("enable", NAME) and
                                 self.command("disable", FREQ_NAME))
        elif not self.sampling and rate > RATE:
            self.sampling = self.command("disable", NAME) and \
                self.command("enable", FREQ_NAME)
        return Seen(now, before)

    def run(self):
        last = Seen(self.t0, switches(self.pid))
        while not self.done.wait(self.POLL):
            try:
                size = os.stat(self.path).st_size
            except OSError:
                size = 0
            # The size first: a flood fills perf.data in a few polls.
            if "stacks_off" not in self.got and size * 2 >= self.cap:
                self.note("stacks_off",
                          "perf.data at %d MB, half its %d MB cap "
                          "(--wait-budget %d MB): no more stacks of "
                          "context switches from here (every switch is "
                          "still timed)" % (size >> 20, self.cap >> 20,
                                            self.budget >> 20))
                self.command("disable", NAME)
                if self.freq:
                    self.command("disable", FREQ_NAME)
            if self.proc.poll() is not None:
                # perf ends with the program too: only its own line says
                # it stopped at the cap.
                if self.hit():
                    self.stopped(size)
                return
            if self.freq and "stacks_off" not in self.got and \
                    time.monotonic() - last.time >= self.RATE_EVERY:
                last = self.adapt(last)

    def stopped(self, size):
        self.note("perf_off", "perf.data at its %d MB cap "
                  "(--wait-budget %d MB): perf stopped recording; the "
                  "program runs on unrecorded"
                  % (self.cap >> 20, self.budget >> 20))

    def hit(self):
        try:
            with open(os.path.join(self.out, "perf-record.log"),
                      errors="replace") as f:
                return LIMIT_LINE in f.read()
        except OSError:
            return False

    def note(self, key, what):
        t = time.monotonic() - self.t0
        self.got[key] = t
        sys.stderr.write("jitring record: --wait, %.1f s in: %s\n"
                         % (t, what))
        self.save()

    def save(self):
        try:
            with open(os.path.join(self.out, BUDGET_FILE), "w") as f:
                json.dump(self.got, f)
        except OSError:
            pass

    def stop(self):
        """Stop watching (the program ended, or perf did)."""
        self.done.set()
        self.thread.join()
        # perf writes its line as it stops at the cap, before it exits.
        if "perf_off" not in self.got and self.hit():
            self.stopped(self.cap)
        self.save()


def switches(pid):
    """{tid: its context switches so far} of the threads of process @pid
    ({} where /proc cannot say)."""
    got = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return got
    for tid in tids:
        n = 0
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid), "rb") as f:
                for line in f:
                    if line.startswith((b"voluntary_ctxt",
                                        b"nonvoluntary_ctxt")):
                        n += int(line.split()[1])
        except (OSError, ValueError):
            continue        # ended meanwhile
        got[tid] = n
    return got


def budget_of(out):
    """What Budget noted in @out ({} where it noted nothing)."""
    try:
        with open(os.path.join(out, BUDGET_FILE)) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


# ---- can perf give them here -------------------------------------------

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
PARANOID = "/proc/sys/kernel/perf_event_paranoid"


def refusal(paranoid, privileged):
    """Why --wait cannot work (one line with the fix), or None: a switch
    sample is taken in the kernel, and perf_event_paranoid above 1 keeps
    an unprivileged user's events to user mode (the kernel then never
    takes one)."""
    if paranoid <= 1 or privileged:
        return None
    return ("--wait needs perf's context-switch samples, which the kernel "
            "takes in kernel mode and kernel.perf_event_paranoid=%d "
            "withholds from this user: run record as root, or first: sudo "
            "sysctl kernel.perf_event_paranoid=1" % paranoid)


def privileged():
    """Whether this process may profile the kernel whatever the paranoid
    level: root or CAP_PERFMON/CAP_SYS_ADMIN, in the first user namespace
    (capabilities in another one do not count for perf)."""
    try:
        with open("/proc/self/uid_map") as f:
            init = f.read().split() == ["0", "0", "4294967295"]
        with open("/proc/self/status") as f:
            caps = next((int(l.split()[1], 16) for l in f
                         if l.startswith("CapEff:")), 0)
    except (OSError, ValueError):
        return os.geteuid() == 0
    if not init:
        return False
    return os.geteuid() == 0 or \
        bool(caps & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN))


def check():
    """record's check before the program runs: None, or the reason."""
    try:
        with open(PARANOID) as f:
            paranoid = int(f.read())
    except (OSError, ValueError):
        return None         # perf will say
    return refusal(paranoid, privileged())


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
        with _perfdata.PerfData(path) as pd, no_gc():
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
                not st & _perfdata.S_TID or not st & _perfdata.S_TIME:
            raise _perfdata.PerfDataError(
                "%s: the events' layouts differ, or have no tid or time"
                % pd.path)
        S = _perfdata
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
        # The walk of jitring._perfdata.PerfData.records(), inline: the
        # switch records are most of a --wait recording (two a switch),
        # and each costs here what the generator alone would.
        off, stop = pd.data
        while off + 8 <= stop:
            typ, misc, size = hdr(m, off)
            if size < 8 or off + size > stop:
                raise _perfdata.PerfDataError(
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
            elif typ == _perfdata.PERF_RECORD_COMPRESSED:
                raise _perfdata.PerfDataError(
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
        return _flame.escape(c[1] if c else "?")

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


# ---- why a thread waits ------------------------------------------------

_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv)\.?\d*)+$|"
                     r"@.*$")
_SYSCALL = re.compile(r"^(?:__x64_sys_|__ia32_sys_|__se_sys_|__do_sys_|"
                      r"__arm64_sys_|ksys_)(\w+)$")

# I/O syscalls, as the reason names them.
IO = {"read": "read", "pread64": "read", "readv": "read",
      "preadv": "read", "preadv2": "read", "write": "write",
      "pwrite64": "write", "writev": "write", "pwritev": "write",
      "pwritev2": "write", "recvfrom": "recv", "recvmsg": "recv",
      "recvmmsg": "recv", "recv": "recv", "sendto": "send",
      "sendmsg": "send", "sendmmsg": "send", "send": "send",
      "accept": "accept", "accept4": "accept", "connect": "connect",
      "poll": "poll", "ppoll": "poll", "select": "select",
      "pselect6": "select", "epoll_wait": "epoll",
      "epoll_pwait": "epoll", "epoll_pwait2": "epoll",
      "sendfile64": "sendfile", "splice": "splice",
      "io_uring_enter": "io_uring", "fsync": "fsync",
      "fdatasync": "fsync", "openat": "open", "open": "open"}
SLEEP_SYSCALLS = ("nanosleep", "clock_nanosleep")
CHILD_SYSCALLS = ("wait4", "waitid")
YIELD = ("sched_yield",)
# The generic machinery of a wait: named only through its caller.
FUTEX_SYSCALLS = ("futex", "futex_waitv")
# Kernel functions that tell the syscall where its entry point is not a
# frame of its own (inlined into do_syscall_64: kernel_wait4, ...).
KERNEL_CALLS = {
    "kernel_wait4": "wait4", "do_wait": "wait4", "kernel_waitid": "waitid",
    "do_nanosleep": "nanosleep", "hrtimer_nanosleep": "nanosleep",
    "common_nsleep": "clock_nanosleep", "do_futex": "futex",
    "futex_wait": "futex", "__futex_wait": "futex",
    "futex_wait_queue": "futex", "futex_do_wait": "futex",
    "do_sys_poll": "poll", "do_select": "select",
    "core_sys_select": "select", "ep_poll": "epoll_wait",
    "do_epoll_wait": "epoll_wait", "ksys_read": "read",
    "vfs_read": "read", "pipe_read": "read", "ksys_write": "write",
    "vfs_write": "write", "pipe_write": "write",
    "__sys_recvfrom": "recvfrom", "__sys_recvmsg": "recvmsg",
    "sock_recvmsg": "recvmsg", "__sys_sendto": "sendto",
    "__sys_sendmsg": "sendmsg", "sock_sendmsg": "sendmsg",
    "__sys_accept4": "accept", "do_accept": "accept",
    "__sys_connect": "connect", "do_sched_yield": "sched_yield",
}

# User-space frames that name a reason by themselves (names with the
# compiler's suffixes taken off).
SPECIFIC = {
    "take_gil": "GIL", "drop_gil": "GIL", "_PyEval_AcquireLock": "GIL",
    "_PyCriticalSection_BeginSlow": "per-object lock",
    "_PyCriticalSection2_BeginSlow": "per-object lock",
    "_PyCriticalSection_Resume": "per-object lock",
    "_PyEval_StopTheWorld": "stop-the-world",
    "_PyEval_StopTheWorldAll": "stop-the-world",
    "stop_the_world": "stop-the-world",
    "tstate_wait_attach": "stop-the-world",
    # Free-threaded: a thread waits in its attach only while a
    # stop-the-world holds it suspended (tstate_wait_attach() inlined
    # there in 3.13t); with a GIL, take_gil (nearer the leaf) names it.
    "_PyThreadState_Attach": "stop-the-world",
    "lock_PyThread_acquire_lock": "threading.Lock",
    "_thread_lock_acquire_impl": "threading.Lock",
    "lock_acquire_parse_args": "threading.Lock",
    "rlock_acquire": "threading.RLock",
    "_thread_RLock_acquire_impl": "threading.RLock",
    "ThreadHandle_join": "Thread.join",
    "_PyThread_JoinThread": "Thread.join",
    "PyThread_join_thread": "Thread.join",
    "_PyEvent_WaitTimed": "Thread.join",
    "PyEvent_WaitTimed": "Thread.join",
    "pysleep": "sleep", "time_sleep": "sleep",
    "os_waitpid_impl": "child wait", "os_wait_impl": "child wait",
    "os_waitid_impl": "child wait", "os_wait4_impl": "child wait",
    "waitpid": "child wait", "wait4": "child wait",
    "clock_nanosleep": "sleep", "nanosleep": "sleep",
    "usleep": "sleep",
}
# libc's entry points for I/O (names with glibc's prefixes taken off).
IO_USER = dict(IO, epoll_wait="epoll", sock_recv="recv",
               sock_recv_into="recv", sock_recvfrom="recv",
               sock_send="send", sock_sendall="send", sock_accept="accept",
               sock_connect="connect", _Py_read="read", _Py_write="write",
               os_read_impl="read", os_write_impl="write",
               select_select_impl="select", select_poll_poll_impl="poll",
               select_epoll_poll_impl="epoll")
# The machinery: (level, name) where level orders what the reason names
# (a PyMutex over a semaphore over a futex).
GENERIC = {
    "_PyMutex_LockTimed": 3, "_PyMutex_LockSlow": 3, "PyMutex_Lock": 3,
    "_PyParkingLot_Park": 3, "_PyRecursiveMutex_Lock": 3,
    "_PyRecursiveMutex_LockTimed": 3, "_PyOnceFlag_CallOnceSlow": 3,
    "PyEvent_Wait": 3,
    "_PySemaphore_Wait": 2, "_PySemaphore_PlatformWait": 2,
    "PyThread_acquire_lock_timed": 2, "PyThread_acquire_lock": 2,
    "PyCOND_WAIT": 1, "PyCOND_TIMEDWAIT": 1,
    "pthread_cond_wait": 1, "pthread_cond_timedwait": 1,
    "pthread_cond_clockwait": 1, "__pthread_cond_wait_common": 1,
    "pthread_mutex_lock": 1, "__pthread_mutex_lock_full": 1,
    "pthread_mutex_cond_lock": 1, "__pthread_mutex_cond_lock": 1,
    "__pthread_mutex_lock": 1, "___pthread_mutex_lock": 1,
    "lll_lock_wait": 1, "__lll_lock_wait": 1,
    "__futex_abstimed_wait_common": 1, "__futex_abstimed_wait_common64": 1,
    "futex_wait": 1, "do_futex_wait": 1, "__new_sem_wait_slow64": 1,
    "sem_wait": 1, "sem_timedwait": 1, "sem_clockwait": 1, "syscall": 1,
    "sched_yield": 1,
}
GENERIC_NAME = {3: "PyMutex", 2: "_PySemaphore_Wait", 1: "futex"}
GC = re.compile(r"^(gc_collect|_PyGC_Collect|gc_collect_main|"
                r"_Py_RunGC|gc_collect_internal|PyGC_Collect)")
PAGE_FAULT = ("asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault",
              "handle_mm_fault")
# The scheduler's own frames, and the way into the kernel: never the name
# of a reason.
SCHED = re.compile(r"^(__?schedule\w*|schedule\w*|preempt_schedule\w*|"
                   r"io_schedule\w*|do_syscall_64|entry_SYSCALL\w*|"
                   r"irqentry_exit\w*|exit_to_user_mode\w*|asm_sysvec\w*|"
                   r"sysvec_\w+|syscall_exit\w*|\[unknown\])$")
# Python frames of the standard library that refine a lock's reason,
# innermost first.
PY_WAITS = (("threading.py", "Event.wait", "threading.Event"),
            ("threading.py", "Barrier.wait", "threading.Barrier"),
            ("threading.py", "Semaphore.acquire", "threading.Semaphore"),
            ("threading.py", "Condition.wait", "threading.Condition"),
            ("threading.py", "Thread.join", "Thread.join"),
            ("queue.py", "Queue.get", "queue.Queue.get"),
            ("queue.py", "Queue.put", "queue.Queue.put"),
            ("queue.py", "Queue.join", "queue.Queue.join"))
LOCKS = ("threading.Lock", "threading.RLock", "Thread.join")
# C code whose wait is a Python-level call: its symbol, or (stripped, as
# Debian's _queue.cpython-3XX-*.so) its module's file, whose only wait
# is SimpleQueue.get (put never blocks but on the queue's per-object
# lock, named nearer the leaf).
PY_LEVEL = {"_queue_SimpleQueue_get": "queue.SimpleQueue.get",
            "_queue_SimpleQueue_get_impl": "queue.SimpleQueue.get"}
PY_LEVEL_FILES = (("_queue.", "queue.SimpleQueue.get"),)
# A pool's thread waiting for work: (file, innermost Python function, the
# reason).  concurrent.futures' _worker waits only in its work queue's
# get (asyncio's default executor is a ThreadPoolExecutor too);
# multiprocessing.pool's worker and task handler in their queue's get.
IDLE = (("concurrent/futures/thread.py", "_worker", "executor idle"),
        ("multiprocessing/pool.py", "worker", "pool idle"),
        ("multiprocessing/pool.py", "Pool._handle_tasks", "pool idle"))
INTERNAL = "interpreter (%s)"
# The interpreter's own locks, by the function that takes them (the
# caller of the PyMutex): waits no Python code asked for.
INTERNAL_CALLERS = {
    # Biased reference counting (free-threaded): a thread merging the
    # refcounts other threads queued to it, or queueing one, under its
    # bucket's mutex.
    "_Py_brc_merge_refcounts": "refcount merge",
    "_Py_brc_queue_object": "refcount merge",
    # A new thread waits (PyEvent_Wait) until its starter has its handle.
    "thread_run": "thread start",
    # HEAD_LOCK: the runtime's list of interpreters and threads.
    "new_threadstate": "thread list", "tstate_delete_common": "thread list",
    "_PyThreadState_DeleteCurrent": "thread list",
    "PyThreadState_Clear": "thread list", "zapthreads": "thread list",
    # Memory freed once no thread can read it (QSBR, free-threaded).
    "_PyMem_ProcessDelayed": "delayed free",
    "_PyMem_AbandonDelayed": "delayed free",
    "_Py_qsbr_reserve": "delayed free", "_Py_qsbr_register": "delayed free",
    "_Py_qsbr_unregister": "delayed free",
}
# The type lock: a critical section on the interpreter's types mutex (not
# an object: 3.13t's BEGIN_TYPE_LOCK), by the function that enters it.
TYPE_LOCK = frozenset((
    "_PyType_LookupRef", "PyType_Modified", "type_setattro",
    "type_get_mro", "type_set_bases", "_PyType_GetMRO", "_PyType_GetBases",
    "assign_version_tag", "_super_lookup_descr", "mro_internal",
    "mro_implementation", "type_mro", "type_mro_impl", "_PyType_SetFlags",
    "_PyType_SetFlagsRecursive", "PyType_Watch"))


def _bare(sym):
    """A symbol without the compiler's suffixes, glibc's version or its
    internal prefixes (__GI___libc_read -> read)."""
    s = _SUFFIX.sub("", sym)
    for p in ("__GI___", "__GI_", "__libc_", "__"):
        if s.startswith(p) and len(s) > len(p):
            s = s[len(p):]
            if p == "__GI___" and s.startswith("libc_"):
                s = s[5:]
            break
    return s


def _kernel(dso):
    return dso.startswith("[kernel")


def _unnamed(sym):
    return sym == "[unknown]" or not sym


def reason(frames, preempt):
    """Why a thread left its CPU, from its stack (@frames leaf first, as
    jitring._report.script() gives them): a short name (see the module's
    doc)."""
    inner = next((i for i, (s, d) in enumerate(frames)
                  if s.startswith("py::")), len(frames))
    native = frames[:inner]
    syscall = None
    for s, d in native:
        if _kernel(d):
            m = _SYSCALL.match(s)
            syscall = m.group(1) if m else KERNEL_CALLS.get(s)
            if syscall:
                break
    if preempt and syscall not in YIELD:
        return PREEMPTED
    why = None          # a syscall that names no reason of its own
    generic = 0         # the highest level of the machinery seen
    caller = None       # the first named frame outside it
    for i, (s, d) in enumerate(native):
        if _kernel(d):
            if s in PAGE_FAULT:
                return "page fault"
            m = _SYSCALL.match(s)
            sc = m.group(1) if m else KERNEL_CALLS.get(s)
            if not sc:
                continue
            if sc in SLEEP_SYSCALLS:
                return "sleep"
            if sc in CHILD_SYSCALLS:
                return "child wait"
            if sc in IO:
                return "I/O (%s)" % IO[sc]
            if sc in FUTEX_SYSCALLS or sc in YIELD:
                generic = max(generic, 1)
            elif why is None:
                why = "other (%s syscall)" % sc
            continue
        b = _bare(s)
        n = _SUFFIX.sub("", s)
        r = SPECIFIC.get(n) or SPECIFIC.get(b)
        if r:
            return _specific(r, native, i, frames[inner:])
        io = IO_USER.get(n) or IO_USER.get(b)
        if io:
            return "I/O (%s)" % io
        if GC.match(b):
            return "gc"
        r = _py_level(n, b, d, native[:i], frames[inner:])
        if r:
            return r
        lvl = GENERIC.get(n) or GENERIC.get(b)
        if lvl:
            if lvl > generic:
                generic, caller = lvl, None
            continue
        if generic and caller is None and not _unnamed(s):
            caller = b
    if generic:
        r = _internal(caller) or _refined(frames[inner:])
        if r:
            return r
        if generic == 1 and _gil_condvar(native):
            return "GIL"
        if generic == 1 and why:
            return why
        if caller is None:
            return (_idle(frames[inner:]) or
                    "unnamed native (%s)" % GENERIC_NAME[generic])
        return "%s (in %s)" % (GENERIC_NAME[generic], caller)
    if why:
        return why
    user = [s for s, d in native if not _kernel(d)]
    if user and all(_unnamed(s) for s in user):
        return "unnamed native"
    for s, d in native:
        if not SCHED.match(s) and not _unnamed(s):
            return "other (%s)" % _bare(s)
    return "unnamed native" if user else "other"


# An interpreter's file: python3.X or libpython3.X with the build's ABI
# flags (t: free-threaded).
_INTERP = re.compile(r"^(?:lib)?python3(?:\.\d+)?([a-z]*)(?:[-.].*)?$")
CONDVARS = ("pthread_cond_wait", "pthread_cond_timedwait",
            "pthread_cond_clockwait")


def _gil_condvar(native):
    """Whether @native (leaf first) waits on a condition variable called
    from unnamed code of a GIL build's interpreter: the GIL, even where
    take_gil has no symbol (Debian's stripped python3.X).  CPython 3.12 to
    3.15 on Linux wait on a condition variable only in the GIL (take_gil,
    drop_gil's forced switch): their locks and parking lot wait on
    semaphores."""
    outer = max((i for i, (s, d) in enumerate(native)
                 if _bare(s) in CONDVARS), default=None)
    if outer is None or outer + 1 >= len(native):
        return False
    s, d = native[outer + 1]
    m = _INTERP.match(os.path.basename(d))
    return bool(m) and "t" not in m.group(1) and _unnamed(s)


def _specific(r, native, i, py):
    """@r, the reason SPECIFIC gives the frame @native[@i], made precise
    by the frames around it (@py: the Python ones, innermost first)."""
    if r == "stop-the-world" and any(GC.match(_bare(x))
                                     for x, _ in native[i:]):
        return "stop-the-world (gc)"
    if r in LOCKS:
        return _refined(py) or r
    if (r == "per-object lock" and i + 1 < len(native) and
            _bare(native[i + 1][0]) in TYPE_LOCK):
        return INTERNAL % "type lock"
    return r


def _py_level(name, bare, dso, below, py):
    """The Python-level wait of a frame (@name, @bare: its symbol without
    the compiler's suffixes, without glibc's prefixes too; @dso its file)
    with the native frames @below it, leaf first, and the Python ones
    @py, innermost first; or None."""
    r = PY_LEVEL.get(name) or PY_LEVEL.get(bare)
    base = os.path.basename(dso)
    r = r or next((what for prefix, what in PY_LEVEL_FILES
                   if base.startswith(prefix)), None)
    if not r:
        return None
    # A stripped GIL build retakes the GIL as the wait ends.
    if _gil_condvar(below):
        return "GIL"
    return _idle(py) or r


def _internal(caller):
    """The interpreter's own lock that @caller takes, or None."""
    what = INTERNAL_CALLERS.get(caller)
    return INTERNAL % what if what else None


def _idle(py):
    """The idle pool thread whose innermost Python frame (of @py) waits
    for work, or None."""
    s = next((s for s, d in py if s.startswith("py::")), None)
    if s is None:
        return None
    qual, _, fn = s[4:].rpartition(":")
    fn = fn.replace(os.sep, "/")
    return next((name for f, q, name in IDLE
                 if qual == q and ("/" + fn).endswith("/" + f)), None)


def _refined(py):
    """A lock's reason refined by the Python frames around it (@py, the
    innermost first): threading's Event, Condition, ..., queue's Queue."""
    found = None
    for s, d in py:
        if not s.startswith("py::"):
            continue
        qual, _, fn = s[4:].rpartition(":")
        base = os.path.basename(fn)
        if base not in ("threading.py", "queue.py"):
            break
        for f, q, name in PY_WAITS:
            if base == f and qual == q:
                found = name        # the outermost one wins
    return found


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
    and WaitTables (in jitring._report.WRITERS) write and print it."""

    @classmethod
    def read(cls, out, meta, samples, procs, top_pid, data, outer=None):
        """The waits of the switch @samples (script()'s of the switch
        events: split()) and of the switch records of perf.data at @data,
        its processes @procs (jitring._report.processes()); @top_pid: the
        program's process alone (record --top-only), or None."""
        try:
            th = Threads.read(data, _report.window_on(meta))
        except _perfdata.PerfDataError as e:
            raise _report.RecordError("cannot read the context switches "
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
        # throughout the window (jitring._report.with_running()).
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
                     th.name(tid) not in _report.OWN_THREADS and
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
        names = {pid: "%s [%d]" % (_report.command_of(pid, comms[pid],
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
        if _report.own_work(comm, frames):
            return False
        if outer:
            st, cut = _report.with_running(frames, outer)
        else:
            st = _report.program_stack(frames)
            cut = _report.is_cut(frames)
            if cut:
                st.insert(0, _report.CUT)
        why = reason(frames, preempt)
        py = [s for s in st if s.startswith("py::")]
        at = max((i for i, s in enumerate(st) if s.startswith("py::")),
                 default=-1)
        st.insert(at + 1, WAIT_FRAME % why)
        first = next((s for s in py if not s.endswith("/threading.py")),
                     None)
        return Stack(tuple(st), why, py, first, cut)

    def stacks(self):
        """The folded wait stacks as jitring._flame writes them: [([frame,
        ...], microseconds)], in the stacks' order."""
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


# ---- the files and the tables --------------------------------------------

class WaitFolded(_report.Writer):
    """stacks-wait.folded: the folded wait stacks."""
    name = "stacks-wait"
    files = ("stacks-wait.folded",)

    def wanted(self, profile):
        return profile.waits is not None

    def write(self, profile):
        _flame.write_folded(os.path.join(profile.out, self.files[0]),
                            profile.waits.stacks())


class WaitFlame(_report.Writer):
    """flame-wait.html: the folded wait stacks drawn as flame.html is."""
    name = "flame-wait"
    files = ("flame-wait.html",)

    def wanted(self, profile):
        return profile.waits is not None

    def write(self, profile):
        w = profile.waits
        cmd = " ".join(str(a) for a in w.meta.get("command") or [])
        _flame.write_html(
            os.path.join(profile.out, self.files[0]), w.stacks(),
            title="jitring waits: " + cmd,
            subtitle="where threads were off CPU, in microseconds until "
            "each ran again ([wait: REASON] under the innermost Python "
            "frame), %d context switches%s" % (
                w.switches, ", %d sampled with their stack"
                % w.samples if w.sampled else ""),
            unit="\u00b5s off CPU")


class TableRow(NamedTuple):
    """A row of the tables of blocked time."""
    ns: int
    reason: str
    function: str


class WaitTables(_report.Writer):
    """The wait tables on stdout (profile.top rows each): the header
    line, blocked time by reason, by function (total and self), the
    preempted, --wall's lines and the notes."""
    name = "wait-tables"
    files = ()

    def wanted(self, profile):
        return profile.waits is not None

    def write(self, profile):
        w = profile.waits
        top = profile.top
        dirs = _report.program_dirs(w.meta)
        print()
        if not self.header(w):
            return
        self.reasons(w)
        if not w.self_:
            print("\nno thread of the program blocked")
        else:
            self.blocked(w, top, dirs)
        self.preempted(w, top, dirs)
        if w.meta.get("wall"):
            self.wall(w, dirs)
        for n in self.notes(w):
            print("(%s)" % n)

    def header(self, w):
        """The line of the switches and thread time, and how their stacks
        were sampled; False where there is no table to print."""
        vol = sum(w.self_.values())
        pre = sum(r.get(PREEMPTED, 0) for r in w.per_thread.values())
        if not w.samples and any(w.threads.outs.values()):
            print("perf recorded the threads' context switches but no "
                  "sample of them (its samples of the kernel were "
                  "withheld?): no table of waits")
            return False
        off = sum(sum(w.threads.off_cpu(t).values()) for t in w.tids)
        print("%d context switches of %d thread%s over %.3f s of thread "
              "time: %.3f s off CPU (%.1f%%): %.3f s blocked (%.1f%%), "
              "%.3f s preempted (%.1f%%)%s"
              % (w.switches, len(w.tids),
                 "" if len(w.tids) == 1 else "s", w.thread_ns / 1e9,
                 off / 1e9, w.share(off), vol / 1e9, w.share(vol),
                 pre / 1e9, w.share(pre),
                 ", %.3f s with no sampled stack (%.1f%%)"
                 % (w.unsampled_ns / 1e9, w.share(w.unsampled_ns))
                 if w.unsampled_ns else ""))
        if w.sampled:
            print("(%d of them sampled with their stack, about %s a "
                  "second a thread at most (--wait-freq): a sample weighs "
                  "the switches of its thread it stands for, timed at "
                  "every switch)"
                  % (w.samples, w.meta.get("wait_freq") or "?"))
        return True

    def reasons(self, w):
        """The line of blocked time by reason."""
        reasons = {}
        for k, ns in w.self_.items():
            reasons[k.reason] = reasons.get(k.reason, 0) + ns
        if reasons:
            print("Blocked, by reason: " + ", ".join(
                "%s %.3f s (%.1f%%)" % (r, ns / 1e9, w.share(ns))
                for r, ns in sorted(reasons.items(),
                                    key=lambda r: (-r[1], r[0]))
                if w.shown(ns)))

    def blocked(self, w, top, dirs):
        """The tables of blocked time by function: total, then self."""
        rows = sorted(((sum(d.values()), name, d) for name, d in
                       w.total.items()
                       if w.shown(sum(d.values()))),
                      key=lambda r: (-r[0], r[1]))[:top]
        tot = []
        for ns, name, d in rows:
            main = max(d.items(), key=lambda r: (r[1], r[0]))[0]
            if len(d) > 1:
                main += " +%d more" % (len(d) - 1)
            tot.append(TableRow(ns, main, name))
        rows = sorted(((k, ns) for k, ns in w.self_.items()
                       if w.shown(ns)),
                      key=lambda r: (-r[1], r[0]))[:top]
        slf = [TableRow(ns, k.reason, k.function) for k, ns in rows]
        # The reason's column as wide as its longest (two spaces
        # always part it from the function).
        width = max([24] + [len(r.reason) for r in tot + slf])
        print("\nWhere threads wait, by Python function (blocked "
              "until each ran again; total: the function and all it "
              "calls; share of all thread time):")
        self.table(w, "total", tot, width, dirs)
        print("\nBy self (the innermost Python function, by reason):")
        self.table(w, "self", slf, width, dirs)

    def table(self, w, head, rows, width, dirs):
        """One table of TableRows, under its @head."""
        print("%15s  %-*s  %s" % (head, width, "reason", "function"))
        for r in rows:
            print("%s  %-*s  %s" % (w.cell(r.ns), width, r.reason,
                                    _report.fmt_name(r.function, dirs)))

    def preempted(self, w, top, dirs):
        """The table of preempted time by the innermost function."""
        rows = sorted(((k, ns) for k, ns in w.pre_self.items()
                       if w.shown(ns)),
                      key=lambda r: (-r[1], r[0]))[:top]
        if rows:
            print("\nWhere threads were preempted (runnable, waiting for "
                  "a CPU), by the innermost Python function:")
            print("%15s  %s" % ("self", "function"))
            for name, ns in rows:
                print("%s  %s" % (w.cell(ns),
                                  _report.fmt_name(name, dirs)))

    def notes(self, w):
        """The notes after the tables, one line each."""
        notes = []
        if w.unmatched:
            notes.append("%d switch%s without the time the thread ran "
                         "again (perf lost its record, or the recording "
                         "ended first) left out"
                         % (w.unmatched,
                            "" if w.unmatched == 1 else "es"))
        if w.own:
            notes.append("%d switch%s of jitring's own work left out"
                         % (w.own, "" if w.own == 1 else "es"))
        notes += self.lost_notes(w)
        if w.unsampled_ns * 100 > w.thread_ns:
            notes.append("%.3f s off CPU (%.1f%% of thread time) has no "
                         "sampled stack (a thread with no sample of its "
                         "kind of switch, or switches after the stacks "
                         "stopped): in no table but --wall's lines"
                         % (w.unsampled_ns / 1e9,
                            w.share(w.unsampled_ns)))
        if w.cut_ns * 100 > w.thread_ns:
            size = w.meta.get("wait_stack_size") or STACK_SIZE
            notes.append("%.1f%% of thread time waits with a cut stack "
                         "(outer frames not recorded)%s"
                         % (w.share(w.cut_ns),
                            "; record with --wait-stack-size %d for "
                            "deeper ones" % min(_report.STACK_MAX, 4 * size)
                            if w.meta.get("call_graph") != "fp" and
                            size < _report.STACK_MAX else ""))
        return notes

    def lost_notes(self, w):
        """What perf lost and what the budget stopped, one line each."""
        notes = []
        lost = w.threads.lost
        if lost.get("switch"):
            notes.append("perf lost %d samples of the switches (its "
                         "buffers were full): the next sample of their "
                         "thread stands for their switches"
                         % lost["switch"])
        if lost.get("records"):
            notes.append("perf lost %d of its records of switches, forks "
                         "and maps (its buffers were full): a thread whose "
                         "switch record is lost has its time off CPU off "
                         "by that switch's" % lost["records"])
        elif lost.get("any") and not lost.get("switch") and \
                not lost.get("cpu"):
            notes.append("perf lost %d records (its buffers were full; "
                         "this kernel does not say of which event): the "
                         "times off CPU may be off by their switches"
                         % lost["any"])
        got = w.budget
        if got.get("fast"):
            t = got.get("sampled_s") or 0
            if t:
                notes.append("for %.1f s of the program, switching %d "
                             "times a second (more than %d), the stacks of "
                             "its switches were sampled, about %d a second "
                             "a thread at most (--wait-freq), each "
                             "weighing the switches it stands for; taken "
                             "at every switch otherwise"
                             % (t, (got.get("sampled_n") or 0) / t, RATE,
                                got.get("freq") or 0))
            else:
                notes.append("the program switched %d times a second "
                             "(more than %d) %.1f s in, but no whole "
                             "window of its switches' stacks was sampled "
                             "(perf stopped first, or took the change "
                             "late): every switch's stack was taken"
                             % (got.get("fast_rate") or 0, RATE,
                                got["fast"]))
        if "stacks_off" in got:
            notes.append("stacks of switches were taken for the first %.1f "
                         "s only: perf.data reached half its budget "
                         "(--wait-budget %d MB); every switch after is "
                         "timed, its stack is \"%s\""
                         % (got["stacks_off"], got.get("budget", 0) >> 20,
                            UNSAMPLED))
        if "perf_off" in got:
            notes.append("perf stopped recording %.1f s in: perf.data "
                         "reached its budget (--wait-budget %d MB); what "
                         "the program did after is in no table"
                         % (got["perf_off"], got.get("budget", 0) >> 20))
        return notes

    def wall(self, w, dirs):
        """--wall's lines: each thread's life, CPU and waits by reason."""
        th = w.threads
        print("\nEach thread's time (--wall): CPU, then off CPU by "
              "reason:")
        print("%8s %8s %8s %8s  %s" % ("tid", "life", "CPU", "off CPU",
                                       "thread: reasons"))
        rows = []
        for tid in w.tids:
            span = th.life(tid)
            rows.append((span.end - span.start, tid))
        for life, tid in sorted(rows, key=lambda r: (-r[0], r[1])):
            cpu = th.on_cpu(tid)
            r = w.per_thread.get(tid, {})
            e = w.entry.get(tid)
            what = w.comm.get(tid) or th.name(tid)
            if e:
                fn = _report.fmt_name(
                    max(e.items(), key=lambda x: (x[1], x[0]))[0],
                    dirs).split(":")[0]
                # 3.14+ names a thread "Thread-2 (target)", cut to 15
                # bytes ("Thread-2 (targ"): the function once, whole.
                base, sep, tail = what.rpartition(" (")
                if sep and tail and fn.startswith(tail.rstrip(")")):
                    what = "%s (%s)" % (base, fn)
                else:
                    what += " (%s)" % fn
            print("%8d %7.3fs %7.3fs %7.3fs  %s: %s"
                  % (tid, life / 1e9, cpu / 1e9, (life - cpu) / 1e9, what,
                     ", ".join("%s %.3f s" % (why, ns / 1e9) for why, ns in
                               sorted(r.items(),
                                      key=lambda x: (-x[1], x[0]))
                               if ns >= 500000)
                     or "-"))


# The outputs of record --wait, in the order finish() runs them: the
# files, then the tables.
