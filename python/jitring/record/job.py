# SPDX-License-Identifier: MIT
"""The program as a shell's job: started in its own process group behind
a gate (perf attaches before it runs its first instruction), given the
terminal, and waited for; the signals record forwards to it."""

import os
import signal

from jitring.common.folder import PROCS
from jitring.perf.driver import die_with_parent


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def program_env(out, opts):
    env = dict(os.environ)
    if opts.no_children:
        env.pop("JITRING_PROFILE", None)
    else:
        env["JITRING_PROFILE"] = "1"
    env["JITRING_DIR"] = out
    # dwarf mode: the trampolines as ELF files perf unwinds through
    # itself, so the recording is finished without perf inject.
    if opts.call_graph == "dwarf" and not opts.memfd_trampolines:
        env["JITRING_TRAMPOLINE_ELF"] = "1"
    else:
        env.pop("JITRING_TRAMPOLINE_ELF", None)
    env["JITRING_RECORD_PROCS"] = os.path.join(out, PROCS)
    return env


def fork_gated(argv, env):
    """Fork @argv's process in a process group of its own, held before
    exec until gate_open(); returns (pid, gate)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            os.setpgid(0, 0)
            go = os.read(r, 1) == b"g"
            os.close(r)
            if go:
                for s in FORWARDED + (signal.SIGTTOU,):
                    signal.signal(s, signal.SIG_DFL)
                os.execve(argv[0], argv, env)
        except BaseException:
            pass
        os._exit(127)
    os.close(r)
    try:
        os.setpgid(pid, pid)        # both sides: whoever runs first
    except OSError:
        pass
    return pid, w


def gate_open(gate, ok):
    try:
        os.write(gate, b"g" if ok else b"x")
    except OSError:
        pass
    os.close(gate)


class Terminal:
    """The controlling terminal, when record is its foreground: handed to
    the program's process group while it runs, as a shell hands it to a
    job, and taken back after."""

    def __init__(self):
        self.fd = -1
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if os.tcgetpgrp(fd) == os.getpgrp():
                self.fd = fd
                return
        except OSError:
            pass
        os.close(fd)

    def give(self, pgid):
        if self.fd >= 0:
            try:
                os.tcsetpgrp(self.fd, pgid)
            except OSError:
                pass

    def take(self):
        if self.fd >= 0:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            try:
                os.tcsetpgrp(self.fd, os.getpgrp())
            except OSError:
                pass
            signal.signal(signal.SIGTTOU, old)


def pdeathsig():
    """In perf's child before exec: die with record (SIGINT: perf then
    writes what it has and exits)."""
    die_with_parent(signal.SIGINT)


def status_of(ws):
    """A shell's exit status for a wait status: 128+N for signal N."""
    if os.WIFSIGNALED(ws):
        return 128 + os.WTERMSIG(ws)
    return os.WEXITSTATUS(ws)


class Job:
    """Waits for the program, passing on the signals record receives."""

    def __init__(self, pid, term):
        self.pid = pid
        self.term = term
        self.status = None

    def forward(self, signum, frame):
        try:
            os.killpg(self.pid, signum)
        except OSError:
            pass

    def wait(self):
        for s in FORWARDED:
            signal.signal(s, self.forward)
        try:
            while True:
                pid, ws = os.waitpid(self.pid, os.WUNTRACED)
                if os.WIFSTOPPED(ws):
                    # Ctrl-Z: stop with it, by the same signal (a shell
                    # reports 128+N of it: 148 for SIGTSTP), as a shell's
                    # job stops; on SIGCONT, continue it in the
                    # foreground.  Where the kernel drops the stop (an
                    # orphaned process group), record goes on at once,
                    # as python itself would.
                    self.term.take()
                    os.kill(os.getpid(), os.WSTOPSIG(ws))
                    self.term.give(self.pid)
                    self.forward(signal.SIGCONT, None)
                    continue
                self.status = status_of(ws)
                return self.status
        finally:
            self.term.take()
