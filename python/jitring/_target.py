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
(jitring.profile.aggregate.summarize()).  jitring's own frames (the
request, the handler, the watcher) are never marked nor written.  The
marking and the writing are jitring._running's.
"""

import _thread
import json
import os
import signal
import stat
import sys

from jitring._running import (_tag_running, _write_running, frames_readable,
                              standby_request_path)
from jitring.common.errors import AttachError


STANDBY_SIGNAL = signal.SIGRTMIN + 7


ANSWER_SECONDS = 20.0


LIMIT_SLACK = 60.0


LIMIT_UNBOUNDED = 24 * 3600.0


DURATION_MAX = 7 * 24 * 3600.0     # record --duration's most


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
