# SPDX-License-Identifier: MIT
"""python -m jitring [--dir D] [--engine rings|mutex] [--perf-map]
                     [--ready-rings N] [--ready-copies N]
                     (script.py | -m module) [args...]

Runs a script or module as ``python script.py`` / ``python -m module``
would, with jitring profiling active from before its first line until the
interpreter exits.  --ready-rings and --ready-copies are jitring.start()'s
ready_rings and ready_copies: for a program that starts many threads at
once.
"""

import atexit
import os
import runpy
import sys

import jitring

USAGE = ("usage: python -m jitring [--dir D] [--engine rings|mutex] "
         "[--perf-map] [--ready-rings N] [--ready-copies N] "
         "(script.py | -m module) [args...]")
COUNTS = ("--ready-rings", "--ready-copies")


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
                sys.exit(USAGE)
            opts[a[2:]] = argv[i + 1]
            i += 1
        elif a.partition("=")[0] in COUNTS:
            name, eq, val = a.partition("=")
            if not eq:
                if i + 1 >= len(argv):
                    sys.exit(USAGE)
                val = argv[i + 1]
                i += 1
            try:
                n = int(val)
            except ValueError:
                n = -1
            if not 0 <= n < 1 << 32:
                sys.exit("jitring: %s needs a number in [0, 2**32)\n%s"
                         % (name, USAGE))
            opts[name[2:].replace("-", "_")] = n
        elif a == "--perf-map":
            opts["perf_map"] = True
        elif a == "-m":
            if i + 1 >= len(argv):
                sys.exit(USAGE)
            return opts, ("module", argv[i + 1]), argv[i + 2:]
        elif a == "--":
            i += 1
            break
        elif a.startswith("-"):
            sys.exit("jitring: unknown option %s\n%s" % (a, USAGE))
        else:
            break
        i += 1
    if i >= len(argv):
        sys.exit(USAGE)
    return opts, ("script", argv[i]), argv[i + 1:]


def main():
    opts, (kind, target), args = parse(sys.argv[1:])
    if opts["engine"] not in ("rings", "mutex"):
        sys.exit("jitring: --engine must be rings or mutex")
    if kind == "script":
        sys.argv = [target] + args
        # As python does: the directory of the script's real path (a
        # symlinked script imports the modules next to its target).
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    else:
        sys.argv = [target] + args      # runpy puts the full path in
        sys.path[0] = os.getcwd()
    jitring.start(**opts)
    atexit.register(jitring.stop)
    if kind == "script":
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
