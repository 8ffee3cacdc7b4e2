# SPDX-License-Identifier: MIT
"""record --max-stack N (root): kernel.perf_event_max_stack raised for the
recording only.  A guardian process puts the old value back when record's
pipe to it closes, kill -9 of record included, retrying while the kernel
says EBUSY, and leaving alone a value someone else set meanwhile."""

import errno
import os
import select
import signal
import sys
import time

from jitring.common.errors import RecordError
from jitring.common.folder import claimed
from jitring.profile.cuts import MAX_STACK_DEFAULT
from jitring.record.job import FORWARDED
from jitring.record.out import clear


def max_stack():
    """kernel.perf_event_max_stack: the most frames perf records of a
    stack (127 unless raised)."""
    try:
        with open("/proc/sys/kernel/perf_event_max_stack") as f:
            return int(f.read())
    except (OSError, ValueError):
        return MAX_STACK_DEFAULT


# ---- --max-stack: kernel.perf_event_max_stack for the recording -------
SYSCTL_MAX_STACK = "/proc/sys/kernel/perf_event_max_stack"


# How long record waits for the old value to be back before it goes on
# (the guardian goes on trying: another perf session recording call
# chains holds the value until it ends).
RESTORE_WAIT = 5.0


class StackGuard:
    """kernel.perf_event_max_stack raised for one recording by a guardian
    process, which puts the old value back once the pipe record holds is
    closed: by put_back(), or by the kernel when record dies in any way
    (SIGKILL included).  The guardian sits in a session of its own with
    the terminal's signals ignored; it retries while the kernel refuses
    (EBUSY: perf sessions still record call chains, record's own perf
    among them while it exits), and leaves a value someone else set
    meanwhile alone."""

    def __init__(self, n):
        if os.geteuid() != 0:
            raise RecordError("--max-stack changes kernel.perf_event_"
                              "max_stack for the whole system, which only "
                              "root may: run record as root, or without "
                              "--max-stack")
        self.old = self.pid = None
        self.hold = self.answer = -1
        old = max_stack()
        if old >= n:
            return              # already that deep: nothing to change
        hold_r, hold_w = os.pipe()
        ans_r, ans_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(hold_w)
            os.close(ans_r)
            guardian(old, n, hold_r, ans_w)     # never returns
        os.close(hold_r)
        os.close(ans_w)
        said = b""
        while True:
            chunk = os.read(ans_r, 512)
            said += chunk
            if not chunk or said.endswith(b"\n"):
                break
        if said != b"ok\n":
            os.close(ans_r)
            os.close(hold_w)
            os.waitpid(pid, 0)
            raise RecordError(said.decode(errors="replace").strip() or
                              "--max-stack: its guardian process failed")
        self.old, self.pid, self.hold, self.answer = old, pid, hold_w, ans_r

    def put_back(self):
        """The old value back (after perf has stopped), or a line on
        stderr saying when it will be."""
        if self.pid is None:
            return
        os.close(self.hold)
        r, _, _ = select.select([self.answer], [], [], RESTORE_WAIT)
        said = os.read(self.answer, 512) if r else b""
        os.close(self.answer)
        if r:
            os.waitpid(self.pid, 0)
        if said.startswith(b"restored"):
            pass
        elif said:
            sys.stderr.write("jitring record: %s\n"
                             % said.decode(errors="replace").strip())
        else:
            sys.stderr.write("jitring record: kernel.perf_event_max_stack "
                             "stays raised while another perf session "
                             "records call chains; process %d puts %d "
                             "back when it ends\n" % (self.pid, self.old))
        self.pid = None


def write_sysctl(n):
    """None, or the errno of writing @n into kernel.perf_event_max_stack."""
    try:
        fd = os.open(SYSCTL_MAX_STACK, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"%d\n" % n)
        finally:
            os.close(fd)
    except OSError as e:
        return e.errno
    return None


def guardian(old, n, hold, answer):
    """StackGuard's process: set @n, say so on @answer, wait for EOF on
    @hold, put @old back; never returns."""
    try:
        os.setsid()
        for s in FORWARDED + (signal.SIGTSTP, signal.SIGTTIN,
                              signal.SIGTTOU, signal.SIGPIPE):
            signal.signal(s, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        keep = {0, 1, 2, hold, answer}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        e = write_sysctl(n)
        if e is not None:
            why = ("another perf session records call chains, and the "
                   "kernel keeps the value until it ends" if
                   e == errno.EBUSY else "the kernel refused")
            os.write(answer, b"--max-stack: cannot set kernel.perf_event_"
                     b"max_stack to %d: %s (%s)\n"
                     % (n, why.encode(), os.strerror(e).encode()))
            os._exit(1)
        os.write(answer, b"ok\n")
        while os.read(hold, 64):
            pass
        os._exit(restore(old, n, answer))
    except BaseException:
        os._exit(3)


def restore(old, n, answer):
    """Put @old back unless someone else changed @n meanwhile, retrying
    while the kernel refuses with EBUSY; the outcome on @answer (record
    may be gone: then nobody reads it)."""
    pause = 0.01
    while True:
        if max_stack() != n:
            msg = b"restored\n"         # someone else's value: theirs
            break
        e = write_sysctl(old)
        if e is None:
            msg = b"restored\n"
            break
        if e != errno.EBUSY:
            msg = (b"--max-stack: could not put kernel.perf_event_max_"
                   b"stack back to %d (%s): it stays %d\n"
                   % (old, os.strerror(e).encode(), n))
            break
        time.sleep(pause)
        pause = min(1.0, pause * 2)
    try:
        os.write(answer, msg)
    except OSError:
        pass
    return 0 if msg.startswith(b"restored") else 1


def forget(out, fresh):
    """A refusal before the program ran leaves nothing behind: the files
    this run wrote, and the folder if it made it."""
    try:
        clear(out, claimed(out))
        if fresh:
            os.rmdir(out)
    except (OSError, RecordError):
        pass
