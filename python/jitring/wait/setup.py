# SPDX-License-Identifier: MIT
"""record --wait's set-up: perf's events and their sizes, the budget
that bounds the recording (Budget: a watcher that samples stacks at an
adaptive rate and stops them at half the cap), and the refusals where
the kernel will not give context-switch samples."""

import json
import os
import select
import sys
import threading
import time
from typing import NamedTuple

from jitring.common.folder import claim


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
    so that the events' samples have one layout (jitring.perf.data reads
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
        claim(out, [BUDGET_FILE])
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
