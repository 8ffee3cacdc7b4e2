# SPDX-License-Identifier: MIT
"""record --pid, inside the target: the Python frames already running
when the window opens, marked (_tag_running()) and, as it closes, written
for each thread (_write_running()), so that the report can put them at
the root of the thread's samples.  Runs in the profiled program."""

import _thread
import json
import os
import stat
import sys


# The target's list of the frames that ran throughout the window, in the
# window's folder; and its bounds (threads, frames a thread, characters a
# name or file), which the record side checks it against
# (jitring.common.folder.checked_running()).
RUNNING_FILE = "running.json"


RUNNING_THREADS = 4096


RUNNING_DEPTH = 512


RUNNING_NAME = 1024


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _own_code(filename):
    """Whether code of @filename is jitring's: its package's, or a
    request script in the runtime folder (sys.remote_exec's)."""
    return filename.startswith(_HERE) or \
        filename.startswith(os.path.dirname(standby_request_path(0)) +
                            os.sep)


def _threads_frames():
    """[(thread ident, native thread id, innermost frame)] of the threads
    that threading knows (the main thread, threading.Thread's, a thread that
    called threading.current_thread()); a thread started by _thread alone
    has no native id to be found by, and is left out.  threading's lock
    is not taken: the thread that runs this may hold it (a request runs
    where a thread checks for one)."""
    import threading
    frames = sys._current_frames()
    # This thread from its first frame outside jitring's out: the dict
    # holds this function's own frame, and the caller's locals will hold
    # what this returns; either frame in it would be a cycle that keeps
    # every thread's innermost frame until the collector runs.
    f = sys._getframe(1)
    while f is not None and _own_code(f.f_code.co_filename):
        f = f.f_back
    frames[_thread.get_ident()] = f
    f = None
    ids = {}
    for ident, t in threading._active.copy().items():
        tid = getattr(t, "native_id", None)
        if isinstance(tid, int):
            ids[ident] = tid
    got = [(i, ids[i], f) for i, f in frames.items()
           if i in ids and f is not None]
    frames.clear()
    return got


def _outer_first(f):
    """The frames from @f out, outermost first, cut before jitring's
    own first frame (the request, the handler, the watcher)."""
    st = []
    while f is not None and len(st) < 100000:
        st.append(f)
        f = f.f_back
    st.reverse()
    for i, fr in enumerate(st):
        if _own_code(fr.f_code.co_filename):
            return st[:i]
    return st


def frames_readable():
    """Whether a thread here may read the other threads' frames: not on a
    free-threaded 3.13 running without the GIL, where such a read races
    with the thread returning from the frame (a use-after-free, fixed in
    3.14 and not backported: python/cpython#152355), unless the process
    was started with JITRING_RUNNING_FRAMES=1."""
    if sys.version_info >= (3, 14) or \
            getattr(sys, "_is_gil_enabled", lambda: True)():
        return True
    return os.environ.get("JITRING_RUNNING_FRAMES") == "1"


class _Mark:
    """A window's mark on a frame that runs as it opens: the frame's
    f_trace.  f_trace is read only by a tracer of sys.settrace; one that
    calls a mark (for a frame it chose not to trace: its f_trace was
    None) gets None, which leaves the frame as it was."""
    __slots__ = ("__weakref__",)

    def __call__(self, frame, event, arg):
        return None


# co_flags of a generator's, coroutine's or async generator's code: such a
# frame may be suspended, and resumed elsewhere, while its mark lives.
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200


def _tag_running():
    """Mark every frame running now (but jitring's own) with a mark of its
    own, as its f_trace, where it has none (or an earlier window's);
    called before jitring starts, so no marked frame went through a
    trampoline.  A thread's marks stop at a frame a tracer set f_trace on
    and at a generator's or coroutine's frame.  Returns [(thread ident,
    native id, [(weak reference to the mark, qualname, file, first
    line), ...] outermost first)]: a mark lives as long as its frame
    object, which, nothing else holding it, is freed as the frame
    returns; so at the window's close the live marks are the frames that
    ran throughout, found without reading any frame again (a frame
    object read in the watcher, a short-lived thread, would be allocated
    in its heap: on free-threaded builds, a heap left behind per window)."""
    import weakref
    marks = []
    try:
        for ident, tid, f in _threads_frames():
            got = []
            for fr in _outer_first(f):
                code = fr.f_code
                if code.co_flags & _GENERATOR_FLAGS or not (
                        fr.f_trace is None or isinstance(fr.f_trace, _Mark)):
                    break
                m = _Mark()
                fr.f_trace = m
                got.append((weakref.ref(m), code.co_qualname[:RUNNING_NAME],
                            code.co_filename[:RUNNING_NAME],
                            code.co_firstlineno))
            if got:
                marks.append((ident, tid, got))
    except Exception:
        pass
    return marks


def _running_threads(marks):
    """[{"tid", "frames"}]: for each thread of @marks (_tag_running())
    that is still there, its outermost frames whose marks still live
    (they ran throughout the window), each as [qualname, file, first
    line], outermost first."""
    import threading
    threads = []
    try:
        now = threading._active.copy()
        for ident, tid, got in marks:
            if getattr(now.get(ident), "native_id", None) != tid:
                continue        # gone (its ident, or native id, reused)
            run = []
            for ref, qual, fn, line in got:
                if ref() is None:
                    break
                run.append([qual, fn, line])
            if run and len(threads) < RUNNING_THREADS:
                threads.append({"tid": tid, "frames": run[:RUNNING_DEPTH]})
    except Exception:
        pass
    return threads


def _write_running(folder, marks):
    """_running_threads() into RUNNING_FILE in the window's @folder:
    only a folder of this user's (or root's) that no one else can enter,
    not through a link, and only as a new file."""
    threads = _running_threads(marks)
    if not folder:
        return
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY |
                      os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(dfd)
        if not stat.S_ISDIR(st.st_mode) or \
                st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o077:
            return
        fd = os.open(RUNNING_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                     os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "threads": threads}, f)
    except (OSError, ValueError):
        pass
    finally:
        os.close(dfd)


def standby_request_path(pid, uid=None):
    return "/tmp/jitring-%d/standby-%d.json" % (
        os.getuid() if uid is None else uid, pid)
