# SPDX-License-Identifier: MIT
"""record --wait: where the program's threads wait, by Python function,
and why.

Besides its CPU samples, perf records every context switch of the
program's threads, twice:

  - a sample of the software event context-switches (period 1; at most
    --wait-freq a second a thread where given), taken as the thread
    leaves its CPU, with the whole stack (kernel, native and Python
    frames: the trampolines name the Python ones as in the CPU profile);
  - PERF_RECORD_SWITCH records (--switch-events): OUT as the thread
    leaves its CPU, flagged PREEMPT where it was still runnable (the
    scheduler took the CPU; or the thread yielded it), IN as it runs
    again.

A switch sample of thread T at time t weighs the time until T runs
again: the first IN of T after its OUT at t, times the switches the
sample stands for (1, or its period with --wait-freq).  The records time
every switch, so each thread's time blocked and its time preempted (by
the OUT's flag) are exact; the samples only split them by stack: each
sample's weight is scaled so that its thread's samples of that kind add
up to the records' time (which also spreads the time of samples perf
lost over the others of their thread).  A sample whose OUT or IN is
missing, or that waits past the recording's end, weighs nothing and is
counted.  A switch is voluntary (the thread
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
import os
import re
import struct

from jitring import _flame, _perfdata, _report

# The event perf samples as a thread leaves its CPU.
EVENT = "context-switches"
# --wait-freq: 0 samples every switch with its stack (exact).  HZ asks
# perf's frequency mode for at most HZ switch samples a second a thread:
# the kernel sets each thread's period from its rate and each sample
# carries its period, the switches it stands for.  Every switch still has
# its records (--switch-events), so each thread's time blocked and
# preempted stays exact; only its split by stack is sampled.  The cost
# falls with the samples (a 4.5 s program switching 15,000 times a second:
# folder 379 -> 97 MB, finish 21 -> 5 s at 999 Hz), but the period is
# systematic, not random, and a new thread inherits its creator's: a
# thread that switches rarely after a busy start, or a rare long wait in
# a busy thread, may have no sample (a 0.3 s child wait was missed at
# 999 Hz), so it is not the default.
FREQ = 0
# dwarf mode's stack copy per switch sample (--wait-stack-size): perf
# writes each sample's whole copy, and at 20,000 switches a second 32 KiB
# copies (660 MB/s) lost 41-69% of the samples here, 8 KiB none or a
# few.  The innermost frames (the reason, the self table) are always in
# the copy; a stack it cuts loses its outer frames.
STACK_SIZE = 8192
# perf's ring buffer for --wait: a switch sample carries its stack copy
# (8 KiB in dwarf mode), and a program that switches 20,000 times a second
# overruns perf's default (512 KiB) at once.  Only where perf may lock
# that much (root): another user's limit is perf_event_mlock_kb (516 KiB
# by default), and perf would refuse.
MMAP = "32M"

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
PERF_RECORD_COMM = 3
PERF_RECORD_EXIT = 4
PERF_RECORD_FORK = 7
PERF_RECORD_SAMPLE = 9
PERF_RECORD_SWITCH = 14
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


def perf_args(call_graph, stack_size=STACK_SIZE, freq=FREQ):
    """What perf record is given besides its CPU event: -F stays that
    event's, the switch event has a frequency (or at @freq 0, a period of
    1) of its own (and in dwarf mode its own stack copy); -P records the
    period in every sample, so that both events' samples have one layout
    (jitring._perfdata reads one) and each switch sample says how many
    switches it stands for."""
    terms = "freq=%d" % freq if freq else "period=1"
    if call_graph == "dwarf":
        terms += ",call-graph=dwarf,stack-size=%d" % stack_size
    return ["-e", "%s/%s/" % (EVENT, terms), "--switch-events", "-P"] + \
        (["-m", MMAP] if os.geteuid() == 0 else [])


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
        (waits if s[5].startswith(EVENT) else cpu).append(s)
    return cpu, waits


class Threads:
    """Each thread's switches, life and name, read from perf.data (or
    perf.jit.data: perf inject keeps the records)."""

    def __init__(self, path, since=0):
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
        self._off = {}      # tid -> off_cpu()
        with _perfdata.PerfData(path) as pd:
            self._read(pd)
        for d in (self.outs, self.ins):
            for v in d.values():
                v.sort()

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
        m = pd.m
        pidtid = struct.Struct("<II")
        u64 = struct.Struct("<Q")
        first, last, outs, ins = self.first, self.last, self.outs, self.ins
        period = self.period
        for typ, misc, off, size in pd.records():
            if typ == PERF_RECORD_SAMPLE:
                if size < max(s_tid + 16, s_period + 8):
                    continue
                pid, tid = pidtid.unpack_from(m, off + s_tid)
                t, = u64.unpack_from(m, off + s_tid + 8)
                if switch_ids and u64.unpack_from(m, off + s_id)[0] in \
                        switch_ids:
                    n, = u64.unpack_from(m, off + s_period)
                    if n > 1:
                        period[(tid, t)] = n
            elif typ in (PERF_RECORD_SWITCH, PERF_RECORD_COMM):
                if size < 8 + tail:
                    continue
                p = off + size - tail
                pid, tid = pidtid.unpack_from(m, p)
                t, = u64.unpack_from(m, p + 8)
                if typ == PERF_RECORD_SWITCH and t < self.since:
                    continue
                if typ == PERF_RECORD_SWITCH:
                    if misc & MISC_SWITCH_OUT:
                        outs.setdefault(tid, []).append(
                            (t, bool(misc & MISC_SWITCH_OUT_PREEMPT)))
                    else:
                        ins.setdefault(tid, []).append(t)
                else:
                    end = m.find(b"\0", off + 16, p)
                    name = m[off + 16:end if end >= 0 else p].decode(
                        errors="replace")
                    if t >= self.comm.get(tid, (-1,))[0]:
                        self.comm[tid] = (t, name)
            elif typ in (PERF_RECORD_FORK, PERF_RECORD_EXIT):
                if size < 32:
                    continue
                pid, _, tid, _ = struct.unpack_from("<IIII", m, off + 8)
                t, = u64.unpack_from(m, off + 24)
                if t >= self.since:
                    (self.start if typ == PERF_RECORD_FORK else
                     self.end)[tid] = t
            else:
                continue
            if t == 0 or tid == 0:
                continue
            self.pid.setdefault(tid, pid)
            if t < self.since:
                continue
            if t < first.get(tid, t + 1):
                first[tid] = t
            if t > last.get(tid, -1):
                last[tid] = t

    def life(self, tid):
        """(start, end) of the thread in the recording, in ns."""
        a = self.start.get(tid, self.first.get(tid, 0))
        b = self.end.get(tid, self.last.get(tid, a))
        return a, max(a, b)

    def name(self, tid):
        """The thread's latest name; a thread that never set one has its
        process's."""
        c = self.comm.get(tid) or self.comm.get(self.pid.get(tid))
        return _flame.escape(c[1] if c else "?")

    def wait_of(self, tid, t):
        """(ns until @tid runs again after its switch at @t, whether the
        switch was a preemption), or None where its records are
        missing."""
        outs = self.outs.get(tid)
        ins = self.ins.get(tid)
        if not outs or not ins:
            return None
        i = bisect.bisect_left(outs, (t, False))
        if i == len(outs) or outs[i][0] - t > PAIR_NS:
            return None
        t_out, preempt = outs[i]
        j = bisect.bisect_right(ins, t_out)
        if j == len(ins):
            return None
        t_in = ins[j]
        # An OUT before that IN: the IN of this switch was lost.
        if i + 1 < len(outs) and outs[i + 1][0] < t_in:
            return None
        return t_in - t, preempt

    def off_cpu(self, tid):
        """{preempted: ns} the thread was off its CPU, from each OUT to
        the IN after it (or the thread's end), by the OUT's preemption
        flag (worked out once a thread)."""
        off = self._off.get(tid)
        if off is not None:
            return off
        b = self.life(tid)[1]
        off = self._off[tid] = {}
        ins = self.ins.get(tid, [])
        for t, pre in self.outs.get(tid, []):
            j = bisect.bisect_right(ins, t)
            e = min(ins[j], b) if j < len(ins) else b
            off[pre] = off.get(pre, 0) + max(0, e - t)
        return off

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


# ---- the tables and files ----------------------------------------------

WAIT_FRAME = "[wait: %s]"


class Waits:
    """The waits of a recording: computed, written (stacks-wait.folded,
    flame-wait.html), printed by print()."""

    def __init__(self, out, meta, samples, procs, top_pid, data,
                 outer=None):
        self.out, self.meta = out, meta
        self.procs = procs
        try:
            self.threads = th = Threads(data, _report.window_on(meta))
        except _perfdata.PerfDataError as e:
            raise _report.RecordError("cannot read the context switches "
                                      "of %s: %s" % (data, e))
        self.unmatched = 0
        self.own = 0
        self.samples = len(samples)
        self.cut_ns = 0
        covered = {}        # tid -> the switches its samples stand for
        sampled = set()     # the tids with a sample for more than one
        # Pass 1: each sample's wait, weighed by the switches it stands
        # for (its period, sampled at a frequency), and its sum by thread
        # and kind of switch (the OUT record's preemption flag).
        rows = []
        raw = {}            # (tid, preempted) -> ns the samples weigh
        seen = {}
        # record --pid: the frames each thread of the service ran
        # throughout the window (jitring._report.with_running()).
        o_pid, o_tids = outer or (None, {})
        for pid, comm, frames, tid, t, _ in samples:
            if top_pid is not None and pid != top_pid:
                continue
            n = th.period.get((tid, t), 1)
            covered[tid] = covered.get(tid, 0) + n
            if n > 1:
                sampled.add(tid)
            w = th.wait_of(tid, t)
            if w is None:
                self.unmatched += 1
                continue
            ns, preempt = w
            ns *= n
            raw[(tid, preempt)] = raw.get((tid, preempt), 0) + ns
            o = o_tids.get(tid) if pid == o_pid else None
            k = (comm, tuple(frames), preempt, o)
            c = seen.get(k)
            if c is None:
                c = seen[k] = self._classify(comm, frames, preempt, o)
            if c is False:
                self.own += 1
                continue
            rows.append((pid, comm, tid, preempt, ns, c))
        # The records time every switch: each thread's time blocked and
        # preempted is theirs, and only its split by stack is the
        # samples' (exact at every switch sampled, an estimate at a
        # frequency; perf's lost samples leave the others to share it).
        exact = {(tid, kind): ns for tid in {k[0] for k in raw}
                 for kind, ns in th.off_cpu(tid).items()}
        total, self_, stacks = {}, {}, {}
        pre_self = {}
        per_thread = {}     # tid -> {reason: ns}
        entry = {}          # tid -> {first user Python frame: n}
        self.comm = {}      # tid -> its name in its samples
        comms = {}
        for pid, comm, tid, preempt, ns, c in rows:
            ns = ns * exact.get((tid, preempt), 0) // raw[(tid, preempt)]
            key, why, py, first, cut = c
            if cut:
                self.cut_ns += ns
            comms.setdefault(pid, comm)
            self.comm[tid] = comm
            r = per_thread.setdefault(tid, {})
            r[why] = r.get(why, 0) + ns
            if first:
                e = entry.setdefault(tid, {})
                e[first] = e.get(first, 0) + ns
            stacks[(pid, key)] = stacks.get((pid, key), 0) + ns
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
        self.total, self.self_, self.pre_self = total, self_, pre_self
        self.per_thread, self.entry = per_thread, entry
        # The program's threads: those of its processes, jitring's own
        # left out; their lives are the shares' whole.
        self.tids = [tid for tid, pid in th.pid.items()
                     if (top_pid is None or pid == top_pid) and
                     th.name(tid) not in _report.OWN_THREADS and
                     (tid in per_thread or
                      pid in comms or pid in procs)]
        self.thread_ns = sum(th.life(t)[1] - th.life(t)[0]
                             for t in self.tids)
        # Every context switch of the program's threads, by the records.
        self.switches = sum(len(th.outs.get(t, ())) for t in self.tids)
        self.sampled = bool(sampled)
        # Switches no sample stands for (perf lost them: its buffer was
        # full), and time off CPU of a kind of which a thread has no
        # sample at all (no stack to give it).
        self.lost = sum(max(0, len(th.outs.get(t, ())) - covered.get(t, 0))
                        for t in self.tids)
        self.unsampled_ns = 0
        for t in self.tids:
            for kind, ns in th.off_cpu(t).items():
                if (t, kind) not in raw:
                    self.unsampled_ns += ns
                    r = per_thread.setdefault(t, {})
                    r[UNSAMPLED] = r.get(UNSAMPLED, 0) + ns
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
        self.write(folded)

    def _classify(self, comm, frames, preempt, outer=None):
        """(flame stack, reason, the program's Python frames root first,
        the thread's first frame of the program), or False for jitring's
        own work.  @outer: the frames the thread ran throughout the
        window (record --pid), as the CPU samples have them."""
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
        return tuple(st), why, py, first, cut

    def write(self, folded):
        stacks = sorted(((list(k), n) for k, n in folded.items()),
                        key=lambda r: r[0])
        _flame.write_folded(os.path.join(self.out, "stacks-wait.folded"),
                            stacks)
        meta = self.meta
        cmd = " ".join(str(a) for a in meta.get("command") or [])
        _flame.write_html(
            os.path.join(self.out, "flame-wait.html"), stacks,
            title="jitring waits: " + cmd,
            subtitle="where threads were off CPU, in microseconds until "
            "each ran again ([wait: REASON] under the innermost Python "
            "frame), %d context switches%s" % (
                self.switches, ", %d sampled with their stack"
                % self.samples if self.sampled else ""),
            unit="\u00b5s off CPU")

    # -- printing ----------------------------------------------------

    def share(self, ns):
        return 100.0 * ns / self.thread_ns if self.thread_ns else 0.0

    def cell(self, ns):
        return "%7.3fs %5.1f%%" % (ns / 1e9, self.share(ns))

    def shown(self, ns):
        """Whether a row is worth a line: 0.05% of thread time or more
        (the rest print as 0.0%)."""
        return ns * 2000 >= self.thread_ns

    def print(self, top):
        cwd = self.meta.get("cwd")
        wall = self.meta.get("wall")
        vol = sum(self.self_.values())
        pre = sum(r.get(PREEMPTED, 0) for r in self.per_thread.values())
        print()
        if not self.samples and any(self.threads.outs.values()):
            print("perf recorded the threads' context switches but no "
                  "sample of them (its samples of the kernel were "
                  "withheld?): no table of waits")
            return
        print("%d context switches of %d thread%s over %.3f s of thread "
              "time: %.3f s blocked (%.1f%%), %.3f s preempted (%.1f%%)"
              % (self.switches, len(self.tids),
                 "" if len(self.tids) == 1 else "s", self.thread_ns / 1e9,
                 vol / 1e9, self.share(vol), pre / 1e9, self.share(pre)))
        if self.sampled:
            print("(%d of them sampled with their stack, at up to %s a "
                  "second a thread (--wait-freq): each weighs the switches "
                  "it stands for)"
                  % (self.samples, self.meta.get("wait_freq") or "?"))
        reasons = {}
        for (_, why), ns in self.self_.items():
            reasons[why] = reasons.get(why, 0) + ns
        if reasons:
            print("Blocked, by reason: " + ", ".join(
                "%s %.3f s (%.1f%%)" % (w, ns / 1e9, self.share(ns))
                for w, ns in sorted(reasons.items(),
                                    key=lambda r: (-r[1], r[0]))
                if self.shown(ns)))
        if not self.self_:
            print("\nno thread of the program blocked")
        else:
            rows = sorted(((sum(d.values()), name, d) for name, d in
                           self.total.items()
                           if self.shown(sum(d.values()))),
                          key=lambda r: (-r[0], r[1]))[:top]
            tot = []
            for ns, name, d in rows:
                main = max(d.items(), key=lambda r: (r[1], r[0]))[0]
                if len(d) > 1:
                    main += " +%d more" % (len(d) - 1)
                tot.append((ns, main, name))
            rows = sorted(((k, ns) for k, ns in self.self_.items()
                           if self.shown(ns)),
                          key=lambda r: (-r[1], r[0]))[:top]
            slf = [(ns, why, name) for (name, why), ns in rows]
            # The reason's column as wide as its longest (two spaces
            # always part it from the function).
            w = max([24] + [len(r[1]) for r in tot + slf])

            def table(head, rows):
                print("%15s  %-*s  %s" % (head, w, "reason", "function"))
                for ns, why, name in rows:
                    print("%s  %-*s  %s" % (self.cell(ns), w, why,
                                            _report.fmt_name(name, cwd)))
            print("\nWhere threads wait, by Python function (blocked "
                  "until each ran again; total: the function and all it "
                  "calls; share of all thread time):")
            table("total", tot)
            print("\nBy self (the innermost Python function, by reason):")
            table("self", slf)
        rows = sorted(((k, ns) for k, ns in self.pre_self.items()
                       if self.shown(ns)),
                      key=lambda r: (-r[1], r[0]))[:top]
        if rows:
            print("\nWhere threads were preempted (runnable, waiting for "
                  "a CPU), by the innermost Python function:")
            print("%15s  %s" % ("self", "function"))
            for name, ns in rows:
                print("%s  %s" % (self.cell(ns),
                                  _report.fmt_name(name, cwd)))
        if wall:
            self.print_wall(cwd)
        notes = []
        if self.unmatched:
            notes.append("%d switch%s without the time the thread ran "
                         "again (perf lost its record, or the recording "
                         "ended first) left out"
                         % (self.unmatched,
                            "" if self.unmatched == 1 else "es"))
        if self.own:
            notes.append("%d switch%s of jitring's own work left out"
                         % (self.own, "" if self.own == 1 else "es"))
        if self.lost * 100 > self.switches:
            notes.append("%d of %d switches have no sample: perf lost them "
                         "(see its warning below); their time is shared "
                         "among the sampled ones of their thread"
                         % (self.lost, self.switches))
        if self.unsampled_ns * 100 > self.thread_ns:
            notes.append("%.3f s off CPU (%.1f%% of thread time) in threads "
                         "with no sampled switch of its kind: in no table"
                         % (self.unsampled_ns / 1e9,
                            self.share(self.unsampled_ns)))
        if self.cut_ns * 100 > self.thread_ns:
            size = self.meta.get("wait_stack_size") or STACK_SIZE
            notes.append("%.1f%% of thread time waits with a cut stack "
                         "(outer frames not recorded)%s"
                         % (self.share(self.cut_ns),
                            "; record with --wait-stack-size %d for "
                            "deeper ones" % min(_report.STACK_MAX, 4 * size)
                            if self.meta.get("call_graph") != "fp" and
                            size < _report.STACK_MAX else ""))
        for n in notes:
            print("(%s)" % n)

    def print_wall(self, cwd):
        th = self.threads
        print("\nEach thread's time (--wall): CPU, then off CPU by "
              "reason:")
        print("%8s %8s %8s %8s  %s" % ("tid", "life", "CPU", "off CPU",
                                       "thread: reasons"))
        rows = []
        for tid in self.tids:
            a, b = th.life(tid)
            rows.append((b - a, tid))
        for life, tid in sorted(rows, key=lambda r: (-r[0], r[1])):
            cpu = th.on_cpu(tid)
            r = self.per_thread.get(tid, {})
            e = self.entry.get(tid)
            what = self.comm.get(tid) or th.name(tid)
            if e:
                fn = _report.fmt_name(
                    max(e.items(), key=lambda x: (x[1], x[0]))[0],
                    cwd).split(":")[0]
                # 3.14+ names a thread "Thread-2 (target)", cut to 15
                # bytes ("Thread-2 (targ"): the function once, whole.
                base, sep, tail = what.rpartition(" (")
                if sep and tail and fn.startswith(tail.rstrip(")")):
                    what = "%s (%s)" % (base, fn)
                else:
                    what += " (%s)" % fn
            print("%8d %7.3fs %7.3fs %7.3fs  %s: %s"
                  % (tid, life / 1e9, cpu / 1e9, (life - cpu) / 1e9, what,
                     ", ".join("%s %.3f s" % (w, ns / 1e9) for w, ns in
                               sorted(r.items(),
                                      key=lambda x: (-x[1], x[0]))
                               if ns >= 500000)
                     or "-"))
