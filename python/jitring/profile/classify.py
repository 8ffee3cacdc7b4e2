# SPDX-License-Identifier: MIT
"""Which frames are the program's.

Every sample's frames are classified by kind (a Python frame, jitring's
own package or runner, the interpreter's glue between Python frames, its
eval loop): own_work() says whether a sample is jitring's own work (left
out of the profile: python/README.md, "What the profile leaves out"),
program_stack() gives the frames a user reads, root first, and
command_of() names a process by its Python command line."""

import functools
import operator
import os
import re


# The package's modules, at its top (those that run in the profiled
# program) and in its folders (record's, which a program profiled with
# JITRING_PROFILE=1 may be running): their frames are jitring's, never the
# program's.  The folders are check-pymodules.py's LAYERS.
OWN = re.compile(r"/jitring/((?:(?:common|profile|perf|wait|output|attach|"
                 r"record)/)?[A-Za-z_][A-Za-z0-9_]*\.py)$")


# The runner's frames (python -m jitring PROGRAM) that call the program:
# in a sample of the program, they are above its first frame.
RUNNER = ("<module>", "main", "run_script", "run_module")


# Names of threads at work for jitring: jitring.OWN_NAME (a thread while
# it starts or stops jitring, and the runner's until the program begins)
# and the library's flush, write and reaper threads.
OWN_THREADS = ("jitring-own", "jitring-flush", "jitring-write",
               "jitring-reaper")


# The function of the request record --pid has a target run
# (probe.REQUEST): a thread asked after jitring started (one that woke
# late) runs it inside the window.  sys.remote_exec runs the script's text
# as "<string>" (3.14, 3.15); its file is in record's runtime folder.
REQUEST_FUNC = "_jitring_request"


REQUEST_FILE = re.compile(r"^(<string>|/tmp/jitring-\d+/attach-\d+\.py)$")


# Pure, and called for every frame of every sample: cached.
@functools.lru_cache(maxsize=None)
def _package_frame(name):
    """For a Python frame of jitring's package, or of the attach request
    script, (qualname, module file); else None."""
    qual, _, fn = name[4:].partition(":")
    m = OWN.search(fn)
    if m:
        return qual, m.group(1)
    if qual == REQUEST_FUNC and REQUEST_FILE.match(fn):
        return qual, "attach-request"
    return None


def _runner_frame(where):
    return where is not None and where[1] == "__main__.py" and \
        where[0] in RUNNER


@functools.lru_cache(maxsize=None)
def _own_frame(name):
    """A Python frame of jitring's package (its runner, its at-exit stop)
    or of runpy."""
    fn = name[4:].partition(":")[2]
    return (_package_frame(name) is not None or
            fn.endswith("/runpy.py") or fn == "<frozen runpy>")


@functools.lru_cache(maxsize=None)
def _own_dso(dso):
    """jitring's extension (libjitring is linked into it) or library."""
    return os.path.basename(dso).startswith(("_jitring.", "libjitring"))


# A frame's kind for own_work() and program_stack(), as bits: every
# sample's frames are classified, the same few thousand frames again and
# again (_KIND caches each).
_PY = 1         # a Python frame


_OWN = 2        # ... of jitring's package or runpy (_own_frame())


_PKG = 4        # ... of jitring's package, not its runner's


_RUNNER = 8     # ... of jitring's runner (_runner_frame())


_GLUE = 16      # a native frame of the interpreter or jitring


_OWN_DSO = 32   # ... of jitring (_own_dso())


_EVAL = 64      # the interpreter's eval loop


_KIND = {}


def _kind(fr):
    s, d = fr
    k = 128
    if s.startswith("py::"):
        k |= _PY
        if _own_frame(s):
            k |= _OWN
        where = _package_frame(s)
        if _runner_frame(where):
            k |= _RUNNER
        elif where:
            k |= _PKG
    if _own_dso(d):
        k |= _OWN_DSO | _GLUE
    elif _interp_dso(d):
        k |= _GLUE
    if s == "_PyEval_EvalFrameDefault":
        k |= _EVAL
    _KIND[fr] = k
    return k


# The bits any of a list of kinds has (a loop in C: a stack has a hundred
# frames and more).
_any_bits = functools.partial(functools.reduce, operator.or_)


def _kinds(frames):
    ks = list(map(_KIND.get, frames))
    if None in ks:
        ks = [k or _kind(fr) for k, fr in zip(ks, frames)]
    return ks


def own_work(comm, frames, ks=None):
    """Whether a sample (@frames leaf first; @ks: _kinds(@frames) where
    the caller has them) is jitring's own work, not the program's:
    python/README.md, "What the profile leaves out"."""
    if comm in OWN_THREADS:
        return True
    if ks is None:
        ks = _kinds(frames)
    inner = None        # the innermost Python frame
    for i, k in enumerate(ks):
        if k & _PY:
            inner = i
            break
    if inner is None and comm[:1] == ":" and comm[1:].isdigit():
        # perf's name for a thread whose name it has not seen: record's
        # fork of the program, before it execs the interpreter.
        return True
    # jitring's native code below it (or anywhere, with no Python
    # frame): start, stop, flush, the hook's lookup of a function's copy.
    if any(k & _OWN_DSO for k in ks[:inner]):
        return True
    if inner is None:
        return False
    # A function of jitring's called by whatever (its at-exit stop, the
    # fork hooks), or the runner at work of its own.
    if _any_bits(ks[inner:]) & _PKG:
        return True
    return bool(ks[inner] & _RUNNER)


@functools.lru_cache(maxsize=None)
def _interp_dso(dso):
    base = os.path.basename(dso)
    return base.startswith(("python", "libpython"))


@functools.lru_cache(maxsize=None)
def label(sym, dso):
    """A frame's name: a Python function as jitring named it, a native
    one with its file's name (perf's "[unknown]", "[kernel]" as they
    are)."""
    if dso.startswith("[kernel"):
        return sym + " [kernel]"
    if sym.startswith("py::") or not dso or dso.startswith("["):
        return sym
    return "%s [%s]" % (sym, os.path.basename(dso))


def program_stack(frames, ks=None):
    """The frames a user reads, root first (see the module's doc); @ks:
    _kinds(@frames) where the caller has them."""
    root_first = frames[::-1]
    ks = _kinds(root_first) if ks is None else ks[::-1]
    py = [i for i, k in enumerate(ks) if k & _PY]
    user = [i for i in py if not ks[i] & _OWN]
    if not user:
        # No Python frame, or only the runner's (start-up): the native
        # frames, from below the runner's if any.
        start = py[-1] + 1 if py else 0
        return [label(s, d) for s, d in root_first[start:]] or \
            ["[interpreter start-up]"]
    first, last = user[0], py[-1]
    keep = []
    for i in range(first, len(root_first)):
        k = ks[i]
        if k & _PY:
            # runpy's frames are left out anywhere, as jitring's: they
            # are how a program's main module is run (python -m,
            # multiprocessing's spawn re-running it), not its work.
            if not k & _OWN:
                keep.append(root_first[i][0])
        elif i < last and k & _GLUE:
            continue            # the call machinery between Python frames
        elif k & _EVAL and ks[i - 1] & _PY:
            continue            # the Python frame's own body
        else:
            keep.append(label(*root_first[i]))
    return keep


def program_argv(argv):
    """@argv without jitring's runner: python -m jitring --dir D --engine
    E prog args -> python prog args."""
    if argv[1:3] != ["-m", "jitring"]:
        return argv
    i = 3
    while i + 1 < len(argv) and argv[i] in ("--dir", "--engine"):
        i += 2
    return argv[:1] + argv[i:]


def command_of(pid, comm, procs):
    """The command line shown for @pid, each control character escaped
    (jitring.common.text.escape())."""
    from jitring.common.text import escape
    r = procs.get(pid)
    if not r:
        # A Python process that never started jitring: its Python frames
        # have no names (the package is not in its interpreter, or
        # --no-children).
        return escape(comm) + (" (without jitring)"
                               if comm.startswith("python") else "")
    argv = r.get("argv")
    argv = program_argv([str(a) for a in argv]
                        if isinstance(argv, list) else [])
    cmd = escape(" ".join(os.path.basename(a) if i == 0 else
                          " ".join(a.split())
                          for i, a in enumerate(argv))) or escape(comm)
    if len(cmd) > 70:
        cmd = cmd[:67] + "..."
    if r.get("how") == "fork":
        cmd += " (fork of %s)" % r.get("ppid")
    return cmd
