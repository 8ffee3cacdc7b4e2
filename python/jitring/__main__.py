# SPDX-License-Identifier: MIT
"""python -m jitring [--dir D] [--engine rings|mutex] [--perf-map]
                     [--ready-rings N] [--ready-copies N]
                     (script.py | -m module) [args...]
python -m jitring record [options] [--] (script.py | -m module) [args...]
python -m jitring report DIR
python -m jitring check FILE...

The first form runs a script or module as ``python script.py`` /
``python -m module`` would, with jitring profiling active from before its
first line until the interpreter exits (run it under ``perf record -k 1``
yourself).  --ready-rings and --ready-copies are jitring.start()'s
ready_rings and ready_copies: for a program that starts many threads at
once.  ``record`` does the whole pipeline for the program and every Python
process it starts: perf record, perf inject --jit, tables of the hottest
Python functions and a flame graph (``record --help``).  ``report``
finishes a recording whose finishing was interrupted.  ``check``
validates jitdump files (jitring-dump --check --sorted).
"""

import os
import sys


USAGE = ("usage: python -m jitring [--dir D] [--engine rings|mutex] "
         "[--perf-map] [--ready-rings N] [--ready-copies N] "
         "(script.py | -m module) [args...]\n"
         "       python -m jitring record [options] [--] "
         "(script.py | -m module) [args...]\n"
         "       python -m jitring report DIR\n"
         "       python -m jitring check FILE...")


COUNTS = ("--ready-rings", "--ready-copies")


def usage_error(msg=None):
    """As argparse: the usage line and the error on stderr, status 2."""
    sys.stderr.write(USAGE + "\n")
    if msg:
        sys.stderr.write("python -m jitring: error: %s\n" % msg)
    sys.exit(2)


def parse(argv):
    opts = {"dir": None, "engine": "rings", "perf_map": False,
            "ready_rings": 0, "ready_copies": 0}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(USAGE)
            print(__doc__.split("\n\n", 1)[1].strip())
            sys.exit(0)
        if a.startswith("--dir="):
            opts["dir"] = a.split("=", 1)[1]
        elif a.startswith("--engine="):
            opts["engine"] = a.split("=", 1)[1]
        elif a in ("--dir", "--engine"):
            if i + 1 >= len(argv):
                usage_error("%s needs a value" % a)
            opts[a[2:]] = argv[i + 1]
            i += 1
        elif a.partition("=")[0] in COUNTS:
            name, eq, val = a.partition("=")
            if not eq:
                if i + 1 >= len(argv):
                    usage_error("%s needs a value" % name)
                val = argv[i + 1]
                i += 1
            try:
                n = int(val)
            except ValueError:
                n = -1
            if not 0 <= n < 1 << 32:
                usage_error("%s needs a number in [0, 2**32)" % name)
            opts[name[2:].replace("-", "_")] = n
        elif a == "--perf-map":
            opts["perf_map"] = True
        elif a == "-m":
            if i + 1 >= len(argv):
                usage_error("-m needs a module")
            return opts, ("module", argv[i + 1]), argv[i + 2:]
        elif a == "--":
            i += 1
            break
        elif a.startswith("-"):
            usage_error("unknown option %s" % a)
        else:
            break
        i += 1
    if i >= len(argv):
        usage_error("no program: give script.py or -m module")
    return opts, ("script", argv[i]), argv[i + 1:]


def run_script(path):
    """Run @path as python runs a script: in __main__, named by its path
    made absolute (not resolved: python's name for it in __file__ and
    tracebacks), its real directory first on sys.path (a symlinked script
    imports the modules next to its target).  Not runpy.run_path(), which
    imports pkgutil and more (most of python -m jitring's start-up)."""
    import __main__
    import jitring
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        # python's own message and status.
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n"
                         % (sys.executable, path, e.errno, e.strerror))
        sys.exit(2)
    sys.argv[0] = path
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    name = os.path.join(os.getcwd(), path)      # as is when absolute
    fail = uncaught     # the script's globals are this module's: a local
    g = __main__.__dict__
    for k in [k for k in g if k not in ("__builtins__", "__name__")]:
        del g[k]
    g.update(__name__="__main__", __file__=name, __cached__=None,
             __doc__=None, __package__=None, __spec__=None,
             __loader__=None)
    jitring._own_end()          # the program's from here
    try:
        exec(compile(source, name, "exec"), g)
    except SystemExit:
        raise
    except BaseException as e:
        # The script's frames only (none for a SyntaxError).
        fail(e, e.__traceback__.tb_next)


def run_module(target):
    """Run @target as python -m does: through runpy, with its messages
    ("No module named ...") and status."""
    import runpy
    import jitring
    sys.path[0] = os.getcwd()
    fail = uncaught     # the module's globals are this module's: a local
    jitring._own_end()          # the program's from here
    try:
        runpy._run_module_as_main(target, alter_argv=True)
    except SystemExit:
        raise
    except BaseException as e:
        # From runpy's frames on, as python -m prints them.
        fail(e, e.__traceback__.tb_next)


def uncaught(exc, tb):
    """What python does with an exception that its program let escape
    (PyErr_Print): @exc's traceback made @tb, the frames of the program
    only; sys.last_exc and the like set; sys.excepthook (the program's,
    if it set one) called, with python's messages when it is missing or
    fails; then exit status 1, or for KeyboardInterrupt, python's own exit
    by SIGINT once the interpreter has finished.  Runs with the
    program's globals (this module is __main__): imports its own."""
    import sys
    exc.with_traceback(tb)
    sys.last_exc = sys.last_value = exc
    sys.last_type, sys.last_traceback = type(exc), tb
    hook = getattr(sys, "excepthook", None)
    try:
        sys.audit("sys.excepthook", hook, type(exc), exc, tb)
        show = True
    except RuntimeError:
        show = False            # an audit hook's veto: python prints nothing
    except Exception:
        show = True
    if show and hook is None:
        sys.stderr.write("sys.excepthook is missing\n")
        sys.__excepthook__(type(exc), exc, tb)
    elif show:
        try:
            hook(type(exc), exc, tb)
        except SystemExit:
            raise
        except BaseException as e:
            if e.__context__ is exc:    # as if raised with none handled
                e.__context__ = None
            sys.stderr.write("Error in sys.excepthook:\n")
            e.with_traceback(e.__traceback__.tb_next)   # the hook's own
            sys.__excepthook__(type(e), e, e.__traceback__)
            sys.stderr.write("\nOriginal exception was:\n")
            sys.__excepthook__(type(exc), exc, tb)
    if isinstance(exc, KeyboardInterrupt):
        # Let it reach the interpreter (which then ends the process by
        # SIGINT, as for a program of its own), printed already.
        sys.excepthook = lambda *args: None
        raise exc
    sys.exit(1)


def check(paths):
    """python -m jitring check FILE...: jitring-dump --check --sorted."""
    import shutil
    import sysconfig
    if not paths:
        sys.stderr.write("usage: python -m jitring check FILE...\n")
        sys.exit(2)
    here = os.path.dirname(os.path.abspath(__file__))
    tool = None
    for d in (here, sysconfig.get_path("scripts")):
        if d and os.access(os.path.join(d, "jitring-dump"), os.X_OK):
            tool = os.path.join(d, "jitring-dump")
            break
    tool = tool or shutil.which("jitring-dump") or \
        os.environ.get("JITRING_DUMP")
    if not tool:
        sys.exit("jitring check: jitring-dump not found (it is installed "
                 "with the package; or set $JITRING_DUMP)")
    if len(paths) == 1:
        os.execv(tool, [tool, "--check", "--sorted"] + paths)
    # jitring-dump checks one file: each in turn, and which failed.
    import subprocess
    failed = [p for p in paths if subprocess.call(
        [tool, "--check", "--sorted", p]) != 0]
    if failed:
        sys.stderr.write("jitring check: %d of %d failed: %s\n"
                         % (len(failed), len(paths), ", ".join(failed)))
        sys.exit(1)
    sys.exit(0)


def main():
    import jitring
    argv = sys.argv[1:]
    if argv and argv[0] in ("record", "report", "check"):
        jitring._own_end()      # not a program's runner
    else:
        # Under record, this thread is jitring's until the program begins
        # (run_script, run_module); named so already when the .pth hook
        # or the package's import did.
        jitring._own_begin()
    if argv and argv[0] == "record":
        from jitring.record.cli import main
        sys.exit(main(argv[1:]))
    if argv and argv[0] == "report":
        from jitring.record.report import main
        sys.exit(main(argv[1:]))
    if argv and argv[0] == "check":
        check(argv[1:])
    opts, (kind, target), args = parse(argv)
    if opts["engine"] not in ("rings", "mutex"):
        usage_error("--engine must be rings or mutex")
    if opts["dir"] == "":
        usage_error("--dir needs a directory")
    if jitring.is_active():
        # $JITRING_PROFILE started it already (jitring._autostart): the
        # command line's options win.
        jitring.stop()
    try:
        jitring.start(**opts)
    except (OSError, RuntimeError, ValueError) as e:
        sys.exit("jitring: %s" % e)
    import atexit
    atexit.register(jitring.stop)
    sys.argv = [target] + args          # for -m, runpy puts the path in
    if kind == "script":
        run_script(target)
    else:
        run_module(target)


if __name__ == "__main__":
    main()
