# SPDX-License-Identifier: MIT
"""record --pid's window (Window): the target asked to start jitring,
its answer awaited, and at the end asked to stop, with its running
frames copied into the recording (jitring._target has the protocol)."""

import json
import os
import stat
import sys

from jitring._running import RUNNING_FILE, standby_request_path
from jitring._target import (ANSWER_SECONDS, STANDBY_SIGNAL, _create, _prune,
                             runtime_dir)
from jitring.attach.probe import (MAIN_WAIT, REQUEST, START_WAIT, STOP_GRACE,
                                  _main_runs, _ptrace_hint, route)
from jitring.attach.ptrace import _signal, _start_time, send_all_threads
from jitring.common.errors import AttachError


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
        stop's answer), checked (jitring.common.folder.checked_running()); None
        where there is none."""
        from jitring.common.folder import checked_running
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
            return checked_running(json.loads(text))
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
