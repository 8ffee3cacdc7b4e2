# SPDX-License-Identifier: MIT
"""Why a thread waited: a wait's stack (kernel, native and Python
frames) named by what a Python user reads (a lock, a queue's get, I/O,
sleep, an idle pool worker, the interpreter's own waits)."""

import os
import re

from jitring.wait.setup import PREEMPTED


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
    jitring.perf.script.script() gives them): a short name (see the module's
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
    qual, _, fn = s[4:].partition(":")
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
        qual, _, fn = s[4:].partition(":")
        base = os.path.basename(fn)
        if base not in ("threading.py", "queue.py"):
            break
        for f, q, name in PY_WAITS:
            if base == f and qual == q:
                found = name        # the outermost one wins
    return found
