# SPDX-License-Identifier: MIT
"""Profiling from interpreter start, in every process: $JITRING_PROFILE.

Imported by jitring-autostart.pth (installed into site-packages with the
package) when $JITRING_PROFILE is set to anything but "" or "0", so every
Python process that inherits the variable -- subprocesses, multiprocessing
spawn and forkserver children, gunicorn workers, pytest -- starts jitring
before its first line, as PYTHONPERFSUPPORT=1 does for -X perf.  The dump
goes to $JITRING_DIR, else /tmp; a fork child gets its own dump from the
library; record's runner (``python -m jitring PROGRAM``) starts it
itself, with its options.  Under record, the thread carries jitring's
name (jitring.OWN_NAME) from the .pth line on while jitring starts (in
the runner, until the program begins).  A process that cannot start it
(another eval-frame tool, a directory that does not exist) says why on
stderr once and runs unprofiled.  JITRING_PROFILE=standby starts nothing: it sets the handler
that ``python -m jitring record --pid`` wakes (jitring._target), for
interpreters without sys.remote_exec.  A subinterpreter (which runs site, and so this hook, too)
stays silent: jitring profiles the main interpreter only.  Unset, the
.pth line costs one dictionary lookup.

Dumps in /tmp: with $JITRING_DIR unset, a starting process removes the
dumps (and the jitted-<pid>-<n>.so images perf inject made from them) in
/tmp that belong to this user, whose process has exited, and that were
last written more than PRUNE_AGE seconds ago: a day to run perf inject,
then they go.  The scan runs at most once per PRUNE_EVERY seconds per
user (a stamp file, /tmp/.jitring-prune-<uid>).  A directory named in
$JITRING_DIR is the user's and is never pruned.
"""

import os
import sys
import time


PRUNE_AGE = 24 * 3600


PRUNE_EVERY = 3600


def _subinterpreter():
    for name in ("_interpreters", "_xxsubinterpreters"):
        try:
            m = __import__(name)
            cur = m.get_current()
        except Exception:
            continue
        return int(cur[0] if isinstance(cur, tuple) else cur) != 0
    return False


def _dead(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def _pid_of(name):
    """The pid in jit-<pid>.dump or jitted-<pid>-<n>.so, else None."""
    if name.startswith("jit-") and name.endswith(".dump"):
        s = name[4:-5]
    elif name.startswith("jitted-") and name.endswith(".so"):
        s = name[7:-3].split("-", 1)[0]
    else:
        return None
    return int(s) if s.isdigit() else None


def prune(d, now=None, age=PRUNE_AGE):
    """Remove, in @d, this user's dumps and images of exited processes
    last written more than @age seconds before @now.  Returns how many."""
    now = time.time() if now is None else now
    uid = os.getuid()
    gone = 0
    try:
        it = os.scandir(d)
    except OSError:
        return 0
    dead = {}
    with it:
        for e in it:
            pid = _pid_of(e.name)
            if pid is None:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid != uid or now - st.st_mtime < age:
                continue
            if pid not in dead:
                dead[pid] = _dead(pid)
            if dead[pid]:
                try:
                    os.unlink(os.path.join(d, e.name))
                    gone += 1
                except OSError:
                    pass
    return gone


def _prune_tmp():
    stamp = "/tmp/.jitring-prune-%d" % os.getuid()
    now = time.time()
    try:
        if now - os.stat(stamp).st_mtime < PRUNE_EVERY:
            return
    except OSError:
        pass
    try:
        fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW |
                     os.O_CLOEXEC, 0o600)
        os.utime(fd)
        os.close(fd)
    except OSError:
        return
    prune("/tmp", now)


def _runner():
    """Whether this process is record's runner, ``python -m jitring ...
    PROGRAM``: it starts jitring with its own options, and names the
    thread back when the program begins (jitring.__main__)."""
    argv = getattr(sys, "orig_argv", [])
    return argv[1:3] == ["-m", "jitring"] and \
        argv[3:4] not in (["record"], ["report"], ["check"])


def _autostart():
    flag = os.environ.get("JITRING_PROFILE", "")
    if flag in ("", "0"):
        return
    import jitring
    if flag != "standby" and _runner():
        return
    try:
        _begin(flag)
    finally:
        # The name the .pth hook gave the thread (under record) while
        # jitring started.
        jitring._own_end()


def _begin(flag):
    if _subinterpreter():
        return
    if flag == "standby":
        # No hook, no dump: a signal handler that record --pid wakes.
        try:
            from jitring._target import standby
            standby()
        except Exception as e:
            sys.stderr.write("jitring: JITRING_PROFILE=standby but the "
                             "standby handler was not set: %s\n" % e)
        return
    try:
        import jitring
        if jitring.is_active():
            return
        if not os.environ.get("JITRING_DIR"):
            _prune_tmp()
        jitring.start()
    except Exception as e:      # never stop the program itself
        sys.stderr.write("jitring: JITRING_PROFILE is set but profiling "
                         "did not start: %s\n" % e)
        return
    import atexit
    atexit.register(jitring.stop)


_autostart()
