# SPDX-License-Identifier: MIT
"""The tables record and report print: samples per process, then the
hottest Python functions by total and by self, file names made relative
to the standard library, site-packages or the program's folder."""

import os
import re

from jitring.output.writer import Writer


# The standard library and site-packages (Debian's dist-packages for
# every 3.X: /usr/lib/python3/dist-packages).
LIBDIR = re.compile(r"^.*/lib/python3(?:\.\d+t?)?/"
                    r"(?:(?:site|dist)-packages/)?")


def fmt_name(name, cwd=None):
    """A table's name for a function: qualname:file, the file relative to
    the standard library, site-packages or the program's folder (@cwd: a
    folder, or program_dirs()'s, the first that holds the file)."""
    if not name.startswith("py::"):
        return name
    qual, _, fn = name[4:].partition(":")
    short = LIBDIR.sub("", fn)
    if short == fn and cwd:
        for d in (cwd,) if isinstance(cwd, str) else cwd:
            d = d.rstrip("/")
            if d and fn.startswith(d + "/"):
                short = fn[len(d) + 1:]
                break
    return "%s:%s" % (qual, short)


def program_dirs(meta):
    """The folders the tables give file names relative to, the most
    specific first: a script's folder as python names the script (its
    path joined to the working folder, not resolved) and as the modules
    beside it are found (resolved: sys.path[0]), whether the script was
    given by a relative or an absolute path; then the working folder
    (python -m's sys.path[0]).  record --pid: the working folder."""
    cwd = meta.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return ()
    cmd = meta.get("command") or []
    dirs = []
    if cmd and isinstance(cmd[0], str) and cmd[0] != "-m" and \
            not meta.get("attached"):
        path = os.path.join(cwd, cmd[0])
        dirs = [os.path.dirname(path),
                os.path.dirname(os.path.realpath(path))]
    return tuple(dirs + [cwd])


# The tables' line for the samples with no Python frame on their stack.
NO_PYTHON = ("(no Python frame: the interpreter's start-up and exit, "
             "threads in native code)")


class Tables(Writer):
    """The tables on stdout: the processes, then the hottest Python
    functions by total and by self; the samples with no Python frame
    (no_python()) are the last line of each functions' table, so that
    the self column adds up."""
    name = "tables"

    def write(self, profile):
        meta, total, top = profile.meta, profile.total, profile.top
        per, rows, nopy = profile.processes, profile.functions, \
            profile.no_python
        print()
        if not total:
            print("jitring record: no samples (did the program run long "
                  "enough?)")
            return
        print("%d samples of %s at %s Hz in %d process%s:"
              % (total, meta.event, meta.freq, len(per),
                 "" if len(per) == 1 else "es"))
        print("%8s %8s  %s" % ("pid", "samples", "command"))
        for r in per[:max(top, 8)]:
            print("%8d %7.1f%%  %s" % (r.pid, 100.0 * r.samples / total,
                                       r.command))
        if len(per) > max(top, 8):
            print("%8s %8s  (%d more in %s)"
                  % ("", "", len(per) - max(top, 8),
                     os.path.join(profile.out, "stacks.folded")))
        if not rows:
            print("\nno sample has a Python function on its stack")
            return
        by_total = sorted(rows, key=lambda r: (-r.total, -r.self,
                                               r.name))[:top]
        by_self = sorted(rows, key=lambda r: (-r.self, -r.total,
                                              r.name))[:top]
        by_self = [r for r in by_self if r.self]
        dirs = program_dirs(meta)
        for title, view in (("Hottest Python functions by total (the "
                             "function and all it calls; share of all "
                             "samples):", by_total),
                            ("By self (the innermost Python function; "
                             "native code it calls counts to it):",
                             by_self)):
            print("\n" + title)
            print("%8s %8s  %s" % ("total", "self", "function"))
            for r in view:
                print("%7.1f%% %7.1f%%  %s"
                      % (100.0 * r.total / total, 100.0 * r.self / total,
                         fmt_name(r.name, dirs)))
            if nopy:
                share = 100.0 * nopy / total
                print("%7.1f%% %7.1f%%  %s" % (share, share, NO_PYTHON))
