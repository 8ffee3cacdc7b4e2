# SPDX-License-Identifier: MIT
"""record's output folder (-o): its default name, making it, what
``--force`` may clear (only the files jitring listed in its manifest), and
the refusal of a folder others can write."""

import os
import sys
import time

from jitring.common.errors import RecordError
from jitring.common.folder import GROWN, MANIFEST, NAMES, claimed


# ---- the folder --------------------------------------------------------
def clear(path, names):
    """Remove @names (the folder's manifest: files record or report
    wrote) from @path, then the manifest: each only where it is a regular
    file; a symlink or anything else in its place is left alone."""
    import stat
    for n in sorted(names) + [MANIFEST]:
        f = os.path.join(path, n)
        try:
            st = os.lstat(f)
            if stat.S_ISREG(st.st_mode):
                os.unlink(f)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise RecordError("cannot remove the earlier recording's "
                              "%s: %s" % (f, e.strerror))


def default_out():
    base = "jitring-record-" + time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = os.path.abspath(base if not n else "%s-%d" % (base, n))
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise RecordError("cannot make the output folder %s: %s"
                              % (path, e.strerror))
    raise RecordError("no free name for the output folder %s-N" % base)


def out_dir(path, force):
    """The recording's folder: a new one, an empty one, or one whose
    manifest lists all it holds (an earlier recording, whose files are
    removed); with --force, one that holds the user's files too, which
    stay (all but the manifest's)."""
    if path is None:
        return default_out()
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
        names = os.listdir(path)
    except OSError as e:
        raise RecordError("cannot use %s as the output folder: %s"
                          % (path, e.strerror))
    if not os.access(path, os.W_OK | os.X_OK):
        raise RecordError("cannot write into the output folder %s"
                          % path)
    has_manifest = MANIFEST in names
    mine = claimed(path) if has_manifest else set()
    foreign = [n for n in names if n not in mine and
               n != MANIFEST]
    if foreign and not force:
        if not has_manifest:
            raise RecordError("%s is not empty and holds no jitring "
                              "recording; choose another with -o, or "
                              "--force" % path)
        raise RecordError("%s holds files of its own (%s); choose another "
                          "with -o, or --force" % (path, sorted(foreign)[0]))
    clash = sorted(n for n in foreign if n in NAMES or
                   GROWN.match(n))
    if clash:
        raise RecordError("%s holds %s, which record did not write and "
                          "would replace; move it, or choose another "
                          "folder with -o" % (path, clash[0]))
    clear(path, mine)
    return path


# ---- the program -------------------------------------------------------
def missing_target(target):
    """Where python itself would refuse the program (no such script, no
    such top-level module), the argv that makes it say so: record then
    runs that, unrecorded, for python's own message and status."""
    if target[0] == "-m":
        import importlib.util
        top = target[1].split(".", 1)[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else [sys.executable, "-m", target[1]]
    if not os.path.exists(target[0]):
        return [sys.executable, target[0]]
    return None


def unsafe_folder(path):
    """Why another user could change @path (the -o folder, there or to
    be made) under record, or None: record and the program or target
    write there by name, so every folder on the way must be this user's
    or root's, and writable by no one else (one above it may be shared if
    sticky, as /tmp is).  Checked for record --pid, and for root's
    record PROGRAM."""
    import pwd
    import stat
    euid, egid = os.geteuid(), os.getegid()
    full = os.path.realpath(path)
    d = "/"
    for part in [""] + full.strip("/").split("/"):
        d = os.path.join(d, part)
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return None         # record makes the rest
        except OSError as e:
            return "cannot check %s: %s" % (d, e.strerror)
        shared = st.st_mode & 0o002 or \
            (st.st_mode & 0o020 and st.st_gid != egid)
        if st.st_uid not in (0, euid):
            try:
                who = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                who = "uid %d" % st.st_uid
            why = "is owned by %s" % who
        elif shared and (d == full or not st.st_mode & stat.S_ISVTX):
            why = "is writable by other users"
        else:
            continue
        return ("the output folder %s cannot be used: %s %s, who could "
                "swap the files record writes there; choose one "
                "only you can write (-o)" % (path, d, why))
    return None
