# SPDX-License-Identifier: MIT
"""The profile step of record's finishing on synthetic samples (no perf):
what jitring.record.finish makes of the samples perf script gave, built by
mocks.py as CPython 3.13's stacks look under jitring.

  own_*           own_work() on each rule of python/README.md's "What the
                  profile leaves out": jitring's threads and perf's
                  ":PID" (threads), its native code under the innermost
                  Python frame or anywhere without one (native), a frame
                  of its package or the runner's innermost (package), the
                  attach request (attach); the program's stacks,
                  start-up and exit kept (kept)
  program_stack   the interpreter's frames between Python frames and the
                  innermost one's eval loop dropped, native frames under
                  it kept in order, the runner's and runpy's frames above
                  the program dropped; _start: stacks with no frame of
                  the program (start-up's native frames)
  is_cut          a stack is whole where it reaches a thread's start or
                  its outermost Python frame is a module's body or
                  threading's bootstrap; cut_note: the note's lines
  with_running    record --pid's frames that ran throughout the window
                  (running()) at the root of a thread's samples, [stack
                  cut] between them and a cut stack, a sample with no
                  named frame under the innermost of them
  summarize       per process, self and total per function, the folded
                  stacks under "command [pid]", the cut statistics; with
                  --pid's running frames (_outer); command_of: the
                  command line of processes.jsonl's records
  window          in_window(), window_on()
  folded_stack, no_python, fmt_name, program_dirs
"""

import json
import os

import jrtest
from mocks import (APP, BOOTSTRAP, CALL_EXT, CALL_NEW, EVAL, EXEC, EXT, FINI,
                   LIB, LIBC, LIBJITRING, MAIN, PYTHON315, RUNNER, SLEEP,
                   STARTUP, THREAD, UNKNOWN, Call, cut_at, kernel, native,
                   own_native, own_py, py, request, runner, runner_stack,
                   runpy, samples, stack)
from jitring.common.folder import processes, running
from jitring.output.tables import fmt_name, program_dirs
from jitring.profile.aggregate import folded_stack, summarize
from jitring.profile.classify import command_of, own_work, program_stack
from jitring.profile.cuts import CUT, STACK_MAX, cut_note, is_cut
from jitring.profile.model import no_python
from jitring.profile.window import in_window, window_on, with_running

# The program's functions.
MOD = py("<module>")
MAIN_F = py("main")
WORK = py("work")
HELPER = py("helper")
REC = py("rec")
CHILD = py("child_work")
N = {f: f[0] for f in (MOD, MAIN_F, WORK, HELPER, REC, CHILD)}

# STARTUP's frames as program_stack() names them, root first.
STARTUP_LABELS = ["_start [python3.13t]",
                  "__libc_start_main_impl [libc.so.6]",
                  "__libc_start_call_main [libc.so.6]",
                  "main [python3.13t]", "Py_BytesMain [python3.13t]",
                  "pymain_main [python3.13t]", "pymain_init [python3.13t]",
                  "Py_InitializeFromConfig [python3.13t]",
                  "pycore_interp_init [python3.13t]",
                  "init_importlib [python3.13t]"]
# SLEEP's, root first.
SLEEP_LABELS = ["cfunction_vectorcall_O [python3.13t]",
                "time_sleep [python3.13t]", "pysleep [python3.13t]",
                "clock_nanosleep [libc.so.6]",
                "entry_SYSCALL_64_after_hwframe [kernel]",
                "do_syscall_64 [kernel]",
                "__x64_sys_clock_nanosleep [kernel]",
                "hrtimer_nanosleep [kernel]", "do_nanosleep [kernel]",
                "schedule [kernel]"]
EXT_LABEL = "fast_sum [_fast.cpython-313t-x86_64-linux-gnu.so]"


def test_own_threads(t):
    prog = stack([MOD, MAIN_F, WORK])
    t.check(not own_work("python3.13t", prog),
            "own_work: the program's stack is the program's")
    # A thread named jitring-own: start-up under the hook, start(),
    # stop(), the runner until the program's first line.
    t.check(own_work("jitring-own", prog) and
            own_work("jitring-own", STARTUP),
            "own_work: any sample of a thread named jitring-own")
    # The library's threads, whatever their frames show.
    futex = (kernel("schedule"),
             native("__futex_abstimed_wait_common", LIBC),
             native("start_thread", LIBC), native("clone3", LIBC))
    for comm in ("jitring-flush", "jitring-write", "jitring-reaper"):
        t.check(own_work(comm, futex), "own_work: thread %s" % comm)
    for comm in ("python3.13t", "jitring-worker", "jitring", "Thread-1"):
        t.check(not own_work(comm, futex), "own_work: a thread named "
                "%r is the program's (only the library's names)" % comm)
    # perf's ":PID": record's fork of the program before it execs the
    # interpreter (no Python frame: record's own are not named).
    posix = LIB + "/lib-dynload/_posixsubprocess.cpython-313t.so"
    forked = (native("execve", LIBC), native("child_exec", posix),
              native("subprocess_fork_exec", posix),
              native("cfunction_vectorcall_FASTCALL"), EVAL) + MAIN
    t.check(own_work(":4242", forked) and own_work(":4242", ()),
            "own_work: a thread perf names :PID with no Python frame")
    t.check(not own_work("python3.13t", forked) and
            not own_work(":4242", prog) and not own_work(":", forked) and
            not own_work(":42x", forked),
            "own_work: :PID with a Python frame, or a name not :DIGITS, "
            "is the program's")


def test_own_native(t):
    # jitring's native code below the innermost Python frame: the hook
    # making a function's copy, jitring.flush() (a C function).
    copying = stack([MOD, WORK], leaf=(
        own_native("code_copy"), own_native("jr_eval_slow"),
        native("_PyEval_Vector"), native("_PyFunction_Vectorcall")))
    flushing = stack([MOD, WORK], leaf=(
        own_native("ring_flush", LIBJITRING), own_native("jr_flush"),
        native("cfunction_vectorcall_NOARGS")))
    t.check(own_work("python3.13t", copying) and
            own_work("python3.13t", flushing),
            "own_work: jitring's extension or libjitring below the "
            "innermost Python frame")
    # ... or anywhere in a stack with no Python frame.
    writer = (kernel("schedule"), own_native("writer_loop", LIBJITRING),
              native("start_thread", LIBC), native("clone3", LIBC))
    starting = (native("PyObject_Malloc"), own_native("jr_start"),
                native("cfunction_call"), EVAL) + MAIN
    t.check(own_work("python3.13t", writer) and
            own_work("python3.13t", starting),
            "own_work: jitring's native code anywhere in a stack with no "
            "Python frame")
    # Between two Python frames it is the call machinery of a call whose
    # copy the hook made: the program's.
    t.check(not own_work("python3.13t", stack([MOD, Call(WORK, CALL_NEW)])),
            "own_work: jitring's native frame between two Python frames is "
            "the program's")


def test_own_package(t):
    # A Python frame of jitring's package: the at-exit stop, the fork
    # hook, any module of it innermost.
    atexit = (native("_PyEval_Vector"), native("atexit_callfuncs"),
              native("_PyAtExit_Call"), native("Py_FinalizeEx"),
              native("Py_RunMain"), native("main"), native("_start"))
    t.check(own_work("python3.13t", stack([own_py("stop")], start=atexit)),
            "own_work: the at-exit stop()")
    fork = (native("_PyEval_Vector"), native("PyObject_Vectorcall"),
            native("run_at_forkers"), native("PyOS_AfterFork_Child"),
            native("os_fork_impl"), native("os_fork"),
            native("cfunction_vectorcall_NOARGS"))
    t.check(own_work("python3.13t", stack(
        [MOD, WORK, Call(own_py("_after_fork_child"), fork)])),
        "own_work: the fork hook in the program's os.fork()")
    for mod in ("__init__.py", "_autostart.py", "_target.py", "_running.py",
                "record/cli.py", "output/flame.py", "perf/script.py"):
        t.check(own_work("python3.13t", stack([MOD, own_py("f", mod)])),
                "own_work: a frame of jitring/%s innermost" % mod)
    t.check(own_work("python3.13t", stack([MOD, runner("parse")])),
            "own_work: a frame of the runner's module that is not one of "
            "the frames that call the program")
    # ... or above the program's frames: the runner's uncaught() calling
    # the program's sys.excepthook.
    t.check(own_work("python3.13t", stack(
        list(RUNNER) + [runner("uncaught"), py("hook")])),
        "own_work: the package's uncaught() above the program's hook")
    t.check(not own_work("python3.13t", stack([MOD, py("f", APP +
                                                       "/mypkg/__init__.py")]))
            and not own_work("python3.13t", stack(
                [MOD, py("f", APP + "/jitring_tools/_report.py")])),
            "own_work: a module named like the package's elsewhere is the "
            "program's")
    # The runner's frame innermost: its own work before the program's
    # first line.
    t.check(own_work("python3.13t", stack(RUNNER, leaf=(
        native("PyImport_ImportModuleLevelObject"),))) and
        own_work("python3.13t", stack(RUNNER[:4])),
        "own_work: the runner's frame innermost")
    t.check(not own_work("python3.13t", runner_stack([MOD, WORK])),
            "own_work: the runner's frames above the program's")
    # runpy's frames before the runner's first (--no-children: no hook
    # names the thread): the interpreter's start-up.
    t.check(not own_work("python3.13t", stack(RUNNER[:2])),
            "own_work: runpy's frames alone are left as start-up")


def test_own_attach(t):
    # record --pid: the request script's frame, whichever way the service
    # ran it, above the program's frames.
    handle = py("handle", APP + "/srv.py")
    remote = (native("_PyEval_Vector"), native("PyEval_EvalCode"),
              native("_PyRunRemoteDebugger"), native("_Py_HandlePending"))
    for path in ("<string>", "/tmp/jitring-1000/attach-4242.py"):
        t.check(own_work("python3.13t", stack(
            [None, handle, Call(request(path), remote)], start=THREAD)),
            "own_work: the attach request's frame (%s)" % path)
    t.check(not own_work("python3.13t", stack(
        [None, handle, Call(py("_jitring_request", APP + "/srv.py"),
                            remote)], start=THREAD)) and
        not own_work("python3.13t", stack(
            [None, handle, Call(py("helper", "<string>"), remote)],
            start=THREAD)),
        "own_work: a function of that name in another file, or another "
        "function in <string>, is the program's")


def test_own_kept(t):
    # Everything else stays: start-up before the hook, the exit after
    # the at-exit stop, a thread, the program under the runner, -m.
    for what, frames in (("start-up", STARTUP), ("exit", FINI),
                         ("a thread", stack(list(BOOTSTRAP) + [WORK],
                                            start=THREAD)),
                         ("the runner's program", runner_stack(
                             [MOD, WORK])),
                         ("-m's program", module_stack())):
        t.check(not own_work("python3.13t", frames),
                "own_work: %s is the program's" % what)


def module_stack(leaf=()):
    """`python -m jitring -m pkg.mod`: the runner's run_module() runs
    runpy, which runs the module (root first: runpy, the runner, runpy
    again, the program)."""
    return stack(list(RUNNER[:4]) + [
        runner("run_module"), runpy("_run_module_as_main"),
        runpy("_run_code"), Call(py("<module>", APP + "/pkg/mod.py"), EXEC),
        py("work", APP + "/pkg/mod.py")], leaf)


def test_program_stack(t):
    t.check(program_stack(stack([MOD, MAIN_F, WORK])) ==
            [N[MOD], N[MAIN_F], N[WORK]],
            "program_stack: the Python frames, root first, the "
            "interpreter's frames between them, under <module> and the "
            "innermost one's eval loop dropped")
    t.check(program_stack(stack([MOD, Call(WORK, CALL_NEW)])) ==
            [N[MOD], N[WORK]],
            "program_stack: jitring's hook frame between two Python frames "
            "dropped with the call machinery")
    leaf = (kernel("asm_exc_page_fault"), native("memcpy", LIBC),
            native("PyBytes_FromStringAndSize"))
    t.check(program_stack(stack([MOD, WORK], leaf)) ==
            [N[MOD], N[WORK], "PyBytes_FromStringAndSize [python3.13t]",
             "memcpy [libc.so.6]", "asm_exc_page_fault [kernel]"],
            "program_stack: the native frames under the innermost Python "
            "frame kept in order (interpreter, libc, kernel)")
    leaf = (native("fast_sum", EXT), native("cfunction_vectorcall_FASTCALL"))
    t.check(program_stack(stack([MOD, WORK], leaf)) ==
            [N[MOD], N[WORK], "cfunction_vectorcall_FASTCALL [python3.13t]",
             EXT_LABEL],
            "program_stack: an extension's function under it")
    leaf = (UNKNOWN, ("__vdso_clock_gettime", "[vdso]"), ("anon", ""))
    t.check(program_stack(stack([MOD, WORK], leaf)) ==
            [N[MOD], N[WORK], "anon", "__vdso_clock_gettime", "[unknown]"],
            "program_stack: perf's [unknown], [vdso] and a frame with no "
            "file by their names alone")
    cb = py("cb")
    t.check(program_stack(stack([MOD, MAIN_F, Call(cb, CALL_EXT)])) ==
            [N[MOD], N[MAIN_F],
             "fast_map [_fast.cpython-313t-x86_64-linux-gnu.so]", cb[0]],
            "program_stack: an extension's frame between two Python frames "
            "(a callback) kept, the interpreter's around it dropped")
    t.check(program_stack(stack([MOD, REC, REC, REC])) ==
            [N[MOD], N[REC], N[REC], N[REC]],
            "program_stack: recursion, a frame per call")
    t.check(program_stack(runner_stack([MOD, WORK])) ==
            [N[MOD], N[WORK]] and
            program_stack(runner_stack([MOD, WORK], leaf=(
                native("memcpy", LIBC),))) ==
            [N[MOD], N[WORK], "memcpy [libc.so.6]"],
            "program_stack: the runner's and runpy's frames above the "
            "program dropped, and the natives between them")
    t.check(program_stack(module_stack()) ==
            ["py::<module>:/app/pkg/mod.py", "py::work:/app/pkg/mod.py"],
            "program_stack: -m: runpy's frames under the runner dropped")
    frozen = [runpy(q, frozen=False) for q in ("_run_module_as_main",
                                               "_run_code")]
    t.check(program_stack(stack(frozen + [Call(MOD, EXEC), WORK])) ==
            [N[MOD], N[WORK]],
            "program_stack: runpy from its file (not frozen) dropped too")
    # runpy below the program's first frame (multiprocessing's spawn
    # re-running the main module, a program's run_path()): left out too,
    # the time in it its caller's.
    other = py("<module>", APP + "/other.py")
    rp = [runpy(q, frozen=False) for q in ("run_path", "_run_module_code",
                                           "_run_code")]
    got = program_stack(stack([MOD, MAIN_F] + rp + [Call(other, EXEC)]))
    t.check(got == [N[MOD], N[MAIN_F], other[0]],
            "program_stack: runpy's frames the program calls left out", got)


def test_program_stack_start(t):
    # No Python frame: start-up's native frames, all of them.
    t.check(program_stack(STARTUP) == STARTUP_LABELS,
            "program_stack: start-up with no Python frame, every native "
            "frame", program_stack(STARTUP))
    t.check(program_stack((kernel("page_fault"),)) ==
            ["page_fault [kernel]"] and
            program_stack(()) == ["[interpreter start-up]"],
            "program_stack: a kernel-only stack; an empty one is "
            "[interpreter start-up]")
    # Only runpy's (or the runner's) frames: the native frames below the
    # innermost of them.
    t.check(program_stack(stack(RUNNER[:2], leaf=(
        native("PyImport_ImportModuleLevelObject"),))) ==
        ["_PyEval_EvalFrameDefault [python3.13t]",
         "PyImport_ImportModuleLevelObject [python3.13t]"] and
        program_stack(stack(RUNNER)[1:]) == ["[interpreter start-up]"],
        "program_stack: only runpy's or the runner's frames: the native "
        "frames below them, or [interpreter start-up]")
    prog = py("Server.serve_forever", "/usr/lib/python3/managers.py")
    for path in ("<string>", "/tmp/jitring-0/attach-1.py"):
        t.check(program_stack([request(path), prog]) == [prog[0]],
                "program_stack: the attach request's frame (%s) dropped"
                % path)


def test_is_cut(t):
    main = stack([MOD, MAIN_F] + [REC] * 10)
    thread = stack(list(BOOTSTRAP) + [WORK] + [REC] * 10, start=THREAD)
    t.check(not is_cut(main) and not is_cut(thread),
            "is_cut: a main thread's and a thread's whole stacks")
    at = main.index(MOD) + 1
    t.check(not is_cut(main[:at]) and not is_cut(main[:at + 2]),
            "is_cut: a stack that lost only the start-up frames under "
            "<module> is whole")
    t.check(is_cut(main[:at - 1]) and is_cut(cut_at(main, 20)),
            "is_cut: a stack whose outermost Python frame is a function "
            "and that stops before the thread's start is cut")
    t.check(not is_cut(thread[:thread.index(BOOTSTRAP[0]) + 1]) and
            is_cut(thread[:thread.index(BOOTSTRAP[2]) + 1]),
            "is_cut: a thread's stack is whole down to Thread._bootstrap, "
            "cut from Thread.run")
    r = runner_stack([MOD, MAIN_F, WORK])
    t.check(not is_cut(r[:r.index(RUNNER[2]) + 1]) and
            is_cut(r[:r.index(MAIN_F) + 1]),
            "is_cut: the runner's and runpy's frames are not the "
            "program's outermost")
    for root in ("_start", "__libc_start_main", "__libc_start_call_main",
                 "clone", "clone3", "start_thread", "main", "Py_BytesMain",
                 "Py_Main", "Py_RunMain", "pymain_main", "thread_run",
                 "pythread_wrapper"):
        t.check(not is_cut(cut_at(main, 20) + (native(root, LIBC),)),
                "is_cut: a stack that reaches %s is whole" % root)
    # Frame-pointer unwinding goes on in garbage below glibc's frames.
    t.check(not is_cut(cut_at(main, 20) + (native("start_thread", LIBC),
                                           UNKNOWN, UNKNOWN)),
            "is_cut: a thread's start found above garbage")
    t.check(is_cut((native("memcpy", LIBC), UNKNOWN)) and
            is_cut(cut_at(main, 20) + (UNKNOWN,)),
            "is_cut: native frames that stop in [unknown] are cut")
    t.check(not is_cut((kernel("schedule"), kernel("do_idle"))) and
            not is_cut(()), "is_cut: a stack with no user frame is whole")


def test_cut_note(t):
    head = ("%s of samples have a cut stack ([stack cut: outer frames not "
            "recorded] at the root of the flame graph): the totals of the "
            "outer functions are too low by up to that share.")
    who = "record with" if os.geteuid() == 0 else "root can record with"
    t.check(cut_note({}, 100, 0, 0) == [] and
            cut_note({"call_graph": "fp"}, 10000, 9, 9) == [],
            "cut_note: nothing to say, or under 0.1% cut")
    t.check(cut_note({}, 100, 0, 0, own=1) ==
            ["1 sample of jitring's own work (its start, stop and "
             "bookkeeping in the program's processes) left out."] and
            cut_note({}, 0, 0, 0, own=3) ==
            ["3 samples of jitring's own work (its start, stop and "
             "bookkeeping in the program's processes) left out."],
            "cut_note: jitring's own samples left out, counted")
    # python/README.md's example (fp mode, sid's 3.15), at 0.1% exactly.
    got = cut_note({"call_graph": "fp", "max_stack": 127}, 1000, 427, 407)
    t.check(got == [
        head % "42.7%",
        "  40.7%% hit perf's limit of 127 frames (each Python call is "
        "several native frames); to record deeper stacks, %s --max-stack "
        "1024 (kernel.perf_event_max_stack=1024 for the recording only), "
        "or with --call-graph dwarf --stack-size 65528 (no frame limit; "
        "stack copies make a far bigger folder)" % who,
        "  2.0% stop in native code perf cannot unwind without frame "
        "pointers (--call-graph dwarf reads those)"],
        "cut_note: fp mode, at perf's limit and in native code", got)
    got = cut_note({"call_graph": "fp", "max_stack": 512}, 1000, 1, 1)
    t.check(len(got) == 2 and got[0] == head % "0.1%" and
            "limit of 512 frames" in got[1] and
            "--max-stack 2048 (kernel.perf_event_max_stack=2048 " in got[1],
            "cut_note: fp mode at --max-stack 512: four times as many "
            "asked for", got)
    got = cut_note({"call_graph": "fp"}, 200, 10, 0)
    t.check(got == [head % "5.0%",
                    "  5.0% stop in native code perf cannot unwind without "
                    "frame pointers (--call-graph dwarf reads those)"],
            "cut_note: fp mode, none at the limit", got)
    dwarf = ("  dwarf mode copied %d bytes of each sample's stack; record "
             "with --stack-size %d for deeper stacks (perf.data grows with "
             "it)")
    for meta, line in (({}, dwarf % (8192, 32768)),
                       ({"call_graph": "dwarf", "stack_size": 20000},
                        dwarf % (20000, 40000)),
                       ({"stack_size": 32768}, dwarf % (32768, STACK_MAX)),
                       ({"stack_size": STACK_MAX}, None)):
        got = cut_note(meta, 100, 50, 0, own=2)
        want = ["2 samples of jitring's own work (its start, stop and "
                "bookkeeping in the program's processes) left out.",
                head % "50.0%"] + ([line] if line else [])
        t.check(got == want, "cut_note: dwarf mode, %s" % meta, got)


def outer_file(t):
    """record --pid's running-frames.json for pid 42's thread 43 (in a
    serve_loop since before the window) in a folder; that folder and the
    names running() gives them."""
    out = os.path.join(t.scratch, "running")
    os.makedirs(out, exist_ok=True)
    th = LIB + "/threading.py"
    with open(os.path.join(out, "running-frames.json"), "w") as f:
        json.dump({"pid": 42, "threads": [{"tid": 43, "frames": [
            ["Thread._bootstrap", th, 1012],
            ["Thread._bootstrap_inner", th, 1075],
            ["Thread.run", th, 1012],
            ["serve_loop", APP + "/srv.py", 10]]}]}, f)
    return out, (BOOTSTRAP[0][0], BOOTSTRAP[1][0], BOOTSTRAP[2][0],
                 "py::serve_loop:/app/srv.py")


HANDLE = py("handle", APP + "/srv.py")
PARSE = py("parse", APP + "/srv.py")


def test_with_running(t):
    out, outer = outer_file(t)
    t.check(running(out, 42) == {43: outer} and running(out, 7) == {},
            "running: the frames of the thread, named as script() names "
            "them; none for another process")
    whole = stack([None, HANDLE], leaf=(native("memcpy", LIBC),),
                  start=THREAD)
    t.check(with_running(whole, outer) ==
            (list(outer) + [HANDLE[0], "memcpy [libc.so.6]"], False),
            "with_running: the running frames above the outermost named "
            "one, the unnamed frames dropped")
    t.check(with_running(stack([None, HANDLE, PARSE], start=THREAD),
                         outer) ==
            (list(outer) + [HANDLE[0], PARSE[0]], False),
            "with_running: named frames in order under them")
    # Cut outside the outermost named frame: libc's memcpy at the leaf is
    # no thread start.
    cut = whole[:whole.index(HANDLE) + 3]
    t.check(with_running(cut, outer) ==
            (list(outer) + [CUT, HANDLE[0], "memcpy [libc.so.6]"], True),
            "with_running: a cut stack has [stack cut] between the running "
            "frames and its own")
    t.check(with_running(cut + (("[unknown]", LIBC),), outer) ==
            (list(outer) + [HANDLE[0], "memcpy [libc.so.6]"], False),
            "with_running: a stack that reaches a stripped libc's frame is "
            "whole")
    t.check(with_running(stack([None], leaf=SLEEP, start=THREAD), outer) ==
            (list(outer) + SLEEP_LABELS, False),
            "with_running: no named frame: the native frames inside the "
            "innermost eval loop (a sleep) under the running frames")
    t.check(with_running(stack([None], start=THREAD), outer) ==
            (list(outer), False) and
            with_running((EVAL, UNKNOWN), outer) == (list(outer), False),
            "with_running: the loop's own body is the innermost running "
            "frame")
    stripped = tuple(SLEEP[:7]) + (("[unknown]", PYTHON315),) * 4 + \
        (("[unknown]", LIBC),) * 2
    t.check(with_running(stripped, outer) ==
            (list(outer) + SLEEP_LABELS[3:], False),
            "with_running: a stripped interpreter: the native frames "
            "outside it at the leaf")
    bare = (kernel("schedule"), kernel("do_epoll_wait"),
            native("ext_poll", EXT), native("start_thread", LIBC),
            native("clone3", LIBC))
    t.check(with_running(bare, outer) ==
            (list(outer) + ["ext_poll [_fast.cpython-313t-x86_64-linux-"
                            "gnu.so]", "do_epoll_wait [kernel]",
                            "schedule [kernel]"], False),
            "with_running: no frame of the interpreter: all but the "
            "thread's start")


def write_procs(t, lines):
    """processes.jsonl of @lines (text, each a line) in a folder of its
    own; that folder."""
    out = os.path.join(t.scratch, "procs-%d" % len(os.listdir(t.scratch)))
    os.mkdir(out)
    with open(os.path.join(out, "processes.jsonl"), "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return out


RUN = ["/usr/bin/python3.13t", "-m", "jitring", "--dir", "/tmp/rec",
       "--engine", "rings"]


def main_samples():
    """The samples of test_summarize and what it expects of them."""
    a = stack([MOD, MAIN_F, WORK])
    deep60 = cut_at(stack([MOD, MAIN_F] + [REC] * 30), 60)
    deep127 = cut_at(stack([MOD, MAIN_F] + [REC] * 40), 127)
    nojr = (EVAL, native("PyEval_EvalCode"), native("Py_RunMain"),
            native("main"))
    sh = (native("main", "/usr/bin/dash"), native("_start", "/usr/bin/dash"))
    reaper = (kernel("schedule"), native("start_thread", LIBC),
              native("clone3", LIBC))
    s = (samples(a, 5) + samples(stack([MOD, MAIN_F, HELPER]), 3) +
         samples(stack([MOD, MAIN_F, WORK], leaf=(native("memcpy", LIBC),)),
                 2) +
         samples(STARTUP) +
         # The same stack as the first five (one tuple) in jitring's
         # thread: its own, though the stack was classified before.
         samples(a, 2, comm="jitring-own", tid=44) +
         samples(stack([MOD, REC, REC, REC])) + samples(deep60) +
         samples(deep127) +
         samples(stack([MOD, MAIN_F, CHILD]), 4, pid=43) +
         # A process without jitring; its first sample jitring's own.
         samples(reaper, pid=50, comm="jitring-reaper") +
         samples(nojr, 2, pid=50) + samples(sh, pid=51, comm="sh"))
    p42, p43 = "python3.13t a.py -v [42]", \
        "python3.13t a.py -v (fork of 42) [43]"
    p50, p51 = "python3.13t (without jitring) [50]", "sh [51]"
    folded = {
        (p42, N[MOD], N[MAIN_F], N[WORK]): 5,
        (p42, N[MOD], N[MAIN_F], N[HELPER]): 3,
        (p42, N[MOD], N[MAIN_F], N[WORK], "memcpy [libc.so.6]"): 2,
        (p42,) + tuple(STARTUP_LABELS): 1,
        (p42, N[MOD], N[REC], N[REC], N[REC]): 1,
        # Four frames a Python call: 15 of rec in 60 frames, 32 in 127.
        (p42, CUT) + (N[REC],) * 15: 1,
        (p42, CUT) + (N[REC],) * 32: 1,
        (p43, N[MOD], N[MAIN_F], N[CHILD]): 4,
        (p50, "main [python3.13t]", "Py_RunMain [python3.13t]",
         "PyEval_EvalCode [python3.13t]",
         "_PyEval_EvalFrameDefault [python3.13t]"): 2,
        (p51, "_start [dash]", "main [dash]"): 1}
    return s, folded


def test_summarize(t):
    out = write_procs(t, [
        json.dumps({"pid": 42, "ppid": 1, "how": "start",
                    "argv": RUN + ["a.py", "-v"]}),
        json.dumps({"pid": 43, "ppid": 42, "how": "fork",
                    "argv": RUN + ["a.py", "-v"]})])
    procs = processes(out)
    s, want = main_samples()
    folded, per, total, rows, cut = summarize(s, procs, None)
    t.check(folded == want, "summarize: the folded stacks under "
            "\"command [pid]\", jitring's samples left out",
            sorted(set(folded.items()) ^ set(want.items())))
    t.check(per == [(14, 42, "python3.13t a.py -v"),
                    (4, 43, "python3.13t a.py -v (fork of 42)"),
                    (2, 50, "python3.13t (without jitring)"),
                    (1, 51, "sh")] and total == 21,
            "summarize: samples per process, most first", (per, total))
    t.check(cut == (21, 2, 1, 3), "summarize: (samples, cut, cut at perf's "
            "limit of 127, jitring's own)", cut)
    got = {name: (tot, slf) for tot, slf, name in rows}
    t.check(got == {N[MOD]: (15, 0), N[MAIN_F]: (14, 0), N[WORK]: (7, 7),
                    N[HELPER]: (3, 3), N[REC]: (3, 3), N[CHILD]: (4, 4)},
            "summarize: total (a recursive function once a sample) and "
            "self (native frames under a function its own) per function, "
            "over the processes", got)
    t.check(sum(slf for _, slf, _ in rows) + no_python(folded) == total,
            "summarize: the self column and the samples with no Python "
            "frame add up to the whole")
    _, _, _, _, cut = summarize(s, procs, None, limit=62)
    t.check(cut == (21, 2, 2, 3), "summarize: at perf's limit of 62, both "
            "cut stacks at it (the limit less 2)", cut)
    folded, per, total, rows, cut = summarize(s, procs, 43)
    t.check(folded == {k: n for k, n in want.items()
                       if k[0].endswith("[43]")} and
            per == [(4, 43, "python3.13t a.py -v (fork of 42)")] and
            total == 4 and cut == (4, 0, 0, 0) and
            sorted(rows) == [(4, 0, N[MOD]), (4, 0, N[MAIN_F]),
                             (4, 4, N[CHILD])],
            "summarize: the top process only (--no-children): the others' "
            "samples, their own work included, not counted",
            (folded, per, cut))
    folded, per, total, _, _ = summarize([], procs, None)
    t.check((folded, per, total) == ({}, [], 0), "summarize: no samples")


def test_summarize_outer(t):
    out, outer = outer_file(t)
    whole = stack([None, HANDLE], start=THREAD)
    cut = stack([None, HANDLE], leaf=(native("memcpy", LIBC),),
                start=THREAD)
    cut = cut[:cut.index(HANDLE) + 3]
    s = (samples(whole, 3, tid=43) +
         samples(stack([None], leaf=SLEEP, start=THREAD), 2, tid=43) +
         samples(cut, tid=43) +
         # A thread the service did not list; another process's tid 43.
         samples(whole, 2, tid=44) +
         samples(stack([MOD, WORK]), pid=99, tid=43))
    procs = processes(write_procs(t, [json.dumps(
        {"pid": 42, "ppid": 1, "how": "attach",
         "argv": ["/usr/bin/python3.13t", "/app/srv.py"]})]))
    folded, per, total, rows, cuts = summarize(s, procs, None,
                                               outer=(42, running(out, 42)))
    p42 = "python3.13t /app/srv.py [42]"
    o = tuple(outer)
    want = {(p42,) + o + (HANDLE[0],): 3,
            (p42,) + o + tuple(SLEEP_LABELS): 2,
            (p42,) + o + (CUT, HANDLE[0], "memcpy [libc.so.6]"): 1,
            (p42, HANDLE[0]): 2,
            ("python3.13t (without jitring) [99]", N[MOD], N[WORK]): 1}
    t.check(folded == want, "summarize, --pid: the running frames at the "
            "root of the listed thread's samples only",
            sorted(set(folded.items()) ^ set(want.items())))
    got = {name: (tot, slf) for tot, slf, name in rows}
    t.check(got == {o[0]: (6, 0), o[1]: (6, 0), o[2]: (6, 0),
                    o[3]: (6, 2), HANDLE[0]: (6, 6), N[MOD]: (1, 0),
                    N[WORK]: (1, 1)},
            "summarize, --pid: the running frames' totals; a sample with "
            "no named frame the innermost one's self", got)
    t.check(total == 9 and cuts == (9, 1, 0, 0) and
            per == [(8, 42, "python3.13t /app/srv.py"),
                    (1, 99, "python3.13t (without jitring)")],
            "summarize, --pid: per process, the cut stack counted",
            (total, cuts, per))


def test_command_of(t):
    out = write_procs(t, [
        json.dumps({"pid": 100, "ppid": 1, "how": "start",
                    "argv": RUN + ["/app/a.py", "x"]}),
        "not json",
        json.dumps({"pid": "x", "argv": ["bad"]}),
        json.dumps([100, 101]),
        json.dumps({"argv": ["no pid"]}),
        json.dumps({"pid": 101, "ppid": 100, "how": "fork",
                    "argv": RUN + ["/app/a.py", "x"]}),
        json.dumps({"pid": 102, "ppid": 1, "how": "start",
                    "argv": ["python3.13t", "-c",
                             "import time\n  time.sleep(1)"]}),
        json.dumps({"pid": 103, "ppid": 1, "how": "start",
                    "argv": RUN + ["-m", "pkg.mod", "a\x01b"]}),
        json.dumps({"pid": 104, "ppid": 100, "how": "fork",
                    "argv": RUN + ["prog.py"] +
                    ["arg%02d" % i for i in range(20)]}),
        json.dumps({"pid": 105, "ppid": 1, "how": "attach"}),
        json.dumps({"pid": 106, "ppid": 1, "how": "start",
                    "argv": "python3.13t a.py"}),
        json.dumps({"pid": 110, "ppid": 1, "how": "start",
                    "argv": ["python3.13t", "x" * 58]}),
        json.dumps({"pid": 111, "ppid": 1, "how": "start",
                    "argv": ["python3.13t", "x" * 59]}),
        '{"pid": 107, "ppid": 1, "how": "st'])     # cut short by a crash
    procs = processes(out)
    t.check(sorted(procs) == list(range(100, 107)) + [110, 111],
            "processes: the records of processes.jsonl, each by its pid, "
            "lines that are not one left out", sorted(procs))
    long = "python3.13t prog.py " + " ".join("arg%02d" % i
                                             for i in range(20))
    for pid, comm, want, what in (
            (100, "python3.13t", "python3.13t /app/a.py x",
             "the runner's words left out, argv[0] by its name"),
            (101, "python3.13t", "python3.13t /app/a.py x (fork of 100)",
             "a fork, its parent named"),
            (102, "python3.13t", "python3.13t -c import time time.sleep(1)",
             "white space in a word as one space"),
            (103, "python3.13t", "python3.13t -m pkg.mod a\\x01b",
             "-m; a control character escaped"),
            (104, "python3.13t", long[:67] + "... (fork of 100)",
             "over 70 characters cut to 67 and ..., before the fork's "
             "words"),
            (110, "python3.13t", "python3.13t " + "x" * 58,
             "70 characters whole"),
            (111, "python3.13t", "python3.13t " + "x" * 55 + "...",
             "71 cut"),
            (105, "srv", "srv", "no argv: the thread's command"),
            (106, "python3.13t", "python3.13t",
             "an argv that is not a list: the thread's command"),
            (107, "python3.13t", "python3.13t (without jitring)",
             "a Python process with no record"),
            (108, "python\n3", "python\\n3 (without jitring)",
             "its command escaped"),
            (109, "sh\x1b", "sh\\x1b", "a process that is not Python's")):
        got = command_of(pid, comm, procs)
        t.check(got == want, "command_of: %s: %r" % (what, want), got)


def test_window(t):
    on = {"attached": True, "window_on_ns": 5000}
    t.check(window_on(on) == 5000 and
            window_on({"window_on_ns": 5000}) == 0 and
            window_on({"attached": True}) == 0 and
            window_on({"attached": True, "window_on_ns": 5000.0}) == 0 and
            window_on({"attached": True, "window_on_ns": "5000"}) == 0,
            "window_on: the service's clock at its start, only for record "
            "--pid and only an int")
    s = samples(stack([MOD, WORK]), 4, time=4998) + \
        samples(STARTUP, pid=43, time=10)
    kept, early = in_window(s, on)
    t.check(kept == s[2:4] and early == 3, "in_window: the samples before "
            "the window left out (any process), counted", (kept, early))
    t.check(in_window(s, {"window_on_ns": 5000}) == (s, 0),
            "in_window: every sample where record ran the program")


def test_folded_stack(t):
    p = "python3.13t a.py [42]"
    lean = [p, N[MOD], N[WORK]]
    t.check(folded_stack(lean + [
        "_PyObject_GenericGetAttrWithDict [python3.13t]",
        "PyObject_Malloc [libpython3.13t.so.1.0]", "memcpy [libc.so.6]",
        EXT_LABEL, "asm_exc_page_fault [kernel]", "[unknown]",
        "_mi_malloc [python3.13t]"]) ==
        lean + ["memcpy [libc.so.6]", EXT_LABEL,
                "asm_exc_page_fault [kernel]", "[unknown]"],
        "folded_stack: the interpreter's frames under the innermost Python "
        "frame left out, the others kept in order")
    t.check(folded_stack(lean) == lean and
            folded_stack([p] + STARTUP_LABELS) == [p] + STARTUP_LABELS,
            "folded_stack: a stack that ends in a Python frame, or has "
            "none, as it is")
    mid = [p, N[MOD], "fast_map [python3.13t]", N[WORK],
           "PyObject_GetAttr [python3.13t]"]
    t.check(folded_stack(mid) == mid[:4] and
            folded_stack([p, CUT, N[REC], "PyObject_GetAttr [python3.13t]"])
            == [p, CUT, N[REC]],
            "folded_stack: only the frames under the innermost Python "
            "frame; a cut stack's root kept")


def test_no_python(t):
    p = "python3.13t a.py [42]"
    folded = {(p, N[MOD], N[WORK]): 5, (p,) + tuple(STARTUP_LABELS): 2,
              (p, CUT, "memcpy [libc.so.6]"): 1,
              # A process that named itself py::...: its name is no frame.
              ("py::evil [7]", "main [evil]"): 3}
    t.check(no_python(folded) == 6 and no_python({}) == 0,
            "no_python: the samples with no Python frame below the "
            "process", no_python(folded))


def test_fmt_name(t):
    for name, where, want in (
            ("py::work:/app/a.py", "/app", "work:a.py"),
            ("py::work:/app/a.py", "/app/", "work:a.py"),
            ("py::work:/application/a.py", "/app",
             "work:/application/a.py"),
            ("py::work:/app/a.py", None, "work:/app/a.py"),
            ("py::work:/app/a.py", (), "work:/app/a.py"),
            ("py::f:/app/sub/m.py", ("/app/sub", "/app"), "f:m.py"),
            ("py::g:/app/o.py", ("/app/sub", "/app"), "g:o.py"),
            ("py::loads:/usr/lib/python3.13t/json/__init__.py", "/app",
             "loads:json/__init__.py"),
            ("py::Thread.run:/usr/lib/python3.15/threading.py", None,
             "Thread.run:threading.py"),
            ("py::get:/usr/local/lib/python3.13/site-packages/r/api.py",
             None, "get:r/api.py"),
            ("py::k:/usr/lib/python3/dist-packages/docutils/core.py", None,
             "k:docutils/core.py"),
            ("py::m:/home/u/venv/lib/python3.13t/site-packages/app/m.py",
             "/home/u", "m:app/m.py"),
            ("py::_run_code:<frozen runpy>", "/app",
             "_run_code:<frozen runpy>"),
            ("py::A.f.<locals>.<lambda>:/app/a.py", "/app",
             "A.f.<locals>.<lambda>:a.py"),
            ("memcpy [libc.so.6]", "/app", "memcpy [libc.so.6]"),
            (CUT, "/app", CUT)):
        got = fmt_name(name, where)
        t.check(got == want, "fmt_name: %s in %r is %s" % (name, where,
                                                           want), got)
    # A qualname holds no ':', a file name may: jitring names a function
    # "py::QUALNAME:FILE" (jitring.output.flame.label() splits at the first).
    got = fmt_name("py::f:/app/v1:2/a.py", "/app")
    t.check(got == "f:v1:2/a.py", "fmt_name: a file whose path holds ':' "
            "is split after the qualname", got)


def test_program_dirs(t):
    base = os.path.realpath(t.scratch)
    w, app = os.path.join(base, "w"), os.path.join(base, "app")
    os.makedirs(os.path.join(base, "real"))
    os.mkdir(w)
    os.mkdir(app)
    os.symlink(os.path.join(base, "real"), os.path.join(base, "link"))
    for meta, want, what in (
            ({"cwd": w, "command": [app + "/a.py"]}, (app, app, w),
             "a script by its absolute path"),
            ({"cwd": w, "command": ["sub/a.py"]},
             (w + "/sub", w + "/sub", w), "by a relative path"),
            ({"cwd": w, "command": ["../app/a.py"]},
             (w + "/../app", app, w), "as python names it and resolved"),
            ({"cwd": base, "command": ["link/a.py"]},
             (base + "/link", base + "/real", base), "through a link"),
            ({"cwd": w, "command": ["-m", "pkg"]}, (w,), "-m"),
            ({"cwd": w, "command": [app + "/a.py"], "attached": True},
             (w,), "record --pid"),
            ({"cwd": w}, (w,), "no command"),
            ({"cwd": w, "command": [5]}, (w,), "a command not a string"),
            ({"command": ["a.py"]}, (), "no working folder"),
            ({"cwd": "", "command": ["a.py"]}, (), "an empty one"),
            ({"cwd": 5, "command": ["a.py"]}, (), "one not a string")):
        got = program_dirs(meta)
        t.check(got == want, "program_dirs: %s" % what, got)
    dirs = program_dirs({"cwd": base, "command": ["link/a.py"]})
    t.check(fmt_name("py::<module>:%s/link/a.py" % base, dirs) ==
            "<module>:a.py" and
            fmt_name("py::f:%s/real/m.py" % base, dirs) == "f:m.py" and
            fmt_name("py::g:%s/lib/n.py" % base, dirs) == "g:lib/n.py",
            "program_dirs: a symlinked script, the module beside its "
            "target and one under the working folder, relative")


if __name__ == "__main__":
    jrtest.main(globals())
