# SPDX-License-Identifier: MIT
"""Synthetic samples for the profile step's tests (no perf).

A sample's frames are (symbol, dso) pairs, leaf first, as
jitring.perf.script.script() gives them: a Python function as jitring names
it ("py::qualname:/abs/path/file.py"), a native function with its file,
perf's "[unknown]".  The builders below make them; stack() makes a whole
thread's stack the way CPython 3.13 under jitring's eval hook looks in
perf: each Python frame is a trampoline frame with the eval loop that
runs its body under it, and the interpreter's call machinery between it
and its caller's eval loop (with the hook, no Python call is inlined).
"""

from typing import NamedTuple

from jitring.profile.model import Sample

# The interpreter and the files around it, as perf names them.
PYTHON = "/usr/bin/python3.13t"
LIBPYTHON = "/usr/lib/x86_64-linux-gnu/libpython3.13t.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
KERNEL = "[kernel.kallsyms]"
LIB = "/usr/lib/python3.13t"
EXT = LIB + "/site-packages/_fast.cpython-313t-x86_64-linux-gnu.so"
# sid's stripped 3.15: its frames are "[unknown]" in this file.
PYTHON315 = "/usr/bin/python3.15"

# jitring's package, its extension (libjitring linked in) and library.
PKG = LIB + "/site-packages/jitring"
JITRING_SO = PKG + "/_jitring.cpython-313t-x86_64-linux-gnu.so"
LIBJITRING = "/usr/lib/x86_64-linux-gnu/libjitring.so.1"

# The program's folder.
APP = "/app"

UNKNOWN = ("[unknown]", "[unknown]")


def py(qual, path=APP + "/a.py", dso=""):
    """A Python frame as jitring names it.  Its dso is whatever perf
    gives the trampoline's code (a jitted-*.so after inject, none where
    named from the dump): it plays no part."""
    return ("py::%s:%s" % (qual, path), dso)


def native(sym, dso=PYTHON):
    """A native frame, of the interpreter unless @dso says."""
    return (sym, dso)


def kernel(sym):
    return (sym, KERNEL)


def own_py(qual, module="__init__.py"):
    """A Python frame of jitring's package (@module in it)."""
    return py(qual, PKG + "/" + module)


def runner(qual):
    """A frame of the runner (python -m jitring PROGRAM): <module>,
    main, run_script or run_module of the package's __main__.py."""
    return own_py(qual, "__main__.py")


def runpy(qual, frozen=True):
    """A frame of runpy, frozen as 3.11+ has it, or from its file."""
    return py(qual, "<frozen runpy>" if frozen else LIB + "/runpy.py")


def own_native(sym, dso=JITRING_SO):
    """A native frame of jitring's extension (or of libjitring)."""
    return (sym, dso)


def request(path="<string>"):
    """The frame of record --pid's request script in the service
    (sys.remote_exec runs its text as "<string>")."""
    return py("_jitring_request", path)


# A Python frame's body: the eval loop its trampoline calls.
EVAL = native("_PyEval_EvalFrameDefault")
# A Python call from the caller's eval loop to the callee's trampoline
# (leaf first: the hook chose the trampoline and tail-called it).
CALL = (native("_PyEval_Vector"), native("_PyFunction_Vectorcall"))
# The same where jitring's hook made the callee's copy first (its slow
# path calls the trampoline: jitring's frame between two Python frames).
CALL_NEW = (native("_PyEval_Vector"), own_native("jr_eval_slow"),
            native("_PyFunction_Vectorcall"))
# A call through a C extension that calls back (the program's map-like
# function in _fast.so).
CALL_EXT = (native("_PyEval_Vector"), native("PyObject_Vectorcall"),
            native("fast_map", EXT), native("cfunction_vectorcall_O"))
# The runner's exec() of the program's code.
EXEC = (native("_PyEval_Vector"), native("PyEval_EvalCode"),
        native("builtin_exec_impl"), native("builtin_exec"),
        native("cfunction_vectorcall_FASTCALL_KEYWORDS"))

# Below the outermost Python frame, leaf first: the main thread's start
# (python runs a script) ...
MAIN = (native("_PyEval_Vector"), native("PyEval_EvalCode"),
        native("run_eval_code_obj"), native("run_mod"),
        native("pyrun_file"), native("_PyRun_SimpleFileObject"),
        native("_PyRun_AnyFileObject"), native("pymain_run_file_obj"),
        native("pymain_run_python"), native("Py_RunMain"),
        native("pymain_main"), native("Py_BytesMain"), native("main"),
        native("__libc_start_call_main", LIBC),
        native("__libc_start_main_impl", LIBC), native("_start"))
# ... and a thread's (threading's bootstrap called by the interpreter's
# thread entry).
THREAD = (native("_PyEval_Vector"), native("_PyFunction_Vectorcall"),
          native("_PyObject_VectorcallTstate"), native("context_run"),
          native("thread_run"), native("pythread_wrapper"),
          native("start_thread", LIBC), native("clone3", LIBC))
# The interpreter's start-up, before any Python frame (leaf first).
STARTUP = (native("init_importlib"), native("pycore_interp_init"),
           native("Py_InitializeFromConfig"), native("pymain_init"),
           native("pymain_main"), native("Py_BytesMain"), native("main"),
           native("__libc_start_call_main", LIBC),
           native("__libc_start_main_impl", LIBC), native("_start"))
# Its exit, after the last Python frame (leaf first).
FINI = (native("_PyGC_Fini"), native("finalize_modules"),
        native("Py_FinalizeEx"), native("Py_RunMain"),
        native("pymain_main"), native("Py_BytesMain"), native("main"),
        native("__libc_start_call_main", LIBC),
        native("__libc_start_main_impl", LIBC), native("_start"))
# A thread asleep in time.sleep() (leaf first, to the eval loop's call).
SLEEP = (kernel("schedule"), kernel("do_nanosleep"),
         kernel("hrtimer_nanosleep"), kernel("__x64_sys_clock_nanosleep"),
         kernel("do_syscall_64"), kernel("entry_SYSCALL_64_after_hwframe"),
         native("clock_nanosleep", LIBC), native("pysleep"),
         native("time_sleep"), native("cfunction_vectorcall_O"))

# threading's frames above a thread's target, root first.
BOOTSTRAP = (py("Thread._bootstrap", LIB + "/threading.py"),
             py("Thread._bootstrap_inner", LIB + "/threading.py"),
             py("Thread.run", LIB + "/threading.py"))
# The runner's frames above the program's <module>, root first
# (python -m jitring PROGRAM, the runner run by runpy).
RUNNER = (runpy("_run_module_as_main"), runpy("_run_code"),
          runner("<module>"), runner("main"), runner("run_script"))


class Call(NamedTuple):
    """A Python function of stack()'s list called through @via (leaf
    first) from its caller, not through CALL."""
    frame: tuple
    via: tuple


def stack(funcs, leaf=(), start=MAIN):
    """The frames, leaf first, of a thread in @funcs (root first: each a
    Python frame, a Call, or None for a frame that was running before
    jitring started: it has no trampoline, and its eval loop runs the
    frames it called then, inlined).  @leaf: the native frames (leaf
    first) under the innermost function's eval loop; @start: the
    thread's first frames, below the outermost function."""
    frames = list(leaf)
    bare = False        # the frame before is an unnamed one's eval loop
    for i, f in enumerate(reversed(funcs)):
        if f is None:
            if not bare:
                frames.append(EVAL)
            bare = True
            continue
        call = f if isinstance(f, Call) else Call(f, CALL)
        if not bare:
            frames.append(EVAL)
        frames.append(call.frame)
        # The outermost function's call from the thread's start is in
        # @start (its first frames).
        if i < len(funcs) - 1:
            frames.extend(call.via)
        bare = False
    return tuple(frames) + tuple(start)


def runner_stack(funcs, leaf=()):
    """stack() of the program's @funcs (root first, from its <module>)
    run by `python -m jitring PROGRAM`: the runner and runpy above it,
    the runner's exec() of the program's code between them."""
    funcs = list(funcs)
    if funcs and not isinstance(funcs[0], Call):
        funcs[0] = Call(funcs[0], EXEC)
    return stack(list(RUNNER) + funcs, leaf)


def cut_at(frames, n):
    """@frames as perf keeps them at a limit of @n: the leaf's @n."""
    return tuple(frames[:n])


def samples(frames, n=1, pid=42, comm="python3.13t", tid=None, time=1000,
            event="cpu-clock"):
    """@n samples of one stack @frames (leaf first), a tuple shared by
    them as script() shares it, 1 ns apart from @time."""
    frames = tuple(frames)
    return [Sample(pid, comm, frames, pid if tid is None else tid,
                   time + i, event) for i in range(n)]
