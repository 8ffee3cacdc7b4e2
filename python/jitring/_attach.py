# SPDX-License-Identifier: MIT
"""python -m jitring record --pid PID: profile a running Python process
for a window, and leave it as it was.

Two sides.  record's side (probe(), Window) finds out what PID is, asks it
to start jitring, and at the end of the window asks it to stop.  The
target's side (target_request(), target_start(), and the watcher thread)
runs inside PID, in whichever of its threads next runs Python:

  CPython 3.14 and later: sys.remote_exec(PID, script) (PEP 768) asks the
      main thread, and, where it has not answered in MAIN_WAIT,
      send_all_threads() every other thread (the whole process stopped
      with ptrace meanwhile; where it cannot be, the main thread's
      request stands alone), to run a script that holds the whole
      request; it lives in /tmp/jitring-<uid>/attach-<pid>.py and is
      emptied when the window ends, so that a thread that runs it later
      runs nothing.
  3.12, 3.13: a process started with JITRING_PROFILE=standby has jitring's
      handler for STANDBY_SIGNAL (a real-time signal, SIGRTMIN+7), and
      nothing else: no hook, no dump, no thread.  record writes its request
      to /tmp/jitring-<uid>/standby-<pid>.json and sends the signal to the
      main thread (tgkill), where Python runs signal handlers: a wait of
      the main thread (a lock, select, pause) returns EINTR, runs the
      handler, and waits again.
  A process whose jitring is already on (JITRING_PROFILE=1, or
      jitring.start() in its code) is recorded as it is, and left on.

Every file of a window that the target reads or writes lives in the
user's runtime folder, /tmp/jitring-<uid> (mode 0700, owned by the user,
checked with lstat), or in a folder made fresh in it for the window
(Window.dir, mkdtemp: mode 0700), never in -o: the request script and the
standby request in the runtime folder, the answer FIFO and the stop FIFO
in the window's folder.  No other user can write there, whatever -o is:
nobody can swap a script, forge an answer or a stop, or point a name at
another file.  record creates its files O_EXCL|O_NOFOLLOW (a request is
written to a new name in the window's folder, then renamed over the one
the target reads); the target opens the FIFOs and the standby request
with O_NOFOLLOW and checks what it opened (a script CPython reads
itself).
record attaches only to a process of its own user (root too: a service
of another user writes its dump, which root would then read and write
beside, in a folder that user can change); it holds a lock per target
(RUNTIME/attach-<pid>.lock, naming its pid) for the window, so a second
record on the same process is refused at once.

Each window has a nonce and a stop FIFO.  A request does something only
while record (its pid and start time) is alive and that FIFO is there,
and only once (the first thread to run it); otherwise it does nothing and
prints nothing.  The target answers on the answer FIFO (one JSON line);
record waits START_WAIT for it, then opens the window with the answer
still to come (a process none of whose threads runs Python starts when
one does).

While the window is open, a daemon thread in the target ("jitring-attach",
named jitring-own as the thread that runs a request is meanwhile, so that
the profile leaves jitring's work out) waits on the stop FIFO and a pidfd
of record's process: a line on the FIFO (record's stop), its end (record
gone), record's exit, the window's limit (its --duration plus LIMIT_SLACK
seconds, or LIMIT_UNBOUNDED without one or with one it cannot use), or
any failure of the wait makes it call jitring.stop(), which closes the
dump whole.  A fork child started in the window is left out of it (its
jitring stops at the fork: _child_fork()); a child that execs is not
profiled (the window changes no environment).

Frames already running when the window opens (a worker's loop, a
server's serve_forever) never pass through a trampoline: perf sees them
only as the interpreter's eval loop, unnamed.  So the target marks them
as the window opens, before jitring starts (_tag_running(): each
frame's f_trace, where none is set, becomes a mark of its own that does
nothing, held weakly), and as it closes writes, for each thread (native
id), the outermost frames whose marks still live, those that ran
throughout the window, into RUNNING_FILE in the window's folder
(_write_running(): O_EXCL|O_NOFOLLOW in the private folder, checked).
record copies the file into the recording, and the report puts those
frames at the root of every sample of the thread
(jitring._report.summarize()).  jitring's own frames (the request, the
handler, the watcher) are never marked nor written.
"""

import _thread
import json
import os
import signal
import stat
import sys

STANDBY_SIGNAL = signal.SIGRTMIN + 7
ANSWER_SECONDS = 20.0
LIMIT_SLACK = 60.0
LIMIT_UNBOUNDED = 24 * 3600.0
DURATION_MAX = 7 * 24 * 3600.0     # record --duration's most
# The target's list of the frames that ran throughout the window, in the
# window's folder; and its bounds (threads, frames a thread, characters a
# name or file), which the record side checks it against
# (jitring._report.checked_running()).
RUNNING_FILE = "running.json"
RUNNING_THREADS = 4096
RUNNING_DEPTH = 512
RUNNING_NAME = 1024


# ---- the target's side --------------------------------------------------

# (thread, wake fd, (pidfd, wake read fd, stop fd), limit) of the open
# window, under _request_lock where it is taken.
_watch = None
_request_lock = _thread.allocate_lock()


def _answer(ack, **kw):
    try:
        fd = os.open(ack, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC |
                     os.O_NOFOLLOW)
    except OSError:
        return
    try:
        # Only into record's FIFO: never a file that a name was swapped
        # for (record runs as this user, or as root).
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode) or \
                st.st_uid not in (os.geteuid(), 0):
            return
        os.write(fd, (json.dumps(kw) + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _watcher(pidfd, wake, limit, stopfd=-1, ack=None, running=None,
             marks=None):
    import select
    import jitring
    r = []
    try:
        # The whole thread is jitring's: its samples are left out.
        try:
            fd = os.open("/proc/thread-self/comm",
                         os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, jitring.OWN_NAME)
            finally:
                os.close(fd)
        except OSError:
            pass
        fds = [wake] + [fd for fd in (pidfd, stopfd) if fd >= 0]
        r, _, _ = select.select(fds, [], [], limit)
    except Exception:
        pass
    finally:
        # record's stop (a line on the window's stop FIFO, or its end:
        # record gone), record's exit, the limit passed, or the wait
        # failed (a limit select cannot take, anything): the window never
        # stays open.  A wake: target_stop() stops, or a later window took
        # over.
        if wake not in r:
            if marks:
                # While jitring and perf are still on: the frames that
                # ran throughout the window.
                _write_running(running, marks)
            was = jitring.stop()
            _forget(wake)
            if stopfd in r and ack:
                _answer(ack, ok=True, stopped=bool(was))
    for fd in (pidfd, wake, stopfd):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


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


def _forget(wake):
    """The watcher of @wake stopped by itself: its window is over, and its
    wake pipe's other end is closed now, not at the next window."""
    global _watch
    with _request_lock:
        w = _watch
        if w is None or w[2][1] != wake:
            return
        _watch = None
    try:
        os.close(w[1])
    except OSError:
        pass


def _child_fork():
    """A fork child of a process with an open window is left out of it:
    its jitring (a dump of its own, beside the parent's) stops here, in
    the forking thread.  The child cannot watch the window's end itself: a
    new thread in a fork child of a threaded process can wait forever on a
    lock a thread the child does not have held at the fork."""
    global _watch
    w, _watch = _watch, None
    if w is None:
        return
    # The window's descriptors are left open (close-on-exec): the watcher
    # may have closed them in the parent, and their numbers be reused.
    import jitring
    if jitring.is_active():
        jitring.stop()


def _stop_watch():
    global _watch
    with _request_lock:     # against _forget()
        if _watch is None:
            return
        thread, wake_w = _watch[:2]
        _watch = None
    try:
        os.write(wake_w, b"x")
    except OSError:
        pass            # EPIPE: the watcher is gone already
    try:
        os.close(wake_w)
    except OSError:
        pass
    thread.join(5)


def target_start(out, ack, record_pid, limit, procs=None, stopfd=-1,
                 running=None):
    """In the target: start jitring with its dump in @out, watched (and
    stopped by a line on @stopfd, the window's stop FIFO, where given);
    with @running (the window's folder), the frames that run throughout
    the window are written there as it closes."""
    global _watch
    try:
        import jitring
    except ImportError as e:
        _answer(ack, ok=False, why="import", error=str(e),
                python=sys.executable, path=sys.path)
        return
    if jitring.is_active():
        _answer(ack, ok=True, was_active=True)
        return
    # Before the start: no marked frame goes through a trampoline.
    marks = _tag_running() if running and frames_readable() else None
    try:
        # A folder per window: its dump is not kept open after it.
        jitring.start(dir=out, release=True)
    except Exception as e:
        _answer(ack, ok=False, why="start", error=str(e))
        return
    import time
    on_ns = time.monotonic_ns()
    if procs:
        jitring._note_process("attach", procs)
    import threading
    try:
        pidfd = os.pidfd_open(record_pid)
    except (AttributeError, OSError):
        pidfd = -1
    wake_r, wake_w = os.pipe()
    _stop_watch()
    if not 0 < limit <= DURATION_MAX + LIMIT_SLACK:     # nan, inf, huge
        limit = LIMIT_UNBOUNDED
    t = threading.Thread(target=_watcher, args=(pidfd, wake_r, limit, stopfd,
                                                ack, running, marks),
                         name="jitring-attach", daemon=True)
    # Before the thread runs: it may stop, and _forget() it, at once.
    _watch = (t, wake_w, (pidfd, wake_r, stopfd), limit)
    t.start()
    # The moment jitring came on here: record leaves out the samples
    # before it (CLOCK_MONOTONIC, perf's clock under -k 1).
    _answer(ack, ok=True, was_active=False, on_ns=on_ns)
    return True         # @stopfd is the watcher's now


_answered = set()     # the nonces of the windows this process answered


def _record_alive(pid, start):
    """Whether process @pid is the one that started at @start (clock
    ticks since boot, /proc/PID/stat's 22nd field)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19]) == start
    except (OSError, ValueError, IndexError):
        return False


def target_request(nonce, record_pid, record_start, stop, out, ack, limit,
                   procs=None):
    """In the target: record's request to open window @nonce, run by the
    first thread that gets it (others, and a request whose window is over
    or whose record is gone, do nothing, and print nothing)."""
    import jitring
    with _request_lock:
        if nonce in _answered:
            return
        _answered.add(nonce)
    if not _record_alive(record_pid, record_start):
        return
    marked = jitring._own_begin(True)
    try:
        # The window's stop FIFO: there while the window is open.  Only
        # record's FIFO (record runs as this user, or as root), never a
        # file that a name was swapped for.
        try:
            fd = os.open(stop, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC |
                         os.O_NOFOLLOW)
        except OSError:
            return
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode) or \
                st.st_uid not in (os.geteuid(), 0):
            os.close(fd)
            return
        if not target_start(out, ack, record_pid, limit, procs, fd,
                            os.path.dirname(stop)):
            os.close(fd)        # not watched: it did not start
    finally:
        if marked:
            jitring._own_end()


def target_stop(ack):
    """In the target: close the window's session."""
    import jitring
    _stop_watch()
    was = jitring.stop()
    _answer(ack, ok=True, stopped=bool(was))


def standby_request_path(pid, uid=None):
    return "/tmp/jitring-%d/standby-%d.json" % (
        os.getuid() if uid is None else uid, pid)


def runtime_dir():
    """record's side: /tmp/jitring-<uid>, made if missing; AttachError
    unless it is a folder (not a link to one) of this user that no one
    else can write."""
    d = os.path.dirname(standby_request_path(0))
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise AttachError("cannot make %s: %s" % (d, e.strerror))
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or \
            st.st_mode & 0o077:
        raise AttachError("%s is not a private folder of yours (a "
                          "folder of mode 0700 owned by uid %d): remove "
                          "it" % (d, os.getuid()))
    return d


def _create(path, mode=0o600):
    """A new file at @path, never an existing one nor through a link."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                   os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def hold(pid):
    """record's side: the lock of @pid's window (a descriptor to close
    when the window is over); AttachError naming the record that holds
    it already."""
    import fcntl
    import time
    path = os.path.join(runtime_dir(), "attach-%d.lock" % pid)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                     os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            break
        # The holder before removed it as it let go (release()): lock
        # the file that is there now.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"%d\n" % os.getpid(), 0)
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    # The holder writes its pid just after it locks.
    for _ in range(20):
        holder = os.pread(fd, 32, 0).strip()
        if holder:
            break
        time.sleep(0.05)
    os.close(fd)
    raise AttachError("process %d has a window open already, by record "
                      "process %s" % (pid, holder.decode(errors="replace")
                                      or "?"))


def _prune(run):
    """Remove what records which are gone left in @run (killed in their
    window: nothing of theirs ran after): their window folders, and lock
    files no one holds (as release() does); and the (emptied) request
    scripts of targets that are gone."""
    import fcntl
    for n in os.listdir(run):
        if n.startswith("attach-") and n.endswith(".py") and \
                n[7:-3].isdigit():
            if not os.path.exists("/proc/" + n[7:-3]):
                try:
                    os.unlink(os.path.join(run, n))
                except OSError:
                    pass
            continue
        if n.startswith("attach-") and n.endswith(".lock"):
            try:
                fd = os.open(os.path.join(run, n), os.O_RDWR |
                             os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(os.path.join(run, n))
            except OSError:
                pass
            os.close(fd)
            continue
        parts = n.split("-")
        if len(parts) != 3 or parts[0] != "window" or \
                not parts[1].isdigit() or \
                os.path.exists("/proc/%s" % parts[1]):
            continue
        d = os.path.join(run, n)
        try:
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)
        except OSError:
            pass


def release(pid, fd):
    """Let go of hold(@pid)'s lock @fd, removing its file first (a record
    waiting on it then takes a new one)."""
    try:
        os.unlink(os.path.join(runtime_dir(), "attach-%d.lock" % pid))
    except (OSError, AttachError):
        pass
    os.close(fd)


def standby_handler(signum, frame):
    """JITRING_PROFILE=standby: STANDBY_SIGNAL's handler."""
    path = standby_request_path(os.getpid())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            d = os.lstat(os.path.dirname(path))
            # Only a request of this user, a regular file in its own
            # private folder.
            if not stat.S_ISREG(st.st_mode) or \
                    not stat.S_ISDIR(d.st_mode) or \
                    st.st_uid != os.getuid() or d.st_uid != os.getuid() or \
                    d.st_mode & 0o077 or st.st_mode & 0o022:
                return
            req = json.loads(os.read(fd, 1 << 16))
        finally:
            os.close(fd)
        os.unlink(path)
    except (OSError, ValueError):
        return
    if req.get("action") == "request":
        target_request(req["nonce"], int(req["record_pid"]),
                       int(req["record_start"]), req["stop"], req["out"],
                       req["ack"], float(req["limit"]), req.get("procs"))
    elif req.get("action") == "start":
        target_start(req["out"], req["ack"], int(req["record_pid"]),
                     float(req["limit"]), req.get("procs"))
    elif req.get("action") == "stop":
        target_stop(req["ack"])


def standby():
    """JITRING_PROFILE=standby: wait for record --pid, with no hook."""
    signal.signal(STANDBY_SIGNAL, standby_handler)


os.register_at_fork(after_in_child=_child_fork)


# ---- record's side ------------------------------------------------------

class AttachError(Exception):
    """A refusal: one line, exit 2, the target untouched."""


def _read(path, binary=False):
    with open(path, "rb" if binary else "r") as f:
        return f.read()


def probe(pid):
    """What PID is: {'version': (3, 14), 'argv': [...], 'env': {...}}.
    Raises AttachError when record cannot attach to it."""
    import re
    if pid == os.getpid():
        raise AttachError("cannot attach to record itself")
    try:
        maps = _read("/proc/%d/maps" % pid)
        argv = [a.decode(errors="replace") for a in
                _read("/proc/%d/cmdline" % pid, True).split(b"\0")[:-1]]
        env = dict(e.decode(errors="replace").partition("=")[::2] for e in
                   _read("/proc/%d/environ" % pid, True).split(b"\0")
                   if b"=" in e)
        uid = int([l for l in _read("/proc/%d/status" % pid).splitlines()
                   if l.startswith("Uid:")][0].split()[2])
    except FileNotFoundError:
        raise AttachError("no process %d" % pid)
    except PermissionError:
        raise AttachError("ptrace is not permitted on process %d: %s"
                          % (pid, _ptrace_hint()))
    except OSError as e:
        raise AttachError("cannot read process %d: %s" % (pid, e.strerror))
    ver = None
    for m in re.finditer(r"/(?:lib)?python(3)\.(\d+)(t?)(?:[.-]|$)", maps,
                         re.M):
        ver = (int(m.group(1)), int(m.group(2)))
        break
    if ver is None:
        raise AttachError("process %d (%s) is not a Python interpreter"
                          % (pid, " ".join(argv)[:60] or "?"))
    return {"pid": pid, "version": ver, "argv": argv, "env": env,
            "uid": uid}


def _active_flag(info):
    v = info["env"].get("JITRING_PROFILE", "")
    return v if v not in ("", "0") else None


def route(info):
    """'remote' (sys.remote_exec), 'standby' (the signal), or 'as-is'
    (jitring already on there); AttachError if none can work."""
    pid, ver = info["pid"], info["version"]
    if ver < (3, 12):
        raise AttachError(
            "process %d runs CPython %d.%d: jitring needs 3.12 or later "
            "(3.12 and 3.13 started with JITRING_PROFILE=standby, 3.14 "
            "and later through sys.remote_exec)" % (pid, ver[0], ver[1]))
    uid = info.get("uid", os.geteuid())
    if uid != os.geteuid():
        raise AttachError(
            "process %d runs as user %s, record as %s: attach as its "
            "user (e.g. sudo -u %s python -m jitring record --pid %d); "
            "its dump and answers would cross users"
            % (pid, _user(uid), _user(os.geteuid()), _user(uid), pid))
    flag = _active_flag(info)
    if flag and flag != "standby":
        return "as-is"
    if ver >= (3, 14):
        argv = info["argv"]
        if info["env"].get("PYTHON_DISABLE_REMOTE_DEBUG") or any(
                a in ("disable_remote_debug", "-Xdisable_remote_debug")
                for a in argv):
            raise AttachError(
                "process %d has remote debugging disabled "
                "(PYTHON_DISABLE_REMOTE_DEBUG or -X disable_remote_debug): "
                "sys.remote_exec cannot reach it" % pid)
        if not hasattr(sys, "remote_exec") or \
                sys.version_info[:2] != ver:
            raise AttachError(
                "process %d runs CPython %d.%d: attach with the same "
                "interpreter, from the environment its jitring is in "
                "(e.g. %s -m jitring record --pid %d)"
                % (pid, ver[0], ver[1], info["argv"][0] if info["argv"]
                   else "python3.%d" % ver[1], pid))
        return "remote"
    if flag == "standby":
        try:
            cgt = int([l for l in _read("/proc/%d/status" % pid).splitlines()
                       if l.startswith("SigCgt:")][0].split()[1], 16)
        except (OSError, IndexError, ValueError):
            cgt = 0
        if not cgt & (1 << (int(STANDBY_SIGNAL) - 1)):
            raise AttachError(
                "process %d has JITRING_PROFILE=standby but no standby "
                "handler (is jitring installed in its interpreter, and "
                "is the signal left to it?)" % pid)
        return "standby"
    raise AttachError(
        "process %d runs CPython %d.%d, which has no sys.remote_exec: "
        "start it with JITRING_PROFILE=standby (no cost until record "
        "--pid asks) or JITRING_PROFILE=1" % (pid, ver[0], ver[1]))


def _main_runs(pid):
    """The voluntary context switches of @pid's main thread, or None: how
    often it has waited and woken (a Python loop's sleep or select runs
    the signal handlers each time it wakes; a call without timeout, or
    C code that computes, does not wait again)."""
    try:
        return int([l for l in _read("/proc/%d/task/%d/status"
                                     % (pid, pid)).splitlines()
                    if l.startswith("voluntary_ctxt")][0].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _user(uid):
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def _ptrace_hint():
    """What ptrace access (to read the target's /proc files and, from
    3.14, for sys.remote_exec) needs here, on one line."""
    hint = ("attaching needs the target's user and a dumpable target (not "
            "setuid, no prctl(PR_SET_DUMPABLE, 0)), or CAP_SYS_PTRACE")
    try:
        scope = _read("/proc/sys/kernel/yama/ptrace_scope").strip()
    except OSError:
        scope = None
    if scope not in (None, "0"):
        hint += ("; kernel.yama.ptrace_scope is %s (1: only descendants "
                 "without CAP_SYS_PTRACE, 2: only with it, 3: never; as "
                 "root: sysctl kernel.yama.ptrace_scope=0)" % scope)
    return hint


# The request sys.remote_exec has the target run: whole in the script's
# text (the target reads the file when a thread runs it, maybe long after:
# the file stays, emptied once the window is over).  It does nothing, and
# prints nothing, unless record (its pid and start time) is alive and the
# window's stop FIFO is there.
REQUEST = """\
def _jitring_request():
    import os
    try:
        with open("/proc/%(rpid)d/stat", "rb") as f:
            if int(f.read().rsplit(b")", 1)[1].split()[19]) != %(rstart)d:
                return
        if not os.path.exists(%(stop)r):
            return
    except Exception:
        return
    try:
        from jitring._attach import target_request
    except ImportError as e:
        import json, sys
        try:
            fd = os.open(%(ack)r, os.O_WRONLY | os.O_NONBLOCK |
                         os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if (st.st_mode & 0o170000) == 0o010000 and \\
                        st.st_uid in (os.geteuid(), 0):
                    os.write(fd, (json.dumps({"ok": False, "why": "import",
                        "error": str(e), "python": sys.executable,
                        "path": sys.path}) + "\\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass
        return
    target_request(%(nonce)r, %(rpid)d, %(rstart)d, %(stop)r, %(out)r,
                   %(ack)r, %(limit)r, %(procs)r)
try:
    _jitring_request()
except Exception:
    pass
del _jitring_request
"""

# How long start() waits for the target's answer before the window opens
# with the answer still to come (a target whose threads all wait runs the
# request when one of them next runs Python), and how long stop() waits
# for a start that may be under way when the window ends unanswered.
START_WAIT = 2.0
STOP_GRACE = 1.0
# How long the main thread has to answer (3.14+) before every other thread
# is asked too.
MAIN_WAIT = 0.3


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


class Window:
    """One attach window on a probed target: start(), then stop().  Its
    answers come on a FIFO in a folder of its own (self.dir), made fresh
    in the runtime folder; its stop is a line on another FIFO there, read
    by the target's watcher thread (no Python needed in the target's other
    threads); @out gets the dump."""

    def __init__(self, info, out, limit, procs=None):
        self.info = info
        self.pid = info["pid"]
        self.out = out
        self.limit = limit
        self.procs = procs
        self.how = route(info)
        import tempfile
        self.fd = self.stop_fd = -1
        self.request = None     # the request's file while it may run
        self.sent = None        # (request, main thread's runs, when)
        run = runtime_dir()
        _prune(run)
        self.dir = tempfile.mkdtemp(prefix="window-%d-" % os.getpid(),
                                    dir=run)
        self.nonce = os.urandom(8).hex()
        self.ack = os.path.join(self.dir, "answer")
        self.stop_path = os.path.join(self.dir, "stop")
        os.mkfifo(self.ack, 0o600)
        # Read-write: the FIFO never reports an end, and a write from the
        # target never waits.
        self.fd = os.open(self.ack, os.O_RDWR | os.O_NONBLOCK |
                          os.O_CLOEXEC | os.O_NOFOLLOW)
        os.mkfifo(self.stop_path, 0o600)
        # Held open until close(): the target's watcher sees its end (record
        # gone) when no writer is left.
        self.stop_fd = os.open(self.stop_path, os.O_RDWR | os.O_NONBLOCK |
                               os.O_CLOEXEC | os.O_NOFOLLOW)
        self.answer = None      # the start's answer, once it came
        self.stopped = None     # the stop's answer
        self.buf = b""
        self.started = False

    def close(self):
        """The request voided (a standby request the target never took
        removed), the FIFOs closed, the window's folder removed."""
        self._void()
        for fd in (self.fd, self.stop_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.stop_fd = -1
        try:
            for n in os.listdir(self.dir):
                os.unlink(os.path.join(self.dir, n))
            os.rmdir(self.dir)
        except OSError:
            pass

    def _write(self, path, text):
        """@text as the whole of @path, at once: written to a new name in
        the window's folder (O_EXCL|O_NOFOLLOW), then renamed over @path
        (in the runtime folder: the same file system, this user's)."""
        tmp = os.path.join(self.dir, "request.tmp")
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        with os.fdopen(_create(tmp), "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def _void(self):
        """From here, a request not yet run does nothing (its script is
        emptied: a thread that runs it later finds a file, and no code; a
        standby request is removed)."""
        p, self.request = self.request, None
        if p is None:
            return
        try:
            if self.how == "remote":
                self._write(p, "")
            else:
                os.unlink(p)
        except OSError:
            pass

    def _send(self):
        import time
        pid = self.pid
        # The target is of record's user (route()): it reads the request
        # in the runtime folder.
        run = runtime_dir()
        req = {"nonce": self.nonce, "rpid": os.getpid(),
               "rstart": _start_time(os.getpid()), "stop": self.stop_path,
               "out": self.out, "ack": self.ack, "limit": self.limit,
               "procs": self.procs}
        if self.how == "remote":
            script = os.path.join(run, "attach-%d.py" % pid)
            self._write(script, REQUEST % req)
            self.request = script
            try:
                sys.remote_exec(pid, script)
                # The main thread first, as sys.remote_exec asks: a service
                # whose other threads start jitring in turn keeps, in each
                # of their malloc arenas, what jitring.start() took (sid's
                # 3.14: +10 MB VmRSS over 24 windows on 8 server threads,
                # then flat; the main thread alone: flat).
                if self._wait(MAIN_WAIT) is None:
                    try:
                        send_all_threads(pid, script, self.info["version"])
                    except (OSError, ValueError):
                        pass    # the main thread's request stands alone
            except PermissionError:
                raise AttachError("ptrace is not permitted on process %d: "
                                  "%s" % (pid, _ptrace_hint()))
            except ProcessLookupError:
                raise AttachError("no process %d" % pid)
            except (OSError, RuntimeError) as e:
                msg = str(e)
                if "disable" in msg.lower():
                    raise AttachError("process %d has remote debugging "
                                      "disabled: %s" % (pid, msg))
                if "permission" in msg.lower() or \
                        "not permitted" in msg.lower():
                    raise AttachError("ptrace is not permitted on process "
                                      "%d: %s" % (pid, _ptrace_hint()))
                raise AttachError("sys.remote_exec(%d) failed: %s"
                                  % (pid, msg))
        else:
            path = standby_request_path(pid)
            req.update(action="request", record_pid=req.pop("rpid"),
                       record_start=req.pop("rstart"))
            self._write(path, json.dumps(req))
            self.request = path
            self.sent = (path, _main_runs(pid), time.monotonic())
            try:
                _signal(pid, STANDBY_SIGNAL)
            except ProcessLookupError:
                raise AttachError("no process %d" % pid)
            except PermissionError:
                raise AttachError("process %d is not yours: attaching "
                                  "needs the same user" % pid)

    def _wait(self, seconds, stop=False):
        """The start's answer (@stop: the stop's), waiting at most
        @seconds; None if it has not come."""
        import select
        import time
        end = time.monotonic() + seconds
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    a = json.loads(line)
                except ValueError:
                    continue
                if "stopped" in a:
                    self.stopped = a
                elif self.answer is None:
                    self.answer = a
            got = self.stopped if stop else self.answer
            left = end - time.monotonic()
            if got is not None or left <= 0 or self.fd < 0:
                return got
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if not r:
                if not os.path.exists("/proc/%d" % self.pid):
                    raise AttachError("process %d exited" % self.pid)
                if not stop:
                    self._taken()
                continue
            try:
                self.buf += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                pass

    def _check(self, a):
        if a.get("ok"):
            self.started = not a.get("was_active")
            return a
        self._void()
        if a.get("why") == "import":
            raise AttachError(
                "jitring cannot be imported in process %d (%s): %s; "
                "its sys.path: %s" % (self.pid, a.get("python"),
                                      a.get("error"),
                                      ":".join(a.get("path") or [])))
        raise AttachError("jitring did not start in process %d: %s"
                          % (self.pid, a.get("error")))

    def _taken(self):
        """From two seconds after the standby signal: a main thread that
        has run since (a Python loop gets to the handler at once) while
        the request is still there has run another handler for the
        signal."""
        import time
        if self.sent is None or self.request is None:
            return
        path, before, when = self.sent
        if time.monotonic() - when < START_WAIT:
            return
        now = _main_runs(self.pid)
        if os.path.exists(path) and before is not None and \
                now is not None and now - before >= 3:
            raise AttachError(
                "process %d did not take the request, though its main "
                "thread runs: its program has its own handler for signal "
                "%d (SIGRTMIN+7), which JITRING_PROFILE=standby needs"
                % (self.pid, int(STANDBY_SIGNAL)))

    def start(self):
        """Ask the target to start; its answer, or {'ok': True,
        'pending': True} where none came within START_WAIT (the window
        is open: the target starts when one of its threads runs Python,
        and poll() sees the answer)."""
        if self.how == "as-is":
            return {"ok": True, "was_active": True}
        self._send()
        a = self._wait(START_WAIT)
        if a is None:
            self._taken()
            return {"ok": True, "pending": True}
        return self._check(a)

    def poll(self, seconds=0.0):
        """A late start's answer, once (None: none yet, or given
        already); raises AttachError if it says jitring did not start."""
        if self.how == "as-is" or self.answer is not None:
            return None
        a = self._wait(seconds)
        return None if a is None else self._check(a)

    def running(self):
        """The service's list of the frames that ran throughout the
        window (RUNNING_FILE, written in the window's folder before the
        stop's answer), checked (jitring._report.checked_running()); None
        where there is none."""
        from jitring import _report
        try:
            fd = os.open(os.path.join(self.dir, RUNNING_FILE),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK |
                         os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                text = f.read(64 << 20)
            return _report.checked_running(json.loads(text))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def stop(self):
        """End the window: the request voided, then the stop line.
        Returns the stop's answer, or None where nothing had started."""
        if self.how == "as-is" or self.stop_fd < 0:
            return None
        self._void()
        try:
            os.write(self.stop_fd, b"stop\n")
        except OSError:
            pass
        if self.answer is None and self._wait(STOP_GRACE) is None:
            return None         # never ran; void from here on
        if not self.answer.get("ok") or self.answer.get("was_active"):
            return None
        self.started = False
        a = self._wait(ANSWER_SECONDS, stop=True)
        if a is None:
            raise AttachError(
                "process %d did not answer its stop within %d s (it stops "
                "by itself once record is gone)"
                % (self.pid, ANSWER_SECONDS))
        return a
