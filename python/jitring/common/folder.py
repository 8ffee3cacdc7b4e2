# SPDX-License-Identifier: MIT
"""A recording's folder: the names record and report write under, its
metadata (META), its processes (PROCS), record --pid's running frames
(RUNNING), the manifest of the files jitring wrote there (MANIFEST: the
only ones ``record --force`` removes) and the lock two finishings take in
turn (LOCK).  Every step that writes in the folder claims its names here
first."""

import errno
import fcntl
import json
import os
import re
import sys

from jitring.common.errors import RecordError
from jitring.common.meta import Meta


META = "jitring-record.json"


PROCS = "processes.jsonl"


# record --pid: the Python frames that ran throughout the window, per
# thread (jitring._running._running_threads(), checked: running()).
RUNNING = "running-frames.json"


# Outputs that finish() makes again (a partial one is removed first).
OUTPUTS = ("perf.jit.data", "perf.script.txt", "stacks.folded",
           "flame.html", "perf-inject.log", "stacks-wait.folded",
           "flame-wait.html")


# The folder's list of the files record and report wrote in it (the only
# ones --force removes), and the lock two finishings take in turn.
MANIFEST = ".jitring-files"


LOCK = ".jitring-lock"


# The names record and report write under (a user's file of one of them
# would be overwritten); besides, the dumps and images of GROWN.
NAMES = (META, PROCS, RUNNING, MANIFEST, LOCK, "perf.data",
         "perf-record.log", "perf-script.log") + OUTPUTS


GROWN = re.compile(r"^(jit-\d+\.dump(\.full)?|jitted-\d+-\d+\.so|"
                   r"jitring-tramp-\d+-[0-9a-f]+\.so|"
                   + re.escape(PROCS) + r")$")


# What a full disk raises: the recording is kept, the finishing waits.
FULL = (errno.ENOSPC, errno.EDQUOT)


def claimed(out):
    """The names the folder's manifest lists (plain names: one with a
    slash is not record's)."""
    try:
        with open(os.path.join(out, MANIFEST), errors="replace") as f:
            return {n for n in f.read().split("\n")
                    if n and "/" not in n and n not in (".", "..")}
    except OSError:
        return set()


def claim(out, names):
    """Add @names to the folder's manifest before they are written: a
    listed name never written costs nothing, a file written unlisted
    would be kept as the user's."""
    new = sorted(set(names) - claimed(out))
    if not new:
        return
    fd = os.open(os.path.join(out, MANIFEST), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, "".join(n + "\n" for n in new).encode())
    finally:
        os.close(fd)


def claim_grown(out, before):
    """Claim the dumps, images and processes.jsonl that appeared in the
    folder since @before (its names then): the program's processes and
    perf inject write them."""
    try:
        names = os.listdir(out)
    except OSError:
        return
    claim(out, [n for n in names if n not in before and GROWN.match(n)])


def no_space(out):
    """Whether the folder's file system has no block left for us (one
    that counts no blocks at all, as some FUSE ones do, is not full)."""
    try:
        st = os.statvfs(out)
    except OSError:
        return False
    return st.f_blocks > 0 and \
        (st.f_bfree if os.geteuid() == 0 else st.f_bavail) == 0


def write_json(out, name, data, indent=None):
    """@data as the file @name of the folder @out, whole or not at all
    (written beside, then renamed over it; never through a link)."""
    claim(out, [name])
    tmp = os.path.join(out, name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                     os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=indent)
        os.replace(tmp, os.path.join(out, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_meta(out, meta):
    write_json(out, META, meta, indent=1)


def checked_running(data):
    """The service's list of the frames that ran throughout the window
    ({"pid", "threads": [{"tid", "frames": [[qualname, file, line],
    ...]}]}, outermost frame first) with what is not of that form left
    out, bounded as the target bounds it; None where nothing is left."""
    from jitring._running import RUNNING_DEPTH, RUNNING_THREADS
    if not isinstance(data, dict) or not isinstance(data.get("threads"),
                                                    list):
        return None
    threads = []
    for th in data["threads"][:RUNNING_THREADS]:
        if not isinstance(th, dict):
            continue
        tid, frames = th.get("tid"), th.get("frames")
        if type(tid) is not int or tid <= 0 or \
                not isinstance(frames, list):
            continue
        ok = []
        for fr in frames[:RUNNING_DEPTH]:
            if not (isinstance(fr, list) and len(fr) == 3 and
                    isinstance(fr[0], str) and isinstance(fr[1], str) and
                    type(fr[2]) is int):
                break
            ok.append(fr)
        if ok:
            threads.append({"tid": tid, "frames": ok})
    if not threads or type(data.get("pid")) is not int:
        return None
    return {"pid": data["pid"], "threads": threads}


def write_running(out, data):
    """@data (checked_running()) as the recording's RUNNING."""
    write_json(out, RUNNING, data)


def running(out, pid):
    """{tid: (frame names, outermost first)} of process @pid's threads
    from the recording's RUNNING, the names as script() gives frames
    ("py::qualname:file", escaped); {} where there is none."""
    from jitring.common.text import escape
    try:
        with open(os.path.join(out, RUNNING), errors="replace") as f:
            data = checked_running(json.loads(f.read(64 << 20)))
    except (OSError, ValueError):
        return {}
    if data is None or data["pid"] != pid:
        return {}
    return {th["tid"]: tuple(escape("py::%s:%s" % (q, fn))
                             for q, fn, _ in th["frames"])
            for th in data["threads"]}


def read_meta(out):
    """The recording's metadata (a Meta); RecordError where the folder
    has none."""
    try:
        with open(os.path.join(out, META)) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise RecordError("%s is not a jitring recording (%s: %s)"
                          % (out, META, getattr(e, "strerror", None) or e))
    if not isinstance(meta, dict):
        raise RecordError("%s is not a jitring recording (%s holds no "
                          "object)" % (out, META))
    return Meta(meta)


def injected(out):
    """Whether perf.jit.data is complete and perf.data gone (inject
    replaces it once it has succeeded)."""
    return (not os.path.exists(os.path.join(out, "perf.data")) and
            os.path.exists(os.path.join(out, "perf.jit.data")))


def processes(out):
    """{pid: (command, how)} of the Python processes jitring profiled."""
    procs = {}
    try:
        with open(os.path.join(out, PROCS), errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    procs[int(r["pid"])] = r
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return procs


def lock(out, prog):
    """Hold the folder's lock (released when the returned descriptor is
    closed): a second finishing of one recording waits for the first,
    then finishes from what it left."""
    claim(out, [LOCK])
    fd = os.open(os.path.join(out, LOCK), os.O_RDWR | os.O_CREAT |
                 os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write("jitring %s: waiting for the other finishing "
                             "of %s\n" % (prog, out))
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


SCRIPT_PART = re.compile(r"^(perf\.script\.txt\.\d+|perf-script-\d+\.log)$")


def drop_partial(out):
    """Remove the outputs a stopped finishing may have left half
    written."""
    done = injected(out)
    for name in os.listdir(out):
        if SCRIPT_PART.match(name):
            try:
                os.unlink(os.path.join(out, name))
            except OSError:
                pass
    for name in OUTPUTS:
        if done and name == "perf.jit.data":
            continue        # the recording itself now
        try:
            os.unlink(os.path.join(out, name))
        except OSError:
            pass
    return done
