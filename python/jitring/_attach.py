# SPDX-License-Identifier: MIT
"""python -m jitring record --pid PID: profile a running Python process
for a window, and leave it as it was.

Two sides.  record's side (probe(), Window) finds out what PID is, asks it
to start jitring, waits for its answer, and at the end of the window asks
it to stop.  The target's side (target_start(), target_stop(), and the
watcher thread) runs inside PID, at its next safe point:

  CPython 3.14 and later: sys.remote_exec(PID, script) (PEP 768) runs a
      two-line script that calls target_start() or target_stop().
  3.12, 3.13: a process started with JITRING_PROFILE=standby has jitring's
      handler for STANDBY_SIGNAL (a real-time signal, SIGRTMIN+7), and
      nothing else: no hook, no dump, no thread.  record writes its request
      to /tmp/jitring-<uid>/standby-<pid>.json (the user's runtime folder:
      mode 0700, owned by the user) and sends the signal; the handler
      reads the request and calls the same functions.
  A process whose jitring is already on (JITRING_PROFILE=1, or
      jitring.start() in its code) is recorded as it is, and left on.

Every file of a window that the target reads or writes (the scripts for
sys.remote_exec, the answer FIFO, the standby request) lives in the
runtime folder or in a folder made fresh in it for the window (mkdtemp:
mode 0700), which no other user can write, whatever -o is: nobody can
swap a script, forge an answer, or point a name at another file.  record
creates them O_EXCL|O_NOFOLLOW; the target opens the FIFO and the request
with O_NOFOLLOW and checks what it opened (a script CPython reads
itself).
record attaches only to a process of its own user (root too: a service
of another user writes its dump, which root would then read and write
beside, in a folder that user can change); it holds a lock per target
(RUNTIME/attach-<pid>.lock, naming its pid) for the window, so a second
record on the same process is refused at once.

The target answers on the FIFO (one JSON line); record waits for it at
most ANSWER_SECONDS.  While the window is open, a
daemon thread in the target ("jitring-attach") waits on a pidfd of
record's process: if record dies, is killed, or the window's limit
(its --duration plus LIMIT_SLACK seconds, or LIMIT_UNBOUNDED without one)
passes, or the thread fails in any way, it calls jitring.stop(), which
closes the dump whole.
"""

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


# ---- the target's side --------------------------------------------------

_watch = None       # (thread, wake fd) of the open window


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


def _watcher(pidfd, wake, limit):
    import select
    import jitring
    fds = [wake] + ([pidfd] if pidfd >= 0 else [])
    r = []
    try:
        r, _, _ = select.select(fds, [], [], limit)
    except Exception:
        pass
    finally:
        # Record is gone, the limit passed, or the wait failed (a limit
        # select cannot take, anything): the window never stays open.
        if wake not in r:
            jitring.stop()
    for fd in (pidfd, wake):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _stop_watch():
    global _watch
    if _watch is None:
        return
    thread, wake_w = _watch
    _watch = None
    try:
        os.write(wake_w, b"x")
        os.close(wake_w)
    except OSError:
        pass
    thread.join(5)


def target_start(out, ack, record_pid, limit, procs=None):
    """In the target: start jitring with its dump in @out, watched."""
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
    try:
        # A folder per window: its dump is not kept open after it.
        jitring.start(dir=out, release=True)
    except Exception as e:
        _answer(ack, ok=False, why="start", error=str(e))
        return
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
    t = threading.Thread(target=_watcher, args=(pidfd, wake_r, limit),
                         name="jitring-attach", daemon=True)
    t.start()
    _watch = (t, wake_w)
    _answer(ack, ok=True, was_active=False)


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
    files no one holds (as release() does)."""
    import fcntl
    for n in os.listdir(run):
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
    if req.get("action") == "start":
        target_start(req["out"], req["ack"], int(req["record_pid"]),
                     float(req["limit"]), req.get("procs"))
    elif req.get("action") == "stop":
        target_stop(req["ack"])


def standby():
    """JITRING_PROFILE=standby: wait for record --pid, with no hook."""
    signal.signal(STANDBY_SIGNAL, standby_handler)


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


class Window:
    """One attach window on a probed target: start(), then stop().  Its
    answers come on a FIFO in a folder of its own (self.dir), made fresh
    in the runtime folder; @out gets the dump."""

    def __init__(self, info, out, limit, procs=None):
        self.info = info
        self.pid = info["pid"]
        self.out = out
        self.limit = limit
        self.procs = procs
        self.how = route(info)
        import tempfile
        self.fd = -1
        run = runtime_dir()
        _prune(run)
        self.dir = tempfile.mkdtemp(prefix="window-%d-" % os.getpid(),
                                    dir=run)
        self.ack = os.path.join(self.dir, "answer")
        os.mkfifo(self.ack, 0o600)
        # Read-write: the FIFO never reports an end, and a write from the
        # target never waits.
        self.fd = os.open(self.ack, os.O_RDWR | os.O_NONBLOCK |
                          os.O_CLOEXEC | os.O_NOFOLLOW)
        self.started = False

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if getattr(self, "sent", None):
            # A request the target never took is not left for later.
            try:
                os.unlink(self.sent[0])
            except OSError:
                pass
        for n in ("answer", "start.py", "stop.py"):
            try:
                os.unlink(os.path.join(self.dir, n))
            except OSError:
                pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def _ask(self, action):
        pid = self.pid
        if self.how == "remote":
            call = ("target_start(%r, %r, %d, %r, %r)"
                    % (self.out, self.ack, os.getpid(), self.limit,
                       self.procs) if action == "start" else
                    "target_stop(%r)" % self.ack)
            script = os.path.join(self.dir, "%s.py" % action)
            with os.fdopen(_create(script, 0o600), "w") as f:
                f.write("try:\n"
                        "    from jitring._attach import target_start, "
                        "target_stop\n"
                        "except ImportError as e:\n"
                        "    import sys, os, json\n"
                        "    fd = os.open(%r, os.O_WRONLY | os.O_NONBLOCK"
                        " | os.O_NOFOLLOW)\n"
                        "    os.write(fd, (json.dumps({'ok': False, 'why': "
                        "'import', 'error': str(e), 'python': "
                        "sys.executable, 'path': sys.path}) + '\\n')"
                        ".encode())\n"
                        "    os.close(fd)\n"
                        "else:\n"
                        "    %s\n" % (self.ack, call))
            try:
                sys.remote_exec(pid, script)
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
            runtime_dir()
            path = standby_request_path(pid)
            req = {"action": action, "ack": self.ack}
            if action == "start":
                req.update(out=self.out, record_pid=os.getpid(),
                           limit=self.limit, procs=self.procs)
            tmp = os.path.join(self.dir, "request.tmp")
            with os.fdopen(_create(tmp), "w") as f:
                json.dump(req, f)
            # Both in the runtime folder: the rename is this user's.
            os.replace(tmp, path)
            self.sent = (path, _main_runs(pid))
            try:
                os.kill(pid, STANDBY_SIGNAL)
            except ProcessLookupError:
                raise AttachError("no process %d" % pid)
            except PermissionError:
                raise AttachError("process %d is not yours: attaching "
                                  "needs the same user" % pid)
        return self._wait()

    def _wait(self):
        import select
        import time
        end = time.monotonic() + ANSWER_SECONDS
        buf = b""
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0:
                raise AttachError(
                    "process %d did not answer within %d s (its main "
                    "thread runs the request at its next Python bytecode: "
                    "is it blocked in a call without timeout, or "
                    "stopped?)" % (self.pid, ANSWER_SECONDS))
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if not r:
                if not os.path.exists("/proc/%d" % self.pid):
                    raise AttachError("process %d exited" % self.pid)
                if self.how == "standby" and \
                        end - time.monotonic() < ANSWER_SECONDS - 2:
                    self._taken()
                continue
            try:
                buf += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
        return json.loads(buf.split(b"\n", 1)[0])

    def _taken(self):
        """Two seconds after the standby signal: a main thread that has
        run since (a Python loop gets to the handler at once) while the
        request is still there has run another handler for the signal."""
        path, before = self.sent
        now = _main_runs(self.pid)
        if os.path.exists(path) and before is not None and \
                now is not None and now - before >= 3:
            raise AttachError(
                "process %d did not take the request, though its main "
                "thread runs: its program has its own handler for signal "
                "%d (SIGRTMIN+7), which JITRING_PROFILE=standby needs"
                % (self.pid, int(STANDBY_SIGNAL)))

    def start(self):
        if self.how == "as-is":
            return {"ok": True, "was_active": True}
        a = self._ask("start")
        if not a.get("ok"):
            if a.get("why") == "import":
                raise AttachError(
                    "jitring cannot be imported in process %d (%s): %s; "
                    "its sys.path: %s" % (self.pid, a.get("python"),
                                          a.get("error"),
                                          ":".join(a.get("path") or [])))
            raise AttachError("jitring did not start in process %d: %s"
                              % (self.pid, a.get("error")))
        self.started = not a.get("was_active")
        return a

    def stop(self):
        if not self.started:
            return None
        self.started = False
        return self._ask("stop")
