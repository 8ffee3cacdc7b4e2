# SPDX-License-Identifier: MIT
"""perf profiling of Python functions through libjitring.

Works on CPython >= 3.12, with or without the GIL, with no interpreter
patch: while active, every Python function runs through its own small
trampoline, described to perf in ``<dir>/jit-<pid>.dump`` as
``py::<qualname>:<filename>`` (the names CPython's ``-X perf`` uses)::

    perf record -k 1 -e cpu-clock --call-graph dwarf -- \\
        python -m jitring script.py args...
    perf inject --jit -i perf.data -o perf.jit.data
    perf report -i perf.jit.data

or from code::

    import jitring
    jitring.start()          # dir=None: $JITRING_DIR, else /tmp
    ...
    jitring.stop()

Importing the module leaves the GIL of a free-threaded build disabled.
"""

import os as _os
import sys as _sys
from . import _jitring
from ._jitring import flush, is_active, stats


# Under ``python -m jitring record`` ($JITRING_RECORD_PROCS set), the
# thread that runs jitring's own work (the .pth hook, the runner up to the
# program's first line, start(), stop()) carries OWN_NAME as its name
# meanwhile, so that the profile can leave those samples out
# (jitring.record.finish).
OWN_NAME = b"jitring-own"


_COMM = "/proc/thread-self/comm"


_own_name = None        # the thread's own name while it carries OWN_NAME


def _own_begin(attached=False):
    """Under record: name this thread OWN_NAME, keeping the name it had.
    @attached: in a process record --pid attached to, which has no
    $JITRING_RECORD_PROCS.  Returns whether it did (False: not under
    record, or named already)."""
    global _own_name
    if _own_name is not None or not (
            attached or _os.environ.get("JITRING_RECORD_PROCS")):
        return False
    try:
        fd = _os.open(_COMM, _os.O_RDWR | _os.O_CLOEXEC)
        try:
            name = _os.read(fd, 64).rstrip(b"\n")
            _os.write(fd, OWN_NAME)
        finally:
            _os.close(fd)
    except OSError:
        return False
    _own_name = name
    return True


def _own_end():
    """Give this thread back the name _own_begin() (or the .pth hook)
    found."""
    global _own_name
    name, _own_name = _own_name, None
    if name is None:
        return
    try:
        fd = _os.open(_COMM, _os.O_WRONLY | _os.O_CLOEXEC)
        try:
            _os.write(fd, name)
        finally:
            _os.close(fd)
    except OSError:
        pass


if "_jitring_comm" not in _sys.__dict__ and \
        getattr(_sys, "orig_argv", [])[1:3] == ["-m", "jitring"]:
    # record's runner started without the .pth hook (record
    # --no-children): its thread is jitring's from here.
    _own_begin()


__all__ = ["start", "stop", "is_active", "flush", "stats"]


# The .pth hook named the thread before it imported the package, and left
# the name it found here (taken once the extension has loaded: where it
# does not, in a subinterpreter, the hook puts the name back itself).
_own_name = _sys.__dict__.pop("_jitring_comm", _own_name)


# os._exit as it was when jitring was imported.  Kept for good: a
# reference to _exit_flushing taken during a session (``from os import
# _exit``) must still exit after stop(), from any thread.
_real_exit = _os._exit


def _exit_flushing(status):
    # os._exit() skips exit(3), so the library's exit-time flush never
    # runs: write what the rings still hold first (a fork child that ends
    # with os._exit, as multiprocessing's do, keeps its entries).  No
    # session: flush() does nothing.
    try:
        _jitring.flush()
    except Exception:
        pass
    _real_exit(status)


def start(dir=None, engine="rings", perf_map=False, ready_rings=0,
          ready_copies=0, release=False, trampoline_elf=None):
    """Start profiling: open ``jit-<pid>.dump`` in *dir*.

    *dir*: a directory (str, bytes or path-like); None means
    ``$JITRING_DIR``, else ``/tmp``.  It must stay writable and the dump
    must still exist when ``perf inject --jit`` runs.
    *engine*: ``"rings"`` (per-thread lock-free rings and a background
    flusher) or ``"mutex"`` (one lock around each copy's allocation and
    write: the design CPython's ``-X perf_jit`` uses, kept as a
    yardstick).
    *perf_map*: also write ``/tmp/perf-<pid>.map``.
    *ready_rings*, *ready_copies*: for a program that starts many threads
    at once, how many threads' rings and how many trampoline copies (about
    one per new code object) to keep ready; 0 keeps the library's
    defaults (64 rings, 4096 spare ones, 1,740,800 copies).  ValueError
    unless an int in [0, 2**32).
    *release*: at stop(), let go of the dump's descriptor and lock (kept
    until exit otherwise): for a dump in a folder of its own that no later
    start() continues, as ``record --pid`` makes one per window.
    *trampoline_elf*: back the trampolines with an ELF file in *dir*
    (``jitring-tramp-<pid>-<random>.so``) whose unwind tables perf reads
    itself, so that ``perf record --call-graph dwarf`` unwinds through
    Python frames with no ``perf inject`` (the dumps then name the
    frames by address); None means ``$JITRING_TRAMPOLINE_ELF`` is ``1``
    (what ``python -m jitring record`` sets in dwarf mode).  It holds for
    the process's life: the first start() decides.

    Raises RuntimeError if already active or if another eval-frame function
    (a debugger, ``-X perf``) is installed, OSError if the dump cannot be
    created.
    """
    marked = _own_begin()
    try:
        if trampoline_elf is None:
            trampoline_elf = \
                _os.environ.get("JITRING_TRAMPOLINE_ELF") == "1"
        _start(dir, engine, perf_map, ready_rings, ready_copies, release,
               trampoline_elf)
    finally:
        if marked:
            _own_end()


def _start(dir, engine, perf_map, ready_rings, ready_copies, release,
           trampoline_elf=False):
    if dir is not None and not _os.fspath(dir):
        raise ValueError("dir must name a directory, not %r" % (dir,))
    for name, v in (("ready_rings", ready_rings),
                    ("ready_copies", ready_copies)):
        if isinstance(v, bool) or not isinstance(v, int) \
                or not 0 <= v < 1 << 32:
            raise ValueError("%s must be an int in [0, 2**32), not %r"
                             % (name, v))
    _jitring.start(dir, engine, perf_map, ready_rings, ready_copies,
                   bool(release), bool(trampoline_elf))
    if _os._exit is _real_exit:
        _os._exit = _exit_flushing
    _note_process("start")


def stop():
    """Stop profiling and close the dump.  Returns True if it was active."""
    marked = _own_begin()
    try:
        was = _jitring.stop()
        if _os._exit is _exit_flushing:
            _os._exit = _real_exit
    finally:
        if marked:
            _own_end()
    return was


# (pid, list) of the lines _note_process() wrote: a fork child's pid
# differs, so it still notes itself.
_noted = set()


# JSON string escapes: the quote, the backslash, control characters
# (DEL too, as json.dumps writes it).
_JSON_ESC = {i: "\\u%04x" % i for i in list(range(32)) + [0x7f]}


_JSON_ESC.update({0x22: '\\"', 0x5c: "\\\\", 0x08: "\\b", 0x09: "\\t",
                  0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r"})


def _json_str(s):
    """@s as a JSON string, ASCII only (json.dumps' output, without
    importing json, re and enum into the profiled process): non-ASCII
    characters as \\uXXXX, those above U+FFFF as a surrogate pair (a lone
    surrogate as its own \\uXXXX, as json.dumps writes it)."""
    s = s.translate(_JSON_ESC)
    if not s.isascii():
        out = []
        for c in s:
            n = ord(c)
            if n < 0x80:
                out.append(c)
            elif n < 0x10000:
                out.append("\\u%04x" % n)
            else:
                n -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xd800 | n >> 10,
                                               0xdc00 | n & 0x3ff))
        s = "".join(out)
    return '"' + s + '"'


def _note_process(how, path=None):
    """Under ``python -m jitring record``: add this process to the
    recording's list (@path, else $JITRING_RECORD_PROCS), one JSON line
    appended with one write(2), so that the summary names it by its
    command line."""
    path = path or _os.environ.get("JITRING_RECORD_PROCS")
    if not path or (_os.getpid(), path) in _noted:
        return      # once a process (a restart is the same process)
    _noted.add((_os.getpid(), path))
    try:
        # The interpreter's own command line, not the process's: a
        # launcher that execs the interpreter through its loader (ld.so
        # --library-path ... python3.X) leaves its words in cmdline.
        argv = getattr(_sys, "orig_argv", None)
        if not argv:
            with open("/proc/self/cmdline", "rb") as f:
                argv = [a.decode(errors="replace")
                        for a in f.read().split(b"\0")[:-1]]
        line = '{"pid": %d, "ppid": %d, "how": %s, "argv": [%s]}\n' % (
            _os.getpid(), _os.getppid(), _json_str(how),
            ", ".join(_json_str(a) for a in argv))
        fd = _os.open(path, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT |
                      _os.O_CLOEXEC, 0o644)
        try:
            _os.write(fd, line.encode())
        finally:
            _os.close(fd)
    except Exception:
        pass


def _after_fork_child():
    # The library gives a fork child its own dump; name it too.
    if is_active():
        marked = _own_begin()
        _note_process("fork")
        if marked:
            _own_end()


def _before_fork():
    # CPython warns on os.fork() when /proc/self/stat counts more than one
    # thread: pause the flusher thread when the forking thread is the only
    # Python thread (with more, CPython warns anyway, and the pause could
    # wait for them to stop writing).  The C side checks /proc too.
    th = _sys.modules.get("threading")
    if th is not None and th.active_count() > 1:
        return
    _jitring._before_fork()


_os.register_at_fork(before=_before_fork, after_in_child=_after_fork_child)
