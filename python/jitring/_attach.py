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
      to /tmp/jitring-<uid>/standby-<pid>.json (a folder of mode 0700,
      owned by the user) and sends the signal; the handler reads the
      request and calls the same functions.
  A process whose jitring is already on (JITRING_PROFILE=1, or
      jitring.start() in its code) is recorded as it is, and left on.

The target answers on a FIFO in the recording's folder (one JSON line);
record waits for it at most ANSWER_SECONDS.  While the window is open, a
daemon thread in the target ("jitring-attach") waits on a pidfd of
record's process: if record dies, is killed, or the window's limit
(its --duration plus LIMIT_SLACK seconds, or LIMIT_UNBOUNDED without one)
passes, the thread calls jitring.stop(), which closes the dump whole.
"""

import json
import os
import signal
import sys

STANDBY_SIGNAL = signal.SIGRTMIN + 7
ANSWER_SECONDS = 20.0
LIMIT_SLACK = 60.0
LIMIT_UNBOUNDED = 24 * 3600.0


# ---- the target's side --------------------------------------------------

_watch = None       # (thread, wake fd) of the open window


def _answer(ack, **kw):
    try:
        fd = os.open(ack, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, (json.dumps(kw) + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _watcher(pidfd, wake, limit):
    import select
    import jitring
    fds = [wake] + ([pidfd] if pidfd >= 0 else [])
    try:
        r, _, _ = select.select(fds, [], [], limit)
    except (OSError, ValueError):
        r = []
    if wake not in r:
        jitring.stop()          # record is gone, or the limit passed
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


def standby_handler(signum, frame):
    """JITRING_PROFILE=standby: STANDBY_SIGNAL's handler."""
    path = standby_request_path(os.getpid())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            d = os.stat(os.path.dirname(path))
            # Only a request of this user, in its own private folder.
            if st.st_uid != os.getuid() or d.st_uid != os.getuid() or \
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
    return {"pid": pid, "version": ver, "argv": argv, "env": env}


def _active_flag(info):
    v = info["env"].get("JITRING_PROFILE", "")
    return v if v not in ("", "0") else None


def route(info):
    """'remote' (sys.remote_exec), 'standby' (the signal), or 'as-is'
    (jitring already on there); AttachError if none can work."""
    pid, ver = info["pid"], info["version"]
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
    answers come on a FIFO in @out."""

    def __init__(self, info, out, limit, procs=None):
        self.info = info
        self.pid = info["pid"]
        self.out = out
        self.limit = limit
        self.procs = procs
        self.how = route(info)
        self.ack = os.path.join(out, ".attach-answer")
        try:
            os.unlink(self.ack)
        except FileNotFoundError:
            pass
        os.mkfifo(self.ack, 0o600)
        # Read-write: the FIFO never reports an end, and a write from the
        # target never waits.
        self.fd = os.open(self.ack, os.O_RDWR | os.O_NONBLOCK |
                          os.O_CLOEXEC)
        self.started = False

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.ack)
        except OSError:
            pass

    def _ask(self, action):
        pid = self.pid
        if self.how == "remote":
            call = ("target_start(%r, %r, %d, %r, %r)"
                    % (self.out, self.ack, os.getpid(), self.limit,
                       self.procs) if action == "start" else
                    "target_stop(%r)" % self.ack)
            script = os.path.join(self.out, ".attach-%s.py" % action)
            with open(script, "w") as f:
                f.write("try:\n"
                        "    from jitring._attach import target_start, "
                        "target_stop\n"
                        "except ImportError as e:\n"
                        "    import sys, os, json\n"
                        "    fd = os.open(%r, os.O_WRONLY | os.O_NONBLOCK)\n"
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
            path = standby_request_path(pid)
            d = os.path.dirname(path)
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(d)
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise AttachError("%s is not a private folder of yours"
                                  % d)
            req = {"action": action, "ack": self.ack}
            if action == "start":
                req.update(out=self.out, record_pid=os.getpid(),
                           limit=self.limit, procs=self.procs)
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(req, f)
            os.replace(tmp, path)
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
            r, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if not r:
                if not os.path.exists("/proc/%d" % self.pid):
                    raise AttachError("process %d exited" % self.pid)
                continue
            try:
                buf += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
        return json.loads(buf.split(b"\n", 1)[0])

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
