# SPDX-License-Identifier: MIT
"""record --pid, record's side: what a process is (probe()), whether and
how record can ask it to start jitring (route()), and the request script
a target runs (REQUEST).  The target's side is jitring._target."""

import os
import sys

from jitring._target import STANDBY_SIGNAL
from jitring.common.errors import AttachError


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
        from jitring._target import target_request
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
