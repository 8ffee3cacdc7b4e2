# SPDX-License-Identifier: MIT
"""record --pid on CPython 3.14 and later: every thread of the target
asked to run the request (send_all_threads()), the whole process held
with ptrace meanwhile, so that the thread that next runs Python answers."""

import os
import signal


def _start_time(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def _signal(pid, sig):
    """@sig to @pid's main thread (tgkill), which runs Python's signal
    handlers: a blocking call of its (a lock, select, pause) returns EINTR
    there, where a process-directed signal may land on another thread."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.tgkill(pid, pid, int(sig)) == 0:
            return
        err = ctypes.get_errno()
    except (AttributeError, OSError):
        err = 0
    if err:
        raise OSError(err, os.strerror(err))
    os.kill(pid, sig)


# PEP 768's protocol, for the threads sys.remote_exec does not name (it
# names the main thread only, and CPython does not export the call that
# takes a thread: _PySysRemoteDebug_SendExec is hidden in 3.14 and 3.15).
# _Py_DebugOffsets, at the start of _PyRuntime (ELF section .PyRuntime), is
# all uint64_t after its 8-byte cookie; its size per version, from
# Include/internal/pycore_debug_offsets.h, and the fields used here:
# runtime_state.interpreters_head @40, interpreter_state.threads_head @72,
# threads_main @80, thread_state.next @192; debugger_support, its last six.
_DEBUG_OFFSETS_SIZE = {(3, 14): 760, (3, 15): 888}


_PLEASE_STOP_BIT = 1 << 5


def _elf_runtime(path):
    """The .PyRuntime section's address in @path, less its first PT_LOAD's
    (the load bias' reference); None where it has none."""
    import struct
    try:
        with open(path, "rb") as f:
            h = f.read(64)
            if h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
                return None     # 64-bit little-endian only
            phoff, shoff = struct.unpack_from("<QQ", h, 32)
            phent, phnum, shent, shnum, shstr = struct.unpack_from(
                "<HHHHH", h, 54)
            f.seek(phoff)
            ph = f.read(phent * phnum)
            first = None
            for i in range(phnum):
                typ, _, off, vaddr = struct.unpack_from("<IIQQ", ph,
                                                        i * phent)
                if typ == 1 and off == 0:
                    first = vaddr
                    break
            f.seek(shoff)
            sh = f.read(shent * shnum)
            soff, ssize = struct.unpack_from("<QQ", sh, shstr * shent + 24)
            f.seek(soff)
            names = f.read(ssize)
            for i in range(shnum):
                name, = struct.unpack_from("<I", sh, i * shent)
                if names[name:names.index(b"\0", name)] == b".PyRuntime":
                    addr, = struct.unpack_from("<Q", sh, i * shent + 16)
                    return None if first is None else addr - first
    except (OSError, ValueError, struct.error):
        return None
    return None


# ptrace(2) requests and waitpid's flag for threads (<sys/ptrace.h>,
# <sys/wait.h>): the same numbers on every Linux architecture.
_PTRACE_DETACH = 17


_PTRACE_SEIZE = 0x4206


_PTRACE_INTERRUPT = 0x4207


_WALL = 0x40000000


_PTRACE_EVENT_STOP = 128


_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                 signal.SIGQUIT}


def _ptrace_fn():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.ptrace
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                   ctypes.c_void_p]

    def call(req, tid, data=0):
        ctypes.set_errno(0)
        if fn(req, tid, None, data or None) == -1:
            return ctypes.get_errno() or -1
        return 0
    return call


def _seize_all(pid, ptrace):
    """Stop every thread of @pid: PTRACE_SEIZE then PTRACE_INTERRUPT each
    thread of a listing of /proc/PID/task, then wait for their stops (all
    at once: the first stopped waits for the last no longer than its own
    scheduling), again until a listing shows no thread not stopped yet
    (one that ran may have started another).  A seized thread stops in a
    ptrace stop, not a group stop: its process's parent (a job-control
    shell) sees nothing.  Returns {tid: signal to give back at the detach
    (one that arrived meanwhile), or 0}; raises OSError, every thread
    detached again, where a thread cannot be seized (a thread that exits
    meanwhile is left out)."""
    import errno
    held = {}
    gone = set()
    try:
        while True:
            try:
                tids = [int(t) for t in os.listdir("/proc/%d/task" % pid)]
            except FileNotFoundError:
                raise ProcessLookupError(errno.ESRCH, "no process %d" % pid)
            new = [t for t in tids if t not in held and t not in gone]
            if not new:
                return held
            seized, failed = [], None
            for tid in new:
                err = ptrace(_PTRACE_SEIZE, tid)
                if err == errno.ESRCH or (err == errno.EPERM and
                                          _exited(pid, tid)):
                    # Gone, or past its exit (the kernel refuses to seize
                    # a thread with an exit state, as a main thread after
                    # pthread_exit() keeps until the process ends).
                    gone.add(tid)
                elif err:
                    failed = OSError(err, "PTRACE_SEIZE of thread %d: %s"
                                     % (tid, os.strerror(err)))
                    break
                else:
                    ptrace(_PTRACE_INTERRUPT, tid)
                    seized.append(tid)
            # A seized thread must be stopped before it can be detached:
            # wait for each, whatever comes.
            for tid in seized:
                try:
                    _, st = os.waitpid(tid, _WALL)
                except ChildProcessError:
                    gone.add(tid)
                    continue
                if not os.WIFSTOPPED(st):
                    gone.add(tid)       # it exited: nothing to detach
                    continue
                # A signal-delivery stop holds its signal: given back at
                # the detach.  The interrupt's own stop holds none.
                held[tid] = 0 if st >> 16 == _PTRACE_EVENT_STOP else \
                    os.WSTOPSIG(st)
            if failed:
                raise failed
    except BaseException:
        _detach_all(held, ptrace)
        raise


def _exited(pid, tid):
    """Whether thread @tid of @pid has exited (a zombie, dead, or gone)."""
    try:
        with open("/proc/%d/task/%d/stat" % (pid, tid), "rb") as f:
            st = f.read()
    except OSError:
        return True
    # "tid (comm) S ...": the comm may hold ") ".
    return st[st.rfind(b")") + 2:][:1] in (b"Z", b"X", b"x")


def _detach_all(held, ptrace):
    for tid, sig in held.items():
        ptrace(_PTRACE_DETACH, tid, sig)
    held.clear()


def _py_runtime(pid):
    """The address of .PyRuntime (_Py_DebugOffsets at its start) in
    process @pid: in the first file of its maps mapped from offset 0 with
    "python" in its name (the interpreter, or libpython) that has the
    section.  Raises ValueError where none has."""
    bases = {}
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and int(parts[2], 16) == 0 and \
                    "python" in os.path.basename(parts[5].strip()):
                bases.setdefault(parts[5].strip(),
                                 int(parts[0].split("-")[0], 16))
    runtime = None
    for name, start in bases.items():
        rel = _elf_runtime(name)
        if rel is not None:
            runtime = start + rel
            break
    if runtime is None:
        raise ValueError("no .PyRuntime in process %d's maps" % pid)
    return runtime


def send_all_threads(pid, script, ver):
    """Ask every thread of @pid but the main one (sys.remote_exec's) to
    run @script at its next eval-breaker check, as sys.remote_exec asks
    the main thread.  Returns how many threads; raises OSError or
    ValueError where the target cannot be read as expected, or where one
    of its threads cannot be stopped (no other thread is written to then:
    the main thread's request stands alone).

    Every thread of @pid is stopped meanwhile (_seize_all(): a ptrace
    stop, which its parent does not see), and let go in any case: no
    thread can exit, and have its freed state written to, between the
    walk of the thread list and the writes, nor change its eval breaker
    under the read-modify-write.  If record dies meanwhile the kernel
    detaches them.  A thread stopped in a call that the kernel does not
    restart (epoll_wait, sigtimedwait...) gets EINTR, as after a stop of
    a debugger: Python retries those calls."""
    import struct
    size = _DEBUG_OFFSETS_SIZE.get(tuple(ver))
    if size is None:
        raise ValueError("no _Py_DebugOffsets layout for %d.%d" % ver)
    path = os.fsencode(script) + b"\0"
    runtime = _py_runtime(pid)
    ptrace = _ptrace_fn()
    fd = os.open("/proc/%d/mem" % pid, os.O_RDWR | os.O_CLOEXEC)
    held = {}
    mask = None
    try:
        def u64(addr):
            b = os.pread(fd, 8, addr)
            if len(b) != 8:
                raise ValueError("short read at %#x" % addr)
            return struct.unpack("<Q", b)[0]
        off = os.pread(fd, size, runtime)
        if len(off) != size or off[:8] != b"xdebugpy":
            raise ValueError("no _Py_DebugOffsets at %#x" % runtime)
        q = struct.unpack_from("<%dQ" % ((size - 8) // 8), off, 8)
        if (q[0] >> 16) != (ver[0] << 8 | ver[1]):
            raise ValueError("_Py_DebugOffsets of version %#x" % q[0])

        def o(at):
            return q[(at - 8) // 8]
        breaker, support, _, pending, spath, ssize = q[-6:]
        if len(path) > ssize:
            raise ValueError("script path too long")
        # Ctrl-C and the like wait until every thread is let go.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        held = _seize_all(pid, ptrace)
        # Every thread stopped: the list, and each state on it, stay as
        # they are until the detach.
        interp = u64(runtime + o(40))
        main = u64(interp + o(80))
        t, n = u64(interp + o(72)), 0
        while t and n < 100000:
            if t != main:
                os.pwrite(fd, path, t + support + spath)
                os.pwrite(fd, struct.pack("<i", 1), t + support + pending)
                os.pwrite(fd, struct.pack("<Q", u64(t + breaker) |
                                          _PLEASE_STOP_BIT), t + breaker)
                n += 1
            t = u64(t + o(192))
        return n
    finally:
        _detach_all(held, ptrace)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(fd)
